"""A StreamJob's status from one reconcile: revision, positions and lag, conditions.

As for views: Ready means the revision's application runs, `CaughtUp` says whether its consumer
group has read everything its inputs hold. A job reports its position by committing to its
consumer group (`distributary.streamjob` does it after every micro-batch); until it does, the
positions are empty and the lag is each input's size. A refused change, or an application that
keeps failing, makes the job Stalled while the running revision is left as it is.

`deadLetters` is the running revision's count of input records it could not parse, from its last
progress record (`distributary.streamjob` keeps it in Kafka, so it survives restarts); while
the job reports nothing, the count already in status stays.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from distributary.plan.jobs.job_plan import JobPlan
from distributary.plan.revisions.positions import Offsets
from distributary.plan.status.conditions import Observation
from distributary.plan.views.view_status import (
    RunObservation,
    application_findings,
    caught_up,
    input_positions,
    running_fields,
    status_of,
    suspended_message,
    total_lag,
)


def job_positions(plan: JobPlan, committed: Offsets, ends: Offsets) -> list[dict[str, Any]]:
    """Each input's position and lag, as status lists them (lag None while its end is unknown)."""
    sources = [{"log": i.log, "topic": i.topic} for i in plan.inputs]
    return input_positions(sources, committed, ends)


def job_dead_letters(plan: JobPlan, seen: RunObservation, before: Mapping[str, Any]) -> int | None:
    """The running revision's dead letters as it last reported them, else as status had them
    for the same revision."""
    count = (seen.progress or {}).get("deadLetters")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return count
    known = before.get("deadLetters")
    if before.get("revision") == plan.revision and isinstance(known, int):
        return known
    return None


def job_status(
    plan: JobPlan,
    seen: RunObservation,
    previous: Mapping[str, Any] | None,
    generation: int,
    now: datetime,
) -> dict[str, Any]:
    """The status to write for a job (camelCase, as the API stores it)."""
    before = dict(previous or {})
    inputs = job_positions(plan, seen.committed or {}, seen.ends or {}) if seen.ends else []
    lag = total_lag(inputs, seen.committed)
    problems, work = application_findings(seen, now)
    observation = Observation(
        generation,
        problems=(*plan.problems, *problems),
        work=(*plan.waiting, *work),
        extras=caught_up(lag),
        ready_reason="Running",
        ready_message=f"Revision {plan.revision} runs"
        + (f"; lag {lag}" if lag is not None else ""),
        suspended=suspended_message(seen),
    )
    status = status_of(observation, before, now)
    if plan.spec_hash is not None:
        status["revision"] = plan.revision
        status["specHash"] = plan.spec_hash
        status["consumerGroup"] = plan.consumer_group
    if inputs:
        status["inputs"] = inputs
        status["lag"] = lag
    elif plan.inputs and plan.launch is not None:
        status["inputs"] = [{"log": i.log, "topic": i.topic} for i in plan.inputs]
    letters = job_dead_letters(plan, seen, before) if plan.spec_hash is not None else None
    if letters is not None:
        status["deadLetters"] = letters
    status.update(running_fields(seen, plan.change, generation))
    return status
