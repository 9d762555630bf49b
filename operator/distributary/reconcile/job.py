"""A StreamJob's reconcile: a user's own PySpark application, run and tracked like a view.

Run by the operator on every change and by its observer between changes, and by `distributary
run` on every round, in the view's shape (`reconcile.view`):

    parse -> plan (pure, `plan.jobs.job_plan`) -> record ahead -> act -> observe -> record

The plan checks the job in the graph of its namespace; a new revision is recorded in status
before it starts (a write-ahead record); then every other revision of the job is stopped, a
rewind is carried out, and the revision's application runs on the Spark runtime (restarted with
capped back-off when it ends). Status gets positions and lag from the revision's consumer group,
the last batch from the progress topic, the last change's classification and the conditions. A
suspended job (`spec.suspend`) has its revision stopped instead of run, all else as usual. The
job's Logs are its own resources; the one topic a job makes is its dead-letter topic, through the
topic backend as a view's, before its application runs (the job writes its dead letters there).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from distributary.api import owner_of, parse_body
from distributary.api.job import StreamJob
from distributary.backends.base import Owner
from distributary.kafka.admin import KafkaAdminError
from distributary.kafka.rewinds import refused_start
from distributary.plan.applications.children import rewind_folder
from distributary.plan.applications.position_refusals import PositionRefusedError
from distributary.plan.applications.restarts import history_of
from distributary.plan.applications.runner_spec import starting_position
from distributary.plan.applications.spark import DEFAULT_SERVICE_ACCOUNT
from distributary.plan.applications.spark_state import suspended_state
from distributary.plan.edits.write_ahead import job_start_record, replaced_rewind, rewind_message
from distributary.plan.jobs.job_plan import JobPlan, plan_job, refused_revision, with_job_rewind
from distributary.plan.jobs.job_status import job_status
from distributary.plan.revisions.positions import Offsets
from distributary.plan.revisions.progress import progress_key
from distributary.plan.status.conditions import Problem
from distributary.plan.views.view_status import RunObservation, driver_problems
from distributary.reconcile.applications import (
    RewindTarget,
    come_back_for_restart,
    resume,
    rewind_once,
    run_application,
)
from distributary.reconcile.failures import announce
from distributary.reconcile.ports import Events, Services, StatusStore, TryAgain, World

RETRY_SECONDS = 15.0  # before a job whose dead-letter topic Kafka did not make runs again


def _plan(
    job: StreamJob,
    body: Mapping[str, Any],
    status: Any,
    services: Services,
    world: World,
    old: StreamJob | None,
) -> JobPlan:
    seen = world.lineage(body)
    plan = plan_job(
        seen.pipeline,
        seen.children,
        job,
        dict(status),
        checkpoint_root=services.checkpoint_root,
        bootstrap_servers=services.bootstrap_servers,
        kafka_security=services.kafka_security,
        old=old,
    )
    return _starting_guard(plan, job, services, status)


def _starting_guard(
    plan: JobPlan, job: StreamJob, services: Services, status: Mapping[str, Any]
) -> JobPlan:
    """`plan`, or, when the revision it starts (the job's first, or one an edit starts beside
    the running one) would start at a position an input does not have
    (`kafka.rewinds.refused_start`), a plan that starts nothing, says why and keeps the running
    revision as it is (`plan.jobs.job_plan.refused_revision`)."""
    if not plan.starts or plan.launch is None:
        return plan
    topics = {i.log: i.topic for i in plan.inputs}
    for index, item in enumerate(job.spec.inputs):
        field = f"spec.inputs[{index}].startingPosition"
        start = starting_position(item.starting_position)
        try:
            refused = refused_start(services.admin, field, start, topics[item.log], item.log)
        except KafkaAdminError as exc:
            raise TryAgain(f"checking the starting positions: {exc}", RETRY_SECONDS) from exc
        if refused is not None:
            problem = Problem("StartingPositionRefused", _refusal(refused, plan))
            return refused_revision(plan, status, problem)
    return plan


def _refusal(said: str, plan: JobPlan) -> str:
    """What the refusal says, and of a later revision, that the running one runs on."""
    if plan.retires is None:
        return said
    return (
        f"revision {plan.revision} does not start: {said}; revision {plan.retires} runs on "
        "unchanged until the starting position is one the log has"
    )


def _owner(job: StreamJob) -> Owner:
    return Owner("StreamJob", job.metadata.namespace, job.metadata.name)


async def _rewind(
    services: Services,
    store: StatusStore,
    plan: JobPlan,
    job: StreamJob,
    now: datetime,
    generation: int,
) -> tuple[JobPlan, dict[str, Any] | None]:
    """The spec's rewind, carried out once (`rewind_once`); the plan to go on with (on the
    rewind's fresh checkpoint) and the `lastRewind` to record."""
    rewind = job.spec.rewind
    if rewind is None or plan.launch is None or plan.consumer_group is None:
        return plan, None
    last = store.status.get("lastRewind") or {}
    replaced = replaced_rewind(last, rewind.request_id, plan.revision, now)
    if replaced is not None:  # recorded for a revision an edit replaced: not this one's to take
        return plan, replaced
    chosen = set(rewind.inputs) or {i.log for i in plan.inputs}
    target = RewindTarget(
        plan.revision,
        plan.consumer_group,
        sorted({i.topic for i in plan.inputs if i.log in chosen}),
        lambda: services.runtime.stop(_owner(job), [plan.revision]),
        lambda: services.runtime.stopped(_owner(job), plan.revision),
        logs={i.topic: i.log for i in plan.inputs},
    )
    try:
        done = await rewind_once(
            services, store, target, rewind.request_id, rewind.to, now, generation
        )
    except PositionRefusedError as exc:  # nothing moved: the job runs on as it was
        return replace(plan, problems=(*plan.problems, Problem("RewindRefused", str(exc)))), None
    if done is None:
        return plan, None
    return with_job_rewind(
        plan, rewind_folder(rewind.request_id), DEFAULT_SERVICE_ACCOUNT, job
    ), done


