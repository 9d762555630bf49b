"""A StreamJob's status from one reconcile: Ready and CaughtUp, positions, refused edits."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.unit.plan.test_job_plan import job, planned, running

from distributary.plan.applications.spark_state import AppState
from distributary.plan.edits.write_ahead import job_start_record
from distributary.plan.jobs.job_status import job_status
from distributary.plan.views.view_status import RunObservation

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
RUNNING = AppState("RUNNING", running=True)


def kinds(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_running_job_that_read_everything_is_ready_and_caught_up() -> None:
    seen = RunObservation(
        "enrich-r1",
        RUNNING,
        committed={"clicks": {0: 4, 1: 6}},
        ends={"clicks": {0: 4, 1: 6}},
        progress={"batchId": 2, "processedRowsPerSecond": 50.0},
    )
    status = job_status(planned(job()), seen, None, 3, NOW)
    assert kinds(status) == {"Ready": ("True", "Running"), "CaughtUp": ("True", "NoLag")}
    assert (status["revision"], status["consumerGroup"], status["lag"]) == (
        1,
        "distributary.shop.enrich.r1",
        0,
    )
    assert status["inputs"] == [
        {"log": "clicks", "topic": "clicks", "position": {"0": 4, "1": 6}, "lag": 0}
    ]
    assert status["lastProgress"] == {"batchId": 2, "recordsPerSecond": 50.0}


def test_a_job_that_commits_nothing_lags_by_its_inputs_size() -> None:
    seen = RunObservation("enrich-r1", RUNNING, committed={}, ends={"clicks": {0: 4, 1: 6}})
    status = job_status(planned(job()), seen, None, 1, NOW)
    assert status["lag"] == 10
    assert kinds(status)["CaughtUp"] == ("False", "Lag")


def test_lag_is_unknown_while_an_inputs_end_offsets_cannot_be_read() -> None:
    seen = RunObservation("enrich-r1", RUNNING, committed={}, ends={"other": {0: 1}})
    status = job_status(planned(job()), seen, None, 1, NOW)
    assert status["lag"] is None
    assert "CaughtUp" not in kinds(status)


def test_a_refused_edit_stalls_the_job_and_keeps_what_runs() -> None:
    plan = planned(job(inputs=[{"log": "visits"}]), running(job()))
    status = job_status(plan, RunObservation("enrich-r1", RUNNING), running(job()), 4, NOW)
    assert kinds(status)["Stalled"] == ("True", "ChangeForbidden")
    assert status["specHash"] == running(job())["specHash"]
    assert "inputs" not in status  # the running revision's inputs stay as recorded
    assert status["lastChange"]["classification"] == "Forbidden"
    assert status["lastChange"]["generation"] == 4


def test_the_write_ahead_record_names_the_new_revision_before_it_starts() -> None:
    before = job(upgrade={"strategy": "Reprocess"})
    plan = planned(job(arguments=["x"], upgrade={"strategy": "Reprocess"}), running(before))
    record = job_start_record(plan, 7, NOW)
    assert record["pendingAction"]["action"] == "StartRevision"
    assert (record["revision"], record["pendingAction"]["revision"]) == (2, 2)
    assert record["consumerGroup"] == "distributary.shop.enrich.r2"
    assert record["inputs"] == [{"log": "clicks", "topic": "clicks"}]
