"""A view's status from one reconcile: Ready and CaughtUp, restarts, stalls, positions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.unit.plan.test_view_plan import log, planned, view

from distributary.plan.spark_state import AppState, restart_delay, spark_application_state
from distributary.plan.view_plan import ViewPlan
from distributary.plan.view_status import RunObservation, view_status
from distributary.plan.write_ahead import start_record

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def plan() -> ViewPlan:
    result: ViewPlan = planned(
        [log("clicks")], [view("big", "clicks", "SELECT user, n FROM src")], "big"
    )
    return result


def kinds(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_running_caught_up_view_is_ready_with_its_positions() -> None:
    seen = RunObservation(
        "big-r1",
        AppState("RUNNING", running=True),
        0,
        committed={"clicks": {0: 5, 1: 7}},
        ends={"clicks": {0: 5, 1: 7}},
        progress={"batchId": 3, "processedRowsPerSecond": 120.0},
    )
    status = view_status(plan(), seen, None, 2, NOW)
    assert kinds(status) == {
        "Ready": ("True", "Serving"),
        "CaughtUp": ("True", "NoLag"),
        "Reprocessing": ("False", "Serving"),
    }
    assert status["lag"] == 0
    assert status["servingRevision"] == 1
    assert status["outputTopic"] == "big.r1"
    assert status["inputs"] == [
        {"log": "clicks", "alias": "src", "topic": "clicks", "position": {"0": 5, "1": 7}, "lag": 0}
    ]
    assert status["revisions"][0]["phase"] == "Serving"
    assert status["revisions"][0]["caughtUpAt"] == "2026-11-22T12:00:00Z"
    assert status["sparkApplication"] == {"name": "big-r1", "state": "RUNNING", "attempts": 0}
    assert status["lastProgress"] == {"batchId": 3, "recordsPerSecond": 120.0}


def test_lag_is_counted_from_the_group_to_the_end_offsets() -> None:
    seen = RunObservation(
        "big-r1", AppState("RUNNING", running=True), 0, {"clicks": {0: 2}}, {"clicks": {0: 5, 1: 4}}
    )
    status = view_status(plan(), seen, None, 1, NOW)
    assert status["lag"] == 7
    assert kinds(status)["CaughtUp"] == ("False", "Lag")


def test_an_ended_application_restarts_then_stalls_after_repeated_failures() -> None:
    ended = AppState(
        "FAILED", ended=True, failed=True, message="the streaming application ended (FAILED)"
    )
    restarting = view_status(plan(), RunObservation("big-r1", ended, 1), None, 1, NOW)
    assert kinds(restarting)["Reconciling"] == ("True", "Restarting")
    assert "restart 1 is due" in restarting["conditions"][0]["message"]
    still = view_status(plan(), RunObservation("big-r1", ended, 5), None, 1, NOW)
    assert "Stalled" not in kinds(still)  # four restarts done, the fifth is due
    failing = view_status(plan(), RunObservation("big-r1", ended, 6), None, 1, NOW)
    assert kinds(failing)["Stalled"] == ("True", "ApplicationFailing")
    assert "restarted 5 times in a row" in failing["conditions"][0]["message"]


def test_the_write_ahead_record_names_the_revision_before_it_starts() -> None:
    record = start_record(plan(), 3, NOW)
    assert record["pendingAction"]["action"] == "StartRevision"
    assert record["pendingAction"]["generation"] == 3
    assert record["servingRevision"] == 1
    (row,) = record["revisions"]
    assert (row["revision"], row["phase"], row["topic"]) == (1, "Serving", "big.r1")
    assert row["consumerGroup"] == "distributary.shop.big.r1"
    assert row["inputs"] == [{"log": "clicks", "alias": "src", "topic": "clicks"}]
    # The status written after acting clears it.
    seen = RunObservation("big-r1", AppState("RUNNING", running=True))
    assert view_status(plan(), seen, record, 3, NOW)["pendingAction"] is None


def test_spark_operator_states_map_to_running_and_ended() -> None:
    assert spark_application_state(None).state == "ABSENT"
    running = spark_application_state({"status": {"applicationState": {"state": "RUNNING"}}})
    assert running.running
    done = spark_application_state({"status": {"applicationState": {"state": "COMPLETED"}}})
    assert done.ended
    assert done.failed  # a streaming query that completes has failed
    failed = spark_application_state(
        {"status": {"applicationState": {"state": "FAILED", "errorMessage": "OOMKilled"}}}
    )
    assert "OOMKilled" in failed.message
    assert not spark_application_state({"status": {}}).ended


def test_restarts_back_off_exponentially_up_to_five_minutes() -> None:
    assert [restart_delay(n) for n in (1, 2, 3)] == [10, 20, 40]
    assert restart_delay(20) == 300


def test_lag_is_unknown_not_zero_while_the_inputs_end_offsets_are_unread() -> None:
    """A topic whose end offsets could not be read must not make the view look caught up."""
    seen = RunObservation(
        "big-r1", AppState("RUNNING", running=True), 0, committed={}, ends={"elsewhere": {0: 3}}
    )
    status = view_status(plan(), seen, None, 1, NOW)
    assert status["lag"] is None
    assert status["inputs"][0]["lag"] is None
    assert "CaughtUp" not in kinds(status)


def test_data_loss_risk_names_the_revision_input_and_partition() -> None:
    seen = RunObservation(
        "big-r1",
        AppState("RUNNING", running=True),
        0,
        committed={"clicks": {0: 120}},
        ends={"clicks": {0: 1100}},
        starts={"clicks": {0: 100}},
    )
    status = view_status(plan(), seen, None, 1, NOW)
    risk = next(c for c in status["conditions"] if c["type"] == "DataLossRisk")
    assert (risk["status"], risk["reason"]) == ("True", "NearRetention")
    assert risk["message"].startswith("revision 1 reading clicks (clicks) partition 0:")
    safe = RunObservation(
        "big-r1",
        AppState("RUNNING", running=True),
        0,
        committed={"clicks": {0: 1100}},
        ends={"clicks": {0: 1100}},
        starts={"clicks": {0: 100}},
    )
    calm = view_status(plan(), safe, None, 1, NOW)
    assert kinds(calm)["DataLossRisk"] == ("False", "WithinRetention")


def test_each_live_revision_records_how_fast_its_inputs_grow() -> None:
    """What the cutover of a revision catching up on live input goes by (`plan.lifecycle`)."""

    def observed(previous: Any, at: datetime, committed: int, end: int) -> dict[str, Any]:
        seen = RunObservation(
            "big-r1",
            AppState("RUNNING", running=True),
            0,
            {"clicks": {0: committed}},
            {"clicks": {0: end}},
        )
        views = [view("big", "clicks", "SELECT user, n FROM src")]
        planned_now: ViewPlan = planned([log("clicks")], views, "big", previous, generation=1)
        return view_status(planned_now, seen, previous, 1, at)

    first = observed(None, NOW, 900, 1000)
    row = first["revisions"][0]
    assert (row["inputMark"], "inputRate" in row) == (
        {"at": "2026-11-22T12:00:00.000Z", "records": 1000},
        False,
    )
    # 600 records arrived in 12 s: 50 a second, and the mark moves on.
    later = observed(first, NOW.replace(second=12), 1400, 1600)
    row = later["revisions"][0]
    assert (row["inputRate"], row["inputMark"]["records"]) == (50.0, 1600)
    # CaughtUp means keeping up: 200 behind is less than the 500 that arrive in the window
    # (10 s at 50 a second), which is what a revision catching up must reach to serve.
    assert kinds(later)["CaughtUp"] == ("True", "KeepingUp")
    assert later["lag"] == 200
    # 900 behind is more than arrives in the window: not keeping up.
    behind = observed(later, NOW.replace(second=14), 800, 1700)
    assert kinds(behind)["CaughtUp"] == ("False", "Lag")
    # Once the inputs are idle for a measure (ten seconds or more), keeping up is reading
    # everything.
    quiet = observed(behind, NOW.replace(second=40), 1699, 1700)
    settled = observed(quiet, NOW.replace(second=52), 1699, 1700)
    assert settled["revisions"][0]["inputRate"] == 0.0
    assert kinds(settled)["CaughtUp"] == ("False", "Lag")
    done = observed(settled, NOW.replace(second=53), 1700, 1700)
    assert kinds(done)["CaughtUp"] == ("True", "NoLag")
