"""A view's reconcile: its output Log, its revision's topic and Spark application.

Run by the operator on every change and by its observer between changes, and by `distributary
run` on every round, in one shape:

    parse -> plan (pure, `plan.views.view_plan`) -> record ahead -> act -> observe -> record

The plan checks the view in the graph of its namespace and steps its revisions' lifecycle (the
retention guard refuses a reprocess over lost history). What it decides is recorded in status
before anything acts on it (`plan.edits.write_ahead`: the start of a revision, a cutover), so a
restarted operator carries it on instead of deciding anew. Then the actions: the output Log as
the view's child, pointed at the serving revision's topic; replaced revisions stopped; retired
topics deleted; the revision's topics made; a rewind carried out; the application run (one that
ended restarts with capped back-off), or, while the view is suspended (`spec.suspend`), every live
revision stopped where it is. Last, positions and lag from the revisions' consumer
groups and the last batch from the progress topic go into status with the conditions. Every
step is idempotent, so a crash anywhere is repaired by the next reconcile, and every status
write goes through the front end's store. What is wrong with a view becomes a condition.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from distributary.api import owner_of, parse_body
from distributary.api.log import Log
from distributary.api.view import DerivedView
from distributary.backends.base import Owner
from distributary.graph import Ref
from distributary.kafka.admin import KafkaAdminError
from distributary.kafka.records import RecordsError
from distributary.kafka.rewinds import refused_start
from distributary.kube.errors import KubeError
from distributary.plan.applications.children import rewind_folder, with_checkpoint
from distributary.plan.applications.position_refusals import PositionRefusedError
from distributary.plan.applications.restarts import history_of
from distributary.plan.applications.runner_spec import runner_spec_hash
from distributary.plan.applications.spark_state import QUERY_REFUSED, AppState, suspended_state
from distributary.plan.edits.write_ahead import (
    checked_rewind,
    cutover_record,
    rebuilt_rewind,
    replaced_rewind,
    rewind_message,
    start_record,
)
from distributary.plan.revisions.lifecycle import LIVE, mark_deleted, mark_groups_deleted
from distributary.plan.revisions.progress import progress_key
from distributary.plan.status.conditions import Problem
from distributary.plan.views.view_plan import ViewPlan, first_revision, history_guard, plan_view
from distributary.plan.views.view_status import (
    RunObservation,
    driver_problems,
    query_refused,
    view_status,
)
from distributary.reconcile.applications import (
    RewindTarget,
    come_back_for_restart,
    report_of_clean_exit,
    resume,
    rewind_once,
    run_application,
)
from distributary.reconcile.failures import announce
from distributary.reconcile.ports import Events, Services, StatusStore, TryAgain, World

RETRY_SECONDS = 15.0  # before a view that waits on Kafka (its topics, its history) runs again
LISTING_AGE = 10.0  # seconds a listing of every topic or group may serve a new view's plan


def _plan(
    view: DerivedView,
    body: Mapping[str, Any],
    status: Any,
    services: Services,
    world: World,
    edited_from: DerivedView | None,
) -> ViewPlan:
    """The view's plan; a reprocess it would start is checked against its inputs' retained
    history first (the retention guard)."""
    seen = world.lineage(body)
    output = seen.pipeline.output(Ref.of(view))
    first = 1
    if output is not None and not status.get("revisions"):
        try:  # a view created again goes on past what the one before it left in Kafka
            admin = services.admin
            # Listings shared by the views created together: their earlier topics and groups,
            # if any, are older than that.
            topics, groups = admin.topic_names(LISTING_AGE), admin.group_names(LISTING_AGE)
            first = first_revision(view, output, topics, groups)
        except KafkaAdminError as exc:
            raise TryAgain(f"looking for an earlier view's topics: {exc}", RETRY_SECONDS) from exc
    planned = functools.partial(
        plan_view,
        seen.pipeline,
        seen.children,
        view,
        dict(status),
        checkpoint_root=services.checkpoint_root,
        bootstrap_servers=services.bootstrap_servers,
        kafka_security=services.kafka_security,
        generation=int((body.get("metadata") or {}).get("generation") or 0),
        edited_from=edited_from,
        now=datetime.now(UTC),
        upstream_reprocessing=seen.reprocessing,
        first_revision=first,
    )
    try:
        plan = history_guard(planned(), planned, services.lost_history)
    except (KafkaAdminError, RecordsError) as exc:  # not without knowing what history it has
        raise TryAgain(f"checking the inputs' history: {exc}", RETRY_SECONDS) from exc
    return _starting_guard(plan, view, services)


def _starting_guard(plan: ViewPlan, view: DerivedView, services: Services) -> ViewPlan:
    """`plan`, or, when the view's first revision would start at a position an input does not
    have (`kafka.rewinds.refused_start`), a plan that starts nothing and says why."""
    runner, lifecycle = plan.runner, plan.lifecycle
    if not plan.starts or runner is None or lifecycle is None or lifecycle.beside(runner.revision):
        return plan  # a reprocessing revision reads from the start of its inputs
    index = {str(item.alias): i for i, item in enumerate(view.spec.inputs)}
    allowed = view.spec.upgrade.allow_partial_history
    for source in runner.inputs:
        field = f"spec.inputs[{index.get(str(source.alias), 0)}].startingPosition"
        try:
            refused = refused_start(
                services.admin, field, source.starting_position, source.topic, source.log, allowed
            )
        except KafkaAdminError as exc:
            raise TryAgain(f"checking the starting positions: {exc}", RETRY_SECONDS) from exc
        if refused is not None:
            return ViewPlan(plan.revision, problems=(Problem("StartingPositionRefused", refused),))
    return plan


def _owner(view: DerivedView) -> Owner:
    return Owner("DerivedView", view.metadata.namespace, view.metadata.name)


async def _make_topics(services: Services, plan: ViewPlan, view: DerivedView) -> Problem | None:
    """The revision's output and dead-letter topics, through the topic backend; the problem
    when Kafka refused one (the revision cannot run until the view's spec changes)."""
    assert plan.output_log is not None
    output = Log.model_validate(plan.output_log)
    owner = owner_of(view)
    outcomes = await asyncio.gather(
        *(services.topics.ensure(output, topic, owner) for topic in plan.topics)
    )
    for outcome in outcomes:
        if outcome.refused is not None:
            return Problem("TopicTaken" if outcome.taken else "KafkaRefused", outcome.refused)
    for outcome in outcomes:
        if outcome.unreachable is not None:
            raise TryAgain(f"view topics: {outcome.unreachable}", RETRY_SECONDS)
    return None


async def _observe(services: Services, plan: ViewPlan) -> dict[str, Any]:
    """Every live revision's consumer group offsets, and its inputs' start and end offsets
    (empty when Kafka does not answer: lag is then unknown, never 0)."""
    assert plan.lifecycle is not None
    admin = services.admin
    rows = [r for r in plan.lifecycle.rows if r.phase in LIVE]
    topics = {s.topic for s in plan.runner.inputs} if plan.runner is not None else set()
    topics |= {s.topic for r in rows for s in r.inputs}
    try:
        groups = {
            r.revision: await asyncio.to_thread(admin.committed, r.consumer_group)
            for r in rows
            if r.consumer_group
        }
    except KafkaAdminError:
        return {}
    marks = {}
    for topic in sorted(topics):  # one at a time: a topic that is gone hides no other's offsets
        try:
            marks.update(await asyncio.to_thread(admin.watermarks, [topic]))
        except KafkaAdminError:
            continue
    return {
        "groups": groups,
        "ends": {t: {p: end for p, (_, end) in parts.items()} for t, parts in marks.items()},
        "starts": {t: {p: low for p, (low, _) in parts.items()} for t, parts in marks.items()},
    }


async def _delete_topics(
    services: Services, topics: Any, busy: set[str], output: dict[str, Any]
) -> list[str]:
    """Delete retired revisions' topics (their output Log says Delete) that no live revision of
    another view or job reads any more (a reader moves off at its own cutover); those now
    gone."""
    log = Log.model_validate(output)
    gone = []
    for topic in topics:
        if topic in busy:
            continue
        try:
            await services.topics.delete(log, topic)
        except (KafkaAdminError, KubeError):
            continue  # tried again on the next reconcile
        gone.append(topic)
    return gone


async def _delete_groups(services: Services, owner: Owner, rows: Any) -> list[int]:
    """Delete retired revisions' consumer groups once nothing of their application runs (a
    driver still running could commit and make the group again); the revisions whose group is
    now gone."""
    gone = []
    for row in rows:
        if not await asyncio.to_thread(services.runtime.stopped, owner, row.revision):
            continue  # looked at again on the next reconcile
        try:
            await asyncio.to_thread(services.admin.delete_group, row.consumer_group)
        except KafkaAdminError:
            continue
        gone.append(row.revision)
    return gone


async def _rewind(
    services: Services,
    store: StatusStore,
    plan: ViewPlan,
    view: DerivedView,
    now: datetime,
    generation: int,
) -> tuple[ViewPlan, dict[str, Any] | None]:
    """The spec's rewind of the running revision, carried out once (`rewind_once`); the plan to
    go on with (on the rewind's fresh checkpoint) and the `lastRewind` to record."""
    rewind = view.spec.rewind
    runner = plan.runner
    if rewind is None or runner is None or plan.lifecycle is None:
        return plan, None
    last = store.status.get("lastRewind") or {}
    replaced = replaced_rewind(last, rewind.request_id, runner.revision, now)
    if replaced is not None:  # recorded for a revision an edit replaced: not this one's to take
        return plan, replaced
    if runner.stateful:  # not moved: the plan rebuilds it (`plan.revisions.lifecycle`)
        return plan, rebuilt_rewind(store.status, plan, rewind.request_id, now)
    chosen = set(rewind.inputs) or {str(s.alias) for s in runner.inputs}
    target = RewindTarget(
        runner.revision,
        runner.consumer_group,
        sorted({s.topic for s in runner.inputs if s.alias in chosen}),
        lambda: services.runtime.stop(_owner(view), [runner.revision]),
        lambda: services.runtime.stopped(_owner(view), runner.revision),
        writer=(
            runner.consumer_group
            if runner.output is not None and runner.output.delivery == "ExactlyOnce"
            else None
        ),
        logs={s.topic: s.log for s in runner.inputs},
        partial_history=view.spec.upgrade.allow_partial_history,
    )
    try:
        done = await rewind_once(
            services, store, target, rewind.request_id, rewind.to, now, generation
        )
    except PositionRefusedError as exc:  # nothing moved: the revision runs on as it was
        return replace(plan, problems=(*plan.problems, Problem("RewindRefused", str(exc)))), None
    if done is None:
        return plan, None
    folder = rewind_folder(rewind.request_id)
    rows = tuple(
        row.model_copy(update={"checkpoint": folder}) if row.revision == runner.revision else row
        for row in plan.lifecycle.rows
    )
    moved = replace(
        plan,
        runner=with_checkpoint(runner, folder),
        lifecycle=replace(plan.lifecycle, rows=rows),
    )
    return moved, done


async def _record_ahead(
    events: Events, store: StatusStore, plan: ViewPlan, generation: int, now: datetime
) -> None:
    """Write what the plan is about to do before anything does it: a revision's start, then a
    cutover (the view says first which revision serves; the output Log follows it)."""
    if plan.starts and plan.runner is not None:
        await store.record_ahead(start_record(plan, generation, now))
        events.info("StartRevision", f"Starting revision {plan.runner.revision}.")
        lifecycle = plan.lifecycle
        row = lifecycle.row(plan.runner.revision) if lifecycle is not None else None
        if lifecycle is not None and row is not None and row.reason is not None:
            # Said once, when the rebuild starts: why the serving revision does not go on.
            said = [n for n in lifecycle.notes if f"revision {row.revision} rebuilds" in n]
            events.info(row.reason, said[0] if said else f"Revision {row.revision} rebuilds.")
    lifecycle = plan.lifecycle
    if lifecycle is not None and lifecycle.cut_over is not None:
        await store.record_ahead(cutover_record(plan.revision, lifecycle.rows))
        events.info("CutOver", f"Revision {lifecycle.cut_over} caught up and serves now.")


async def _act_on_revisions(
    events: Events, services: Services, world: World, plan: ViewPlan, view: DerivedView
) -> ViewPlan:
    """Make the output Log and point it at the serving topic, stop replaced revisions, delete
    retired topics no one reads and retired revisions' groups; the plan with those marked
    deleted."""
    lifecycle = plan.lifecycle
    if plan.output_log is None or lifecycle is None:
        return plan
    serving = lifecycle.row(plan.revision)
    # A refused or pending edit changes nothing: the output Log stays as it is.
    if serving is not None and serving.topic and not plan.problems and not plan.waiting:
        await world.serve(plan.output_log, serving.topic)
    stopped = await asyncio.to_thread(services.runtime.stop, _owner(view), lifecycle.stop)
    if stopped:
        events.info("RevisionStopped", f"Stopped revision {', '.join(map(str, stopped))}.")
    busy = world.read_elsewhere(view.metadata.namespace, view.metadata.name)
    gone = await _delete_topics(services, lifecycle.delete_topics, busy, plan.output_log)
    retired = [row for row in lifecycle.rows if row.revision in lifecycle.delete_groups]
    groups = await _delete_groups(services, _owner(view), retired)
    if not gone and not groups:
        return plan
    rows = tuple(mark_groups_deleted(mark_deleted(lifecycle.rows, gone), groups))
    return replace(plan, lifecycle=replace(lifecycle, rows=rows))


async def _keep_live(services: Services, plan: ViewPlan, view: DerivedView) -> None:
    """The live revisions the plan does not run itself (the serving one beside a revision
    catching up; every live one while an edit is refused) run on as they are, unless the view
    is suspended (`_suspend` stops them all)."""
    if plan.lifecycle is None or view.spec.suspend:
        return
    running = plan.runner.revision if plan.runner is not None else None
    others = [revision for revision in plan.lifecycle.live() if revision != running]
    if others:
        await asyncio.to_thread(services.runtime.keep, _owner(view), others)


async def _suspend(
    events: Events, services: Services, plan: ViewPlan, view: DerivedView
) -> AppState:
    """Stop every live revision of a suspended view (`spec.suspend`) where it is: its queries
    checkpoint, its consumer group, topics and checkpoint stay, so that it resumes from there.
    Its state for status."""
    assert plan.runner is not None
    live = plan.lifecycle.live() if plan.lifecycle is not None else [plan.runner.revision]
    # The runtime keeps what each ran: an edit made meanwhile may leave one of them serving
    # beside a new revision, and the view's spec no longer says what that one runs.
    stopped = await asyncio.to_thread(services.runtime.suspend, _owner(view), live)
    if stopped:
        which = ", ".join(map(str, stopped))
        events.info("Suspended", f"Stopped revision {which} (spec.suspend); its position is kept.")
    return suspended_state("view", sorted(live))


async def _run(
    events: Events,
    services: Services,
    store: StatusStore,
    plan: ViewPlan,
    view: DerivedView,
    generation: int,
    now: datetime,
) -> tuple[ViewPlan, RunObservation, dict[str, Any] | None]:
    """Make the revision's topics, carry out a rewind, run the application and observe it."""
    if plan.runner is None or plan.output_log is None:
        return plan, RunObservation(), None
    refused = await _make_topics(services, plan, view)
    if refused is not None:
        return replace(plan, problems=(*plan.problems, refused)), RunObservation(), None
    plan, rewound = await _rewind(services, store, plan, view, now, generation)
    if rewound is not None and rewound.get("verified") == "Undone":
        events.warn("RewindUndone", rewind_message(rewound))
    elif rewound is not None:
        events.info("Rewound", rewind_message(rewound))
    assert plan.runner is not None
    app = services.runtime.view_app(view, plan.runner)
    history = history_of(store.status, app.name, generation)
    progress = services.progress.poll(timeout=0)
    meta = view.metadata
    key = progress_key("DerivedView", meta.namespace, meta.name, plan.runner.revision)
    refused = query_refused(plan, progress.get(key))
    if view.spec.suspend:
        state = await _suspend(events, services, plan, view)
    elif refused is None:

        async def held(ended: AppState) -> bool:  # the runner's report read before a restart
            assert plan.runner is not None
            wanted = runner_spec_hash(plan.runner)
            progress.update(await report_of_clean_exit(services, key, wanted, ended))
            return query_refused(plan, progress.get(key)) is not None

        now = datetime.now(UTC)
        await resume(events, services, _owner(view), store.status, plan.runner.revision)
        state, history = await run_application(services, app, history, now, held)
        refused = query_refused(plan, progress.get(key))
    if refused is not None:  # Spark refuses the same query at every start: not restarted
        history = history.restarted()  # however it was learnt: no restart is waited for
        # Looked at all the same, so that a runtime that runs it learns it is not to run again.
        await asyncio.to_thread(app.state)
        state = AppState(QUERY_REFUSED, message=refused.message)
        plan = replace(plan, problems=(*plan.problems, refused))
    observed = await _observe(services, plan)
    rows = plan.lifecycle.rows if plan.lifecycle is not None else ()
    keys = {
        r.revision: progress_key("DerivedView", meta.namespace, meta.name, r.revision) for r in rows
    }
    # Every revision's last report: each one's dead letters go into its row.
    reports = {revision: progress[k] for revision, k in keys.items() if k in progress}
    seen = RunObservation(
        app.name,
        state,
        history,
        ends=observed.get("ends"),
        progress=progress.get(key),
        groups=observed.get("groups") or {},
        starts=observed.get("starts"),
        reports=reports,
        policy=services.restart_policy,
    )
    return plan, seen, rewound


async def reconcile_view(
    body: Mapping[str, Any],
    services: Services,
    store: StatusStore,
    world: World,
    events: Events,
    old_spec: Any = None,
) -> None:
    """One reconcile of the view `body` (as read: its status is `store`'s); see the module
    docstring. `old_spec` is the spec an edit replaced (on an update), to classify the edit.
    Raises `StatusConflictError` when the view's status changed under it (nothing acted after
    that), `TryAgain` when it must run again later (what it waits for is in its status)."""
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    now = datetime.now(UTC)
    status = dict(store.status)
    found = parse_body(body, DerivedView)
    if isinstance(found, str):
        problem = Problem("InvalidSpec", found)
        plan = ViewPlan(int(status.get("servingRevision") or 1), problems=(problem,))
        await store.finish(view_status(plan, RunObservation(), status, generation, now))
        announce(events, status, plan.problems)
        return
    if services.checkpoint_problem is not None:  # nothing runs where checkpoints are lost
        problems = (services.checkpoint_problem,)
        plan = ViewPlan(int(status.get("servingRevision") or 1), problems=problems)
        await store.finish(view_status(plan, RunObservation(), status, generation, now))
        announce(events, status, plan.problems)
        return
    old = parse_body(body, DerivedView, old_spec) if old_spec else None
    edited_from = old if isinstance(old, DerivedView) else None
    plan = await asyncio.to_thread(_plan, found, body, status, services, world, edited_from)
    await _record_ahead(events, store, plan, generation, now)
    plan = await _act_on_revisions(events, services, world, plan, found)
    await _keep_live(services, plan, found)
    plan, seen, rewound = await _run(events, services, store, plan, found, generation, now)
    written = view_status(plan, seen, status, generation, now)
    if rewound is not None:
        written["lastRewind"] = rewound
    checked = checked_rewind(status.get("lastRewind") or {}, seen.progress)
    if rewound is None and checked is not None:
        written["lastRewind"] = checked
        if checked["verified"] == "Undone":
            events.warn(
                "RewindUndone",
                f"Rewind {checked['requestId']} did not hold: revision {checked['revision']} "
                "started from other offsets than the rewind moved its group to; request it "
                "again with a new requestId.",
            )
    await store.finish(written)
    announce(events, status, (*plan.problems, *driver_problems(seen)))
    come_back_for_restart(seen, datetime.now(UTC))
