"""Restarts of an application that ended, and when its view or job needs its user.

A streaming application never ends, so one that did has failed (`plan.applications.spark_state`),
whichever runtime runs it. It is started again after a capped exponential back-off: `FIRST_DELAY`,
doubled for each failure in a row, at most `MAX_DELAY`. A failure counts toward the back-off unless
the application had been running stably (`STABLE_AFTER`) before it: a run that long forgives what
came before, so an application that fails once a day is restarted after `FIRST_DELAY` each time,
while one that runs a minute and fails, again and again, waits longer each time. After
`FAILURES_BEFORE_STALLED` failures within `FAILURE_WINDOW` its view or job is Stalled (reason
`ApplicationFailing`, with the last error and the next retry) and every retry waits `MAX_DELAY`; the
retries go on, and Stalled clears once the application has run stably again.

The history (failures in a row, their times within the window, the last error, since when the
application runs, when its restart is due) is kept in the resource's status, in
`status.sparkApplication`, never in memory only: a restarted operator, or a second `distributary
run`, learns it again by reading status, so a restart waits for its due time and the failures
before it still count. An edit of the spec (a new generation) or a new revision's application
starts a fresh history: the user acted, so the next failure is retried quickly again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from distributary.plan.applications.spark_state import AppState
from distributary.plan.status.conditions import parse_time, rfc3339

FIRST_DELAY = 10.0
"""Seconds before the restart after a first failure; doubled for each failure in a row."""

MAX_DELAY = 300.0
"""The longest wait before a restart (5 minutes); every retry waits this long once Stalled."""

STABLE_AFTER = 600.0
"""Seconds an application runs before its failures are forgiven (10 minutes): a failure after a
run this long starts a new history, and a Stalled view or job clears."""

FAILURE_WINDOW = 1800.0
"""The window (30 minutes) in which `FAILURES_BEFORE_STALLED` failures make a view or job
Stalled."""

FAILURES_BEFORE_STALLED = 5
"""Failures within `FAILURE_WINDOW` that make a view or job Stalled (`ApplicationFailing`)."""

FAILURES_KEPT = 20  # failure times kept in status, at most (the window holds fewer by default)
LONGEST_ERROR = 1000  # characters of the last error kept in status
APPLICATION_FAILING = "ApplicationFailing"


@dataclass(frozen=True)
class RestartPolicy:
    """How ended applications are restarted: the back-off, how long a run must last to count as
    stable, and how many failures within which window make a view or job Stalled (documented
    defaults; the operator's flags and the tests choose others)."""

    first_delay: float = FIRST_DELAY
    max_delay: float = MAX_DELAY
    stable_after: float = STABLE_AFTER
    window: float = FAILURE_WINDOW
    failures_before_stalled: int = FAILURES_BEFORE_STALLED

    def delay(self, attempts: int) -> float:
        """Seconds before restart number `attempts` (1, 2, ...) of a failing streak:
        `first_delay`, doubling, at most `max_delay`."""
        exponent = min(max(attempts - 1, 0), 32)
        return float(min(self.first_delay * 2.0**exponent, self.max_delay))


@dataclass(frozen=True)
class RestartHistory:
    """What is known of an application's failures, as `status.sparkApplication` keeps it."""

    attempts: int = 0
    """Failures in a row that count toward the back-off (the restart due included)."""

    failures: tuple[datetime, ...] = ()
    """When it failed, within the window and since its last stable run, oldest first."""

    last_error: str | None = None
    """Why it last failed, as its runtime said."""

    running_since: datetime | None = None
    """Since when it has been seen running (None: it does not run now)."""

    restart_at: datetime | None = None
    """When its restart is due, while it waits for one after a failure."""

    @classmethod
    def from_status(cls, record: Mapping[str, Any] | None) -> RestartHistory:
        """The history `status.sparkApplication` records (a missing or odd field: none)."""
        record = record or {}
        times = [parse_time(str(t)) for t in record.get("failures") or []]
        return cls(
            attempts=int(record.get("attempts") or 0),
            failures=tuple(t for t in times if t is not None),
            last_error=record.get("lastError") or None,
            running_since=parse_time(record.get("runningSince")),
            restart_at=parse_time(record.get("restartAt")),
        )

    def status_fields(self) -> dict[str, Any]:
        """The history as `status.sparkApplication`'s fields (a merge patch: None removes)."""
        return {
            "attempts": self.attempts,
            "failures": [rfc3339(t) for t in self.failures] or None,
            "lastError": self.last_error,
            "runningSince": rfc3339(self.running_since) if self.running_since else None,
            "restartAt": rfc3339(self.restart_at) if self.restart_at else None,
        }

    def due(self, now: datetime) -> bool:
        """Whether the restart it waits for is due."""
        return self.restart_at is not None and now >= self.restart_at

    def restarted(self) -> RestartHistory:
        """The history once the restart is done: no restart waited for, not running yet."""
        return replace(self, restart_at=None, running_since=None)

    def back_off(self) -> float | None:
        """Seconds from the last failure to the restart due, while one is."""
        if self.restart_at is None or not self.failures:
            return None
        return (self.restart_at - self.failures[-1]).total_seconds()

    def recent(self, now: datetime, policy: RestartPolicy) -> tuple[datetime, ...]:
        """The failures within the policy's window before `now`."""
        start = now - timedelta(seconds=policy.window)
        return tuple(t for t in self.failures if t > start)


def _second(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def _second_after(moment: datetime) -> datetime:
    """`moment` rounded up to a whole second, as status records it (never early)."""
    return _second(moment) + timedelta(seconds=1) if moment.microsecond else moment


def history_of(status: Mapping[str, Any], application: str, generation: int) -> RestartHistory:
    """The history of `application` as a view's or job's `status` records it: none when the
    record is another application's (a new revision's) or the spec changed since the status was
    written (its observedGeneration is not `generation`)."""
    record = status.get("sparkApplication") or {}
    if record.get("name") != application or status.get("observedGeneration") != generation:
        return RestartHistory()
    return RestartHistory.from_status(record)


def failed(
    history: RestartHistory, error: str, now: datetime, policy: RestartPolicy
) -> RestartHistory:
    """The history once the application is seen to have failed (ended) at `now`, with `error`:
    the failure counted (after a stable run, as the first of a new history) and its restart
    scheduled, at `max_delay` once the failures within the window make it Stalled."""
    since = history.running_since
    if since is not None and (now - since).total_seconds() >= policy.stable_after:
        history = RestartHistory()  # it ran stably: what came before is forgiven
    failures = (*history.recent(now, policy), _second(now))[-FAILURES_KEPT:]
    attempts = history.attempts + 1
    stalled = len(failures) >= policy.failures_before_stalled
    delay = policy.max_delay if stalled else policy.delay(attempts)
    due = _second_after(now + timedelta(seconds=max(delay, 0.0)))
    if len(error) > LONGEST_ERROR:
        error = error[: LONGEST_ERROR - 3] + "..."
    return RestartHistory(attempts, failures, error or None, None, due)


def observed(
    history: RestartHistory, state: AppState, now: datetime, policy: RestartPolicy
) -> RestartHistory:
    """The history after seeing the application in `state` at `now`: a failure not counted yet
    is counted (`failed`); a run is timed, and once stable clears the history (the last error
    is kept for people); an application starting (or absent) waits for no restart."""
    if state.ended:
        if history.restart_at is not None:
            return history  # counted when first seen: it waits for its restart
        return failed(history, state.message, now, policy)
    if state.running:
        since = history.running_since or _second(now)
        if (now - since).total_seconds() >= policy.stable_after:
            return RestartHistory(last_error=history.last_error, running_since=since)
        return replace(history, running_since=since, restart_at=None)
    return replace(history, running_since=None, restart_at=None)


def stalled(history: RestartHistory, now: datetime, policy: RestartPolicy) -> bool:
    """Whether the application failed `failures_before_stalled` times within the window and has
    not run stably since: its view or job is Stalled (`ApplicationFailing`)."""
    return len(history.recent(now, policy)) >= policy.failures_before_stalled


def duration(seconds: float) -> str:
    """`seconds` for people: 45s, 5m, 1h30m."""
    hours, rest = divmod(max(math.ceil(seconds), 0), 3600)
    minutes, secs = divmod(rest, 60)
    text = "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)
    return text or "0s"


def failing_message(
    history: RestartHistory, state: AppState, now: datetime, policy: RestartPolicy
) -> str:
    """Why a view or job is Stalled with `ApplicationFailing`: how often its application
    failed, the last error, and what happens next (the next retry, or when it clears). Only
    times that stay put: the message changes when something happens, not as time passes."""
    count = len(history.recent(now, policy))
    text = (
        f"the Spark application failed {count} times within {duration(policy.window)}; "
        f"the last error: {history.last_error or 'none given'}"
    )
    if state.ended and history.restart_at is not None:
        return (
            f"{text}; the next retry is at {rfc3339(history.restart_at)}, and retries go on "
            f"every {duration(policy.max_delay)} while it keeps failing"
        )
    if state.running and history.running_since is not None:
        return (
            f"{text}; it runs again since {rfc3339(history.running_since)}, and this clears "
            f"once it has run for {duration(policy.stable_after)}"
        )
    return f"{text}; it was restarted and is {state.state.lower()}"


def restarting_message(history: RestartHistory, state: AppState) -> str:
    """What a view or job waiting for its application's restart says (`Restarting`)."""
    back_off = history.back_off()
    if history.restart_at is None or back_off is None:
        return f"{state.message}; it is restarted now"
    return (
        f"{state.message}; restart {history.attempts} is due at "
        f"{rfc3339(history.restart_at)}, after a back-off of {duration(back_off)}"
    )


@dataclass
class PartRestarts:
    """A failed part's restarts that are not in any status (a Source's connector: Connect keeps
    its state, and the front end looks at it every round): failures in a row, and when the next
    restart is due, on the front end's monotonic clock. The back-off is the policy's."""

    failures: int = 0
    due: float = 0.0

    def failed(self, now: float, policy: RestartPolicy) -> tuple[float | None, bool]:
        """The part is seen failed at `now`: (the delay of the restart scheduled now, or None
        when one was already; whether to restart it now, its back-off over)."""
        if self.due == 0.0:
            delay = policy.delay(self.failures + 1)
            self.due = now + delay
            return delay, False
        if now >= self.due:
            self.failures += 1
            self.due = 0.0
            return None, True
        return None, False


@dataclass
class RoundMemory:
    """What a front end keeps of Sources between rounds, for as long as it runs (the rest is in
    status): each connector's restarts, the connectors restarted since their Source's last step
    (a snapshot they were taking is not to be trusted), and the topics known to be made."""

    restarts: dict[str, PartRestarts] = field(default_factory=dict)  # by namespace/connector
    restarted: set[str] = field(default_factory=set)
    made: set[str] = field(default_factory=set)
