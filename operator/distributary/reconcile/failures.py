"""A reconcile that fails in a way nobody planned for: a condition, never a traceback.

The reconcile turns what it expects (invalid specs, refused edits, Kafka that does not answer)
into conditions itself. What it does not expect (a bug, an error of Kafka or of the API server
that no step catches) reaches the front end, which must still leave the resource saying what
happened and carry on with the others. Both front ends do it the same way from here: the status
gets `Stalled` (reason `ReconcileError`) with one line naming the error, the other conditions as
they were; the resource is tried again with capped exponential back-off; the traceback goes to
the debug log only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from distributary.api.common import Condition
from distributary.plan.status.conditions import (
    READY,
    RECONCILING,
    STALLED,
    ExtraCondition,
    Observation,
    Problem,
    conditions,
)
from distributary.reconcile.ports import Events, TryAgain

RECONCILE_ERROR = "ReconcileError"
FIRST_RETRY, LONGEST_RETRY = 10.0, 300.0  # seconds before a failed reconcile runs again
_LONGEST_LINE = 300


class ReconcileFailedError(TryAgain):
    """A reconcile failed unexpectedly; its status says so (`failure_status`): run it again
    after `delay` seconds."""


def failure_line(exc: BaseException) -> str:
    """The error in one line for people: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line if len(line) <= _LONGEST_LINE else line[: _LONGEST_LINE - 3] + "..."


def retry_delay(attempt: int) -> float:
    """Seconds before the next try after `attempt` failed tries in a row (0 for the first):
    doubling from `FIRST_RETRY`, at most `LONGEST_RETRY`."""
    return min(LONGEST_RETRY, FIRST_RETRY * 2.0 ** min(max(attempt, 0), 16))


def failure_message(kind: str, name: str, exc: BaseException, retried: str) -> str:
    """The condition's message: what failed, the error, and what happens next (`retried`)."""
    return f"the reconcile of {kind} {name} failed unexpectedly ({failure_line(exc)}); {retried}"


def failure_status(
    previous: Mapping[str, Any], message: str, generation: int, now: datetime
) -> dict[str, Any] | None:
    """The status patch that makes the resource Stalled with `ReconcileError` and `message`,
    keeping its other conditions (CaughtUp, Reprocessing, ...) as they were; None when the
    status says so already."""
    old = [Condition.model_validate(c) for c in previous.get("conditions") or []]
    extras = tuple(
        ExtraCondition(c.type, c.status, c.reason, c.message)
        for c in old
        if c.type not in (READY, RECONCILING, STALLED)
    )
    observation = Observation(
        generation, problems=(Problem(RECONCILE_ERROR, message),), extras=extras
    )
    written = [
        c.model_dump(by_alias=True, exclude_none=True) for c in conditions(observation, old, now)
    ]
    if written == list(previous.get("conditions") or []):
        return None
    return {"conditions": written}


def announce(events: Events, previous: Mapping[str, Any], problems: Iterable[Problem]) -> None:
    """A Warning event for each problem that the resource's conditions (`previous` status) do
    not say yet: once when it appears, not at every reconcile that finds it again."""
    said = " ".join(str(c.get("message") or "") for c in previous.get("conditions") or [])
    for problem in problems:
        if problem.message.strip()[:200] not in said:
            events.warn(problem.reason, problem.message)
