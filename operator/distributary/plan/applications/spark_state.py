"""The state of a view's Spark application, whichever runtime runs it, and what follows from it.

The Kubeflow Spark operator reports `status.applicationState.state` (NEW, SUBMITTED, RUNNING,
COMPLETED, FAILED, SUBMISSION_FAILED, PENDING_RERUN, INVALIDATING, SUCCEEDING, FAILING, UNKNOWN)
with an `errorMessage`; the local runtime reports whether its process runs. A streaming query
never finishes, so an application that ended, even with exit code 0, has failed: it is restarted
with capped exponential back-off, and one that keeps failing makes its view or job Stalled
(`plan.applications.restarts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from distributary.plan.status.conditions import Problem

ENDED = {"COMPLETED", "FAILED", "SUBMISSION_FAILED", "SUCCEEDING", "FAILING"}
# Submitted, its driver pod made and not running: the states in which a driver may be stuck.
DRIVER_PENDING = frozenset({"SUBMITTED", "UNKNOWN"})
CHECKPOINT_LOST = "CheckpointLost"  # a runner's state for a revision that must not resume
# A runner's state for a revision whose query Spark refused at start (an analysis error): the
# same query is refused at every start, so it is not restarted; only an edit helps.
QUERY_REFUSED = "QueryRefused"
# The state of a revision whose view or job is suspended (`spec.suspend`): stopped on purpose,
# its position and checkpoint kept; started again, where it stopped, when the spec says so.
APP_SUSPENDED = "SUSPENDED"


def suspended_state(kind: str, revisions: list[int]) -> AppState:
    """What a suspended view's or job's application is, for status and people."""
    which = ", ".join(map(str, revisions)) or "none"
    return AppState(
        APP_SUSPENDED,
        message=f"spec.suspend is true: the {kind}'s Spark application is stopped (revision "
        f"{which}), its position and checkpoint kept; set spec.suspend to false to resume where "
        "it stopped",
    )


@dataclass(frozen=True)
class AppState:
    """A Spark application's state: the runtime's word for it, and what it means;
    `not_starting` says why its driver cannot start, when the runtime knows
    (`plan.applications.driver_pods`)."""

    state: str
    running: bool = False
    ended: bool = False
    failed: bool = False
    message: str = ""
    not_starting: Problem | None = None


def spark_application_state(app: Mapping[str, Any] | None) -> AppState:
    """The state of a SparkApplication from its status (None: not created yet)."""
    if app is None:
        return AppState("ABSENT")
    status = app.get("status") or {}
    state = str((status.get("applicationState") or {}).get("state") or "NEW").upper()
    message = str((status.get("applicationState") or {}).get("errorMessage") or "")
    if state in ENDED:
        ended = f"the streaming application ended ({state})"
        return AppState(
            state, ended=True, failed=True, message=f"{ended}: {message}" if message else ended
        )
    return AppState(state, running=state == "RUNNING", message=message)
