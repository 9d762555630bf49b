"""When `distributary run --until-caught-up` stops: a view with a watermark writes the windows its
last records closed in the micro-batch after them, so the run waits for that batch; a view or job
whose application keeps failing (retried only at the longest back-off), or that is suspended, is
not waited for."""

from __future__ import annotations

import pytest

from distributary.local import run as local_run
from distributary.local.run import CaughtUp
from distributary.local.status import JobRow, LogRow, Snapshot, ViewNote, ViewRow


def snapshot(
    *,
    lag: int = 0,
    event_time: bool = True,
    batch_rows: int | None = 40,
    state: str = "Running",
    failing: str | None = None,
    suspended: str | None = None,
    jobs: tuple[JobRow, ...] = (),
) -> Snapshot:
    view = ViewRow(
        name="per-minute",
        revision=1,
        output_topic="per-minute.r1",
        position={},
        lag=lag,
        state=state,
        records_per_second=0.0,
        dead_letters=0,
        event_time=event_time,
        batch_rows=batch_rows,
        note=ViewNote(failing=failing, suspended=suspended),
    )
    logs = (LogRow("readings", "readings", {0: 40}, 40),)
    return Snapshot(logs=logs, views=(view,), jobs=jobs)


def settled(check: CaughtUp, *snapshots: Snapshot) -> bool:
    return [check(s) for s in snapshots][-1]


def test_a_view_without_a_watermark_is_caught_up_at_lag_0() -> None:
    check = CaughtUp(idle_seconds=0)
    assert settled(check, snapshot(event_time=False), snapshot(event_time=False))


def test_a_view_with_a_watermark_waits_for_the_batch_that_reads_nothing() -> None:
    check = CaughtUp(idle_seconds=0)
    assert not settled(check, snapshot(), snapshot())
    assert check(snapshot(batch_rows=0))


def test_it_is_not_waited_for_longer_than_the_window_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check = CaughtUp(idle_seconds=0)
    assert not settled(check, snapshot(), snapshot())
    monkeypatch.setattr(local_run, "WINDOW_SECONDS", 0.0)
    assert check(snapshot())


def test_new_records_start_the_wait_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_run, "WINDOW_SECONDS", 0.0)
    check = CaughtUp(idle_seconds=0)
    assert settled(check, snapshot(), snapshot())
    monkeypatch.setattr(local_run, "WINDOW_SECONDS", 60.0)
    assert not settled(check, snapshot(lag=5), snapshot(), snapshot())


def test_a_view_whose_application_keeps_failing_is_not_waited_for() -> None:
    check = CaughtUp(idle_seconds=0)
    starting = snapshot(lag=40, state="Starting", event_time=False)
    assert not settled(check, starting, starting)
    failing = "the Spark application failed 5 times within 30m"
    assert check(snapshot(lag=40, state="Starting", event_time=False, failing=failing))


def test_a_job_is_waited_for_until_it_reads_everything_or_keeps_failing() -> None:
    check = CaughtUp(idle_seconds=0)
    behind = JobRow("shout", 1, {}, 3, "Starting", 0)
    done = snapshot(event_time=False)
    assert not settled(check, done, snapshot(event_time=False, jobs=(behind,)))
    failing = JobRow("shout", 1, {}, 3, "ApplicationFailing", 0)
    assert check(snapshot(event_time=False, jobs=(failing,)))


def test_a_suspended_view_or_job_is_not_waited_for() -> None:
    check = CaughtUp(idle_seconds=0)
    behind = snapshot(lag=40, state="Stopped", event_time=False)
    assert not settled(check, behind, behind)
    assert check(snapshot(lag=40, state="Stopped", event_time=False, suspended="spec.suspend"))
    paused = JobRow("shout", 1, {}, 3, "Suspended", 0)
    assert check(snapshot(event_time=False, jobs=(paused,)))
