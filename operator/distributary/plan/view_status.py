"""A DerivedView's status from one reconcile: revisions, positions and lag, conditions.

Ready means the serving revision's application runs; `CaughtUp` says whether it has read all its
inputs hold (lag 0), so `kubectl wait --for=condition=CaughtUp` waits for a pipeline to settle.
Problems only the user can fix (bad SQL, a missing input, an application that keeps failing, an
output change that needs a new revision) make the view Stalled; waiting for an input's topic,
an application that is starting or restarting makes it Reconciling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from distributary.api.common import Condition
from distributary.plan.conditions import (
    ExtraCondition,
    Observation,
    Problem,
    Work,
    conditions,
    rfc3339,
)
from distributary.plan.positions import Offsets
from distributary.plan.progress import records_behind
from distributary.plan.spark_state import ATTEMPTS_BEFORE_STALLED, AppState
from distributary.plan.view_plan import ViewPlan


@dataclass(frozen=True)
class ViewObservation:
    """What the controller saw of a view's serving revision."""

    application: str | None = None
    app: AppState | None = None
    attempts: int = 0
    committed: Offsets | None = None
    ends: Offsets | None = None
    progress: Mapping[str, Any] | None = None


def application_findings(seen: ViewObservation) -> tuple[list[Problem], list[Work]]:
    """What the application's state says: a problem when it keeps failing, work while it
    starts or waits for a restart."""
    app = seen.app
    if app is None or app.running:
        return [], []
    # `attempts` counts the restarts scheduled so far, the one now due included.
    if app.ended and seen.attempts > ATTEMPTS_BEFORE_STALLED:
        done = seen.attempts - 1
        message = f"{app.message}; restarted {done} times in a row, still failing"
        return [Problem("ApplicationFailing", message)], []
    if app.ended:
        return [], [Work("Restarting", f"{app.message}; restart {seen.attempts} is due")]
    return [], [Work("Starting", f"the Spark application is {app.state.lower()}")]


def _observation(
    plan: ViewPlan, seen: ViewObservation, generation: int, lag: int | None
) -> Observation:
    problems, work = application_findings(seen)
    problems = [*plan.problems, *problems]
    if plan.reprocess_pending:
        problems.append(Problem("ReprocessNotStarted", plan.reprocess_pending))
    return Observation(
        generation,
        problems=tuple(problems),
        work=(*plan.waiting, *work),
        extras=caught_up(lag),
        ready_reason="Serving",
        ready_message=f"Revision {plan.revision} runs"
        + (f"; lag {lag}" if lag is not None else ""),
    )


def caught_up(lag: int | None) -> tuple[ExtraCondition, ...]:
    """The `CaughtUp` condition for a consumer `lag` records behind (none while unknown)."""
    if lag is None:
        return ()
    behind = f"{lag} record(s) behind"
    if lag == 0:
        return (ExtraCondition("CaughtUp", "True", "NoLag", behind),)
    return (ExtraCondition("CaughtUp", "False", "Lag", behind),)


def input_positions(plan: ViewPlan, committed: Offsets, ends: Offsets) -> list[dict[str, Any]]:
    """Each input's position and lag, as status lists them."""
    if plan.runner is None:
        return []
    rows = []
    for source in plan.runner.inputs:
        position = committed.get(source.topic, {})
        end = ends.get(source.topic)
        rows.append(
            {
                "log": source.log,
                "alias": source.alias,
                "topic": source.topic,
                "position": {str(p): o for p, o in sorted(position.items())},
                # Unknown, not 0, while the topic's end offsets could not be read.
                "lag": records_behind({source.topic: position}, {source.topic: end})
                if end
                else None,
            }
        )
    return rows


def total_lag(rows: Sequence[Mapping[str, Any]], committed: Offsets | None) -> int | None:
    """The lag over every input; None when the group or any input's end is unknown."""
    if not rows or committed is None or any(row["lag"] is None for row in rows):
        return None
    return sum(int(row["lag"]) for row in rows)


def view_status(
    plan: ViewPlan,
    seen: ViewObservation,
    previous: Mapping[str, Any] | None,
    generation: int,
    now: datetime,
) -> dict[str, Any]:
    """The status to write for a view (camelCase, as the API stores it)."""
    before = dict(previous or {})
    inputs = input_positions(plan, seen.committed or {}, seen.ends or {}) if seen.ends else []
    lag = total_lag(inputs, seen.committed)
    old: Sequence[Condition] = [Condition.model_validate(c) for c in before.get("conditions") or []]
    observation = _observation(plan, seen, generation, lag)
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": [
            c.model_dump(by_alias=True, exclude_none=True)
            for c in conditions(observation, old, now)
        ],
        "pendingAction": None,
    }
    if plan.spec_hash is not None:
        status["servingRevision"] = plan.revision
        status["revisions"] = _revisions(plan, before, lag, now)
    if plan.runner is not None and plan.runner.output is not None:
        status["outputTopic"] = plan.runner.output.topic
    if inputs:
        status["inputs"] = inputs
        status["lag"] = lag
    if seen.application is not None:
        status["sparkApplication"] = {
            "name": seen.application,
            "state": seen.app.state if seen.app else None,
            "attempts": seen.attempts,
        }
    if seen.progress:
        status["lastProgress"] = progress_status(seen.progress)
    return status


def _revisions(
    plan: ViewPlan, before: Mapping[str, Any], lag: int | None, now: datetime
) -> list[dict[str, Any]]:
    rows = [dict(r) for r in before.get("revisions") or [] if r.get("revision") != plan.revision]
    current = next(
        (dict(r) for r in before.get("revisions") or [] if r.get("revision") == plan.revision), {}
    )
    current.update(
        {
            "revision": plan.revision,
            "specHash": plan.spec_hash,
            "phase": "Serving",
            "startedAt": current.get("startedAt") or rfc3339(now),
        }
    )
    if plan.runner is not None and plan.runner.output is not None:
        current["topic"] = plan.runner.output.topic
        current["consumerGroup"] = plan.runner.consumer_group
    if lag is not None:
        current["lag"] = lag
        if lag == 0 and not current.get("caughtUpAt"):
            current["caughtUpAt"] = rfc3339(now)
    return sorted([*rows, current], key=lambda r: int(r["revision"]))


def progress_status(record: Mapping[str, Any]) -> dict[str, Any]:
    """`status.lastProgress` from a runner's progress record."""
    return {
        k: v
        for k, v in {
            "batchId": record.get("batchId"),
            "recordsPerSecond": record.get("processedRowsPerSecond"),
            "batchDurationMs": record.get("batchDurationMs"),
            "timestamp": record.get("timestamp"),
        }.items()
        if v is not None
    }


def start_record(plan: ViewPlan, generation: int, now: datetime) -> dict[str, Any]:
    """The write-ahead record, written before a revision's first start: which revision, from
    which generation, what it writes; a restarted operator carries it on instead of starting
    another."""
    assert plan.runner is not None
    assert plan.runner.output is not None
    moment = rfc3339(now)
    return {
        "pendingAction": {
            "action": "StartRevision",
            "revision": plan.revision,
            "generation": generation,
            "startedAt": moment,
        },
        "servingRevision": plan.revision,
        "revisions": [
            {
                "revision": plan.revision,
                "specHash": plan.spec_hash,
                "topic": plan.runner.output.topic,
                "consumerGroup": plan.runner.consumer_group,
                "phase": "Pending",
                "startedAt": moment,
            }
        ],
    }
