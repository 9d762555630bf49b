"""Crash loops back off: an application's restart history, its back-off and when it stalls.

The history is what `status.sparkApplication` keeps; `observed` steps it from what the runtime
reports at each reconcile. These drive an application through runs and failures at chosen
moments, as the operator would see them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from distributary.plan.applications.restarts import (
    FAILURE_WINDOW,
    FAILURES_BEFORE_STALLED,
    FIRST_DELAY,
    MAX_DELAY,
    STABLE_AFTER,
    RestartHistory,
    RestartPolicy,
    history_of,
    observed,
    stalled,
)
from distributary.plan.applications.spark_state import AppState
from distributary.plan.status.status_patch import merged

START = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
RUNNING = AppState("RUNNING", running=True)
NEW = AppState("NEW")
POLICY = RestartPolicy()


def failed(error: str = "OOMKilled") -> AppState:
    return AppState("FAILED", ended=True, failed=True, message=error)


def loop(
    history: RestartHistory, at: datetime, runs_for: float, times: int, policy: RestartPolicy
) -> tuple[RestartHistory, datetime, list[float]]:
    """The application restarted, running `runs_for` seconds and failing, `times` times; the
    history, the moment, and the back-off before each restart."""
    delays = []
    for n in range(times):
        history = observed(history, RUNNING, at, policy)
        at += timedelta(seconds=runs_for)
        history = observed(history, failed(f"error {n}"), at, policy)
        assert history.restart_at is not None
        delays.append((history.restart_at - at).total_seconds())
        at = history.restart_at
        assert history.due(at)
        history = observed(history.restarted(), NEW, at, policy)
    return history, at, delays


def test_the_documented_defaults() -> None:
    assert (FIRST_DELAY, MAX_DELAY, STABLE_AFTER, FAILURE_WINDOW, FAILURES_BEFORE_STALLED) == (
        10.0,
        300.0,
        600.0,
        1800.0,
        5,
    )
    assert [POLICY.delay(n) for n in (1, 2, 3, 4, 5, 6, 20, 1000)] == [
        10,
        20,
        40,
        80,
        160,
        300,
        300,
        300,
    ]


def test_an_application_that_runs_then_fails_again_and_again_backs_off_then_stalls() -> None:
    history, at, delays = loop(RestartHistory(), START, 30, 7, POLICY)
    # 10 s doubling; from the fifth failure within 30 minutes, the cap.
    assert delays == [10, 20, 40, 80, 300, 300, 300]
    assert stalled(history, at, POLICY)
    assert history.attempts == 7
    assert len(history.failures) == 7
    assert history.last_error == "error 6"


def test_a_failure_is_counted_once_however_often_it_is_seen() -> None:
    history = observed(RestartHistory(), RUNNING, START, POLICY)
    first = observed(history, failed(), START + timedelta(seconds=5), POLICY)
    again = observed(first, failed(), START + timedelta(seconds=9), POLICY)
    assert again == first
    assert first.attempts == 1
    assert not first.due(START + timedelta(seconds=14))
    assert first.due(START + timedelta(seconds=15))


def test_the_due_time_is_never_early_though_status_keeps_whole_seconds() -> None:
    at = START + timedelta(milliseconds=400)
    history = observed(RestartHistory(), failed(), at, POLICY)
    assert history.restart_at == START + timedelta(seconds=11)
    assert history.failures == (START,)
    assert history.back_off() == 11


def test_a_failure_after_a_stable_run_starts_a_new_history() -> None:
    history, at, delays = loop(RestartHistory(), START, 30, 3, POLICY)
    assert delays == [10, 20, 40]
    history = observed(history, RUNNING, at, POLICY)
    at += timedelta(seconds=STABLE_AFTER + 1)
    history = observed(history, failed("late"), at, POLICY)
    assert (history.attempts, history.failures, history.last_error) == (1, (at,), "late")
    assert history.back_off() == FIRST_DELAY


def test_a_stable_run_clears_stalled_and_keeps_the_last_error() -> None:
    history, at, _ = loop(RestartHistory(), START, 30, 5, POLICY)
    assert stalled(history, at, POLICY)
    history = observed(history, RUNNING, at, POLICY)
    at += timedelta(seconds=60)
    history = observed(history, RUNNING, at, POLICY)
    assert stalled(history, at, POLICY)  # running again, not yet stably
    at += timedelta(seconds=STABLE_AFTER)
    history = observed(history, RUNNING, at, POLICY)
    assert not stalled(history, at, POLICY)
    assert (history.attempts, history.failures, history.restart_at) == (0, (), None)
    assert history.last_error == "error 4"
    assert history.running_since is not None


def test_only_failures_within_the_window_make_it_stalled() -> None:
    policy = RestartPolicy(stable_after=3600)
    # Runs of nine minutes: the back-off grows, but fewer than five fail within 30 minutes.
    history, at, delays = loop(RestartHistory(), START, 540, 6, policy)
    assert delays == [10, 20, 40, 80, 160, 300]
    assert not stalled(history, at, policy)
    assert len(history.failures) < FAILURES_BEFORE_STALLED


def test_a_small_policy_for_tests() -> None:
    policy = RestartPolicy(
        first_delay=2, max_delay=12, stable_after=20, window=300, failures_before_stalled=3
    )
    history, at, delays = loop(RestartHistory(), START, 1, 5, policy)
    assert delays == [2, 4, 12, 12, 12]
    assert stalled(history, at, policy)


def test_status_keeps_the_history_across_an_operator_restart() -> None:
    history, at, _ = loop(RestartHistory(), START, 30, 2, POLICY)
    history = observed(history, failed("third"), at + timedelta(seconds=30), POLICY)
    fields = history.status_fields()
    assert fields["attempts"] == 3
    assert fields["lastError"] == "third"
    assert fields["restartAt"] == "2026-11-22T12:02:40Z"  # failed at 12:02:00, 40 s
    assert len(fields["failures"]) == 3
    status = {
        "observedGeneration": 4,
        "sparkApplication": {"name": "big-r1", "state": "FAILED", **fields},
    }
    assert history_of(status, "big-r1", 4) == history
    # Another application (a new revision) or an edit (a new generation) starts afresh.
    assert history_of(status, "big-r2", 4) == RestartHistory()
    assert history_of(status, "big-r1", 5) == RestartHistory()
    # None removes a field in a merge patch: nothing left over from before.
    assert RestartHistory().status_fields() == {
        "attempts": 0,
        "failures": None,
        "lastError": None,
        "runningSince": None,
        "restartAt": None,
    }


def test_a_first_record_leaves_no_empty_field_in_status() -> None:
    """A merge patch's None fields are left out even where the status had no record yet, as the
    API server does (a null in status would not parse as the model's list or string)."""
    patch = {"sparkApplication": {"name": "big-r1", **RestartHistory().status_fields()}}
    assert merged({}, patch) == {"sparkApplication": {"name": "big-r1", "attempts": 0}}
    assert merged({"sparkApplication": "odd"}, patch) == merged({}, patch)
