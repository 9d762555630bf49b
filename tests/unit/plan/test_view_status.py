"""A view's status from one reconcile: Ready and CaughtUp, restarts, stalls, positions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.unit.plan.test_view_plan import log, planned, view

from distributary.plan.applications.restarts import RestartHistory, RestartPolicy
from distributary.plan.applications.spark_state import AppState, spark_application_state
from distributary.plan.edits.write_ahead import start_record
from distributary.plan.views.view_plan import ViewPlan
from distributary.plan.views.view_status import RunObservation, view_status

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
    assert status["sparkApplication"] == {
        "name": "big-r1",
        "state": "RUNNING",
        "attempts": 0,
        "failures": None,
        "lastError": None,
        "runningSince": None,
        "restartAt": None,
    }
    assert status["lastProgress"] == {"batchId": 3, "recordsPerSecond": 120.0}


def test_lag_is_counted_from_the_group_to_the_end_offsets() -> None:
    seen = RunObservation(
        "big-r1",
        AppState("RUNNING", running=True),
        committed={"clicks": {0: 2}},
        ends={"clicks": {0: 5, 1: 4}},
    )
    status = view_status(plan(), seen, None, 1, NOW)
    assert status["lag"] == 7
    assert kinds(status)["CaughtUp"] == ("False", "Lag")


def failed_at(*minutes: int, restart_in: int = 10) -> RestartHistory:
    """A history of failures `minutes` before NOW, the restart due `restart_in` s after NOW."""
    times = tuple(NOW - timedelta(minutes=m) for m in minutes)
    due = NOW + timedelta(seconds=restart_in)
    return RestartHistory(len(times), times, "OOMKilled", None, due)


def test_an_ended_application_restarts_then_stalls_after_repeated_failures() -> None:
    ended = AppState(
        "FAILED", ended=True, failed=True, message="the streaming application ended (FAILED)"
    )
    restarting = view_status(plan(), RunObservation("big-r1", ended, failed_at(0)), None, 1, NOW)
    assert kinds(restarting)["Reconciling"] == ("True", "Restarting")
    assert (
        "the streaming application ended (FAILED); restart 1 is due at 2026-11-22T12:00:10Z, "
        "after a back-off of 10s" in restarting["conditions"][0]["message"]
    )
    still = view_status(
        plan(), RunObservation("big-r1", ended, failed_at(4, 3, 2, 1)), None, 1, NOW
    )
    assert "Stalled" not in kinds(still)  # four failures: the fifth makes it Stalled
    history = failed_at(4, 3, 2, 1, 0, restart_in=300)
    failing = view_status(plan(), RunObservation("big-r1", ended, history), None, 1, NOW)
    assert kinds(failing)["Stalled"] == ("True", "ApplicationFailing")
    assert kinds(failing)["Ready"] == ("False", "ApplicationFailing")
    assert "Reconciling" not in kinds(failing)
    assert failing["conditions"][0]["message"] == (
        "the Spark application failed 5 times within 30m; the last error: OOMKilled; the next "
        "retry is at 2026-11-22T12:05:00Z, and retries go on every 5m while it keeps failing"
    )
    app = failing["sparkApplication"]
    assert (app["attempts"], app["lastError"], app["restartAt"]) == (
        5,
        "OOMKilled",
        "2026-11-22T12:05:00Z",
    )
    assert app["failures"][-1] == "2026-11-22T12:00:00Z"
    # Failures older than the window do not count.
    old = failed_at(40, 35, 2, 1, 0)
    assert "Stalled" not in kinds(
        view_status(plan(), RunObservation("big-r1", ended, old), None, 1, NOW)
    )


def test_a_failing_application_stays_stalled_while_it_runs_until_it_runs_stably() -> None:
    running = AppState("RUNNING", running=True)
    history = RestartHistory(5, failed_at(4, 3, 2, 1, 0).failures, "OOMKilled", NOW)
    seen = RunObservation("big-r1", running, history, policy=RestartPolicy(stable_after=600))
    status = view_status(plan(), seen, None, 1, NOW + timedelta(minutes=5))
    assert kinds(status)["Stalled"] == ("True", "ApplicationFailing")
    assert (
        "it runs again since 2026-11-22T12:00:00Z, and this clears once it has run for 10m"
        in (status["conditions"][0]["message"])
    )
    cleared = RestartHistory(last_error="OOMKilled", running_since=NOW)
    seen = RunObservation("big-r1", running, cleared)
    assert kinds(view_status(plan(), seen, status, 1, NOW + timedelta(minutes=10)))["Ready"] == (
        "True",
        "Serving",
    )


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


def test_lag_is_unknown_not_zero_while_the_inputs_end_offsets_are_unread() -> None:
    """A topic whose end offsets could not be read must not make the view look caught up."""
    seen = RunObservation(
        "big-r1", AppState("RUNNING", running=True), committed={}, ends={"elsewhere": {0: 3}}
    )
    status = view_status(plan(), seen, None, 1, NOW)
    assert status["lag"] is None
    assert status["inputs"][0]["lag"] is None
    assert "CaughtUp" not in kinds(status)


def test_data_loss_risk_names_the_revision_input_and_partition() -> None:
    seen = RunObservation(
        "big-r1",
        AppState("RUNNING", running=True),
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
        committed={"clicks": {0: 1100}},
        ends={"clicks": {0: 1100}},
        starts={"clicks": {0: 100}},
    )
    calm = view_status(plan(), safe, None, 1, NOW)
    assert kinds(calm)["DataLossRisk"] == ("False", "WithinRetention")


def test_each_live_revision_records_how_fast_its_inputs_grow() -> None:
    """What the cutover of a revision catching up on live input goes by
    (`plan.revisions.lifecycle`)."""

    def observed(previous: Any, at: datetime, committed: int, end: int) -> dict[str, Any]:
        seen = RunObservation(
            "big-r1",
            AppState("RUNNING", running=True),
            committed={"clicks": {0: committed}},
            ends={"clicks": {0: end}},
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


def test_a_reader_whose_batches_outlast_the_window_keeps_up_within_two_batches() -> None:
    """Each batch reads everything its input held when it was planned and takes 10 s (two
    outlast the 10 s window) while the inputs grow by 5 records/s: a reader that keeps up is up
    to two batches, 100 records, behind; the batch's length is recorded on the row, and the
    cutover goes by it too (`plan.revisions.lifecycle.keeping_up_seconds`)."""

    def observed(
        previous: Any, at: datetime, committed: int, end: int, ms: int, behind: int = 0
    ) -> Any:
        seen = RunObservation(
            "big-r1",
            AppState("RUNNING", running=True),
            committed={"clicks": {0: committed}},
            ends={"clicks": {0: end}},
            progress={"batchId": 3, "batchDurationMs": ms, "lag": behind},
        )
        views = [view("big", "clicks", "SELECT user, n FROM src")]
        planned_now: ViewPlan = planned([log("clicks")], views, "big", previous, generation=1)
        return view_status(planned_now, seen, previous, 1, at)

    first = observed(None, NOW, 900, 1000, 10_000)
    later = observed(first, NOW.replace(second=12), 960, 1060, 10_000)
    row = later["revisions"][0]
    assert (row["inputRate"], row["batchSeconds"], later["lag"]) == (5.0, 10.0, 100)
    assert kinds(later)["CaughtUp"] == ("True", "KeepingUp")
    # With short batches the window alone counts: 100 behind is more than 10 s of input.
    quick = observed(first, NOW.replace(second=12), 960, 1060, 400)
    assert kinds(quick)["CaughtUp"] == ("False", "Lag")
    # A batch that left records behind when it was planned read a backlog: its length says how
    # long the backlog takes, not how far behind a reader that keeps up is. It is not taken.
    reading = observed(None, NOW, 900, 1000, 10_000, behind=5_000)
    backlog = observed(reading, NOW.replace(second=12), 960, 1060, 10_000, behind=5_000)
    assert "batchSeconds" not in backlog["revisions"][0]
    assert kinds(backlog)["CaughtUp"] == ("False", "Lag")