async def _make_dead_letter_topic(
    services: Services, plan: JobPlan, job: StreamJob
) -> Problem | None:
    """The job's dead-letter topic, through the topic backend (`plan.jobs.job_plan`); the problem
    when Kafka refused it (the job cannot run until its output Log changes)."""
    letters = plan.dead_letters
    if letters is None or plan.launch is None:
        return None
    outcome = await services.topics.ensure(letters.log, letters.topic, owner_of(job))
    if outcome.refused is not None:
        return Problem("TopicTaken" if outcome.taken else "KafkaRefused", outcome.refused)
    if outcome.unreachable is not None:
        raise TryAgain(f"dead-letter topic: {outcome.unreachable}", RETRY_SECONDS)
    return None


async def _positions(services: Services, plan: JobPlan) -> tuple[Offsets | None, Offsets | None]:
    if plan.consumer_group is None or not plan.inputs:
        return None, None
    admin = services.admin
    try:
        committed = await asyncio.to_thread(admin.committed, plan.consumer_group)
        marks = await asyncio.to_thread(admin.watermarks, [i.topic for i in plan.inputs])
    except KafkaAdminError:
        return None, None
    ends = {t: {p: end for p, (_, end) in parts.items()} for t, parts in marks.items()}
    return committed, ends


async def _act(
    events: Events,
    services: Services,
    store: StatusStore,
    plan: JobPlan,
    job: StreamJob,
    generation: int,
    now: datetime,
) -> tuple[JobPlan, RunObservation, dict[str, Any] | None]:
    """Stop the job's other revisions, carry out a rewind, run the revision and observe it."""
    stopped = await asyncio.to_thread(services.runtime.retire_others, _owner(job), plan.revision)
    if stopped:
        events.info("RevisionStopped", f"Stopped {', '.join(stopped)}.")
    plan, rewound = await _rewind(services, store, plan, job, now, generation)
    if rewound is not None and rewound.get("verified") == "Undone":
        events.warn("RewindUndone", rewind_message(rewound))
    elif rewound is not None:
        events.info("Rewound", rewind_message(rewound))
    refused = await _make_dead_letter_topic(services, plan, job)
    if refused is not None:
        return replace(plan, problems=(*plan.problems, refused)), RunObservation(), rewound
    app = services.runtime.job_app(job, plan.revision, plan.launch, plan.application)
    history = history_of(store.status, app.name, generation)
    if job.spec.suspend:  # stopped where it is: its group, checkpoint and outputs stay
        paused = await asyncio.to_thread(services.runtime.suspend, _owner(job), [plan.revision])
        if paused:
            events.info(
                "Suspended",
                f"Stopped revision {plan.revision} (spec.suspend); its position is kept.",
            )
        state = suspended_state("job", [plan.revision])
    else:
        await resume(events, services, _owner(job), store.status, plan.revision)
        state, history = await run_application(services, app, history, datetime.now(UTC))
    committed, ends = await _positions(services, plan)
    progress = services.progress.poll(timeout=0)
    meta = job.metadata
    key = progress_key("StreamJob", meta.namespace, meta.name, plan.revision)
    seen = RunObservation(
        app.name, state, history, committed, ends, progress.get(key), policy=services.restart_policy
    )
    return plan, seen, rewound


async def reconcile_job(
    body: Mapping[str, Any],
    services: Services,
    store: StatusStore,
    world: World,
    events: Events,
    old_spec: Any = None,
) -> None:
    """One reconcile of the job `body` (as read: its status is `store`'s); see the module
    docstring. `old_spec` is the spec an update replaces, to classify the change field by
    field. Raises `StatusConflictError` and `TryAgain` as a view's reconcile does."""
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    now = datetime.now(UTC)
    status = dict(store.status)
    found = parse_body(body, StreamJob)
    if isinstance(found, str):
        plan = JobPlan(int(status.get("revision") or 1), problems=(Problem("InvalidSpec", found),))
        await store.finish(job_status(plan, RunObservation(), status, generation, now))
        announce(events, status, plan.problems)
        return
    if services.checkpoint_problem is not None:  # nothing runs where checkpoints are lost
        problems = (services.checkpoint_problem,)
        plan = JobPlan(int(status.get("revision") or 1), problems=problems)
        await store.finish(job_status(plan, RunObservation(), status, generation, now))
        announce(events, status, plan.problems)
        return
    old = parse_body(body, StreamJob, old_spec) if old_spec else None
    edited_from = old if isinstance(old, StreamJob) else None
    plan = await asyncio.to_thread(_plan, found, body, status, services, world, edited_from)
    seen, rewound = RunObservation(), None
    if plan.spec_hash is not None:
        if plan.starts:
            await store.record_ahead(job_start_record(plan, generation, now))
            events.info("StartRevision", f"Starting revision {plan.revision}.")
        plan, seen, rewound = await _act(events, services, store, plan, found, generation, now)
    written = job_status(plan, seen, status, generation, now)
    if rewound is not None:
        written["lastRewind"] = rewound
    await store.finish(written)
    announce(events, status, (*plan.problems, *driver_problems(seen)))
    come_back_for_restart(seen, datetime.now(UTC))
