"""The DerivedView controller: a view's output Log, its revision's topic and Spark application.

One reconcile, run on every change and by the observer (`observer.py`) between changes: check
the view in the graph of its namespace (`plan.view_plan`), record the start of a new revision in
status before acting on it (a write-ahead record: a restarted operator carries it on instead of
starting another), apply the output Log as the view's child, make the revision's topic, run the
application on the configured runtime, restart an application that ended (with capped back-off),
and write status: positions and lag from the revision's consumer group, the last batch from the
progress topic, conditions from all of it. Every step is idempotent, so a crash anywhere is
repaired by the next reconcile. A view never crashes the operator: what is wrong becomes a
condition.
"""

from __future__ import annotations

import asyncio
import copy
import functools
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import kopf

from distributary.api import ResourceError, owner_of, parse_resource
from distributary.api.log import Log
from distributary.api.view import DerivedView
from distributary.controllers import metrics
from distributary.controllers.applications import (
    SPARK_API,
    RewindTarget,
    Runtime,
    rewind_once,
    run_application,
    spark_operator_runtime,
)
from distributary.controllers.settings import OperatorSettings, kafka_security
from distributary.kafka.admin import KafkaAdminError
from distributary.kafka.history import lost_input_history
from distributary.kafka.records import RecordsError
from distributary.kube.resources import KubeError
from distributary.plan.conditions import Problem
from distributary.plan.lifecycle import LIVE, mark_deleted
from distributary.plan.progress import progress_key
from distributary.plan.spark import application_name, spark_application
from distributary.plan.spark_state import restart_delay
from distributary.plan.topics import desired_topic
from distributary.plan.view_plan import (
    LATEST_ANNOTATION,
    SERVING_ANNOTATION,
    ViewPlan,
    holds,
    namespace_pipeline,
    plan_view,
    planning_bodies,
    rewind_folder,
    with_checkpoint,
)
from distributary.plan.view_status import RunObservation, start_record, view_status

GROUP, VERSION = "distributary.dev", "v1alpha1"
API = f"{GROUP}/{VERSION}"


INDEXED_METADATA = (
    "name", "namespace", "uid", "resourceVersion", "generation", "labels", "ownerReferences",
    "deletionTimestamp",
)  # fmt: skip
INDEXED_ANNOTATIONS = (SERVING_ANNOTATION, LATEST_ANNOTATION)


def index_entry(body: kopf.Body) -> dict[str, Any]:
    """What the indexes keep of an object: what planning and observing read (its spec, status
    and identity), not its managedFields or kopf's annotations, which would make up most of the
    operator's memory in a namespace of thousands of objects."""
    meta = body.get("metadata") or {}
    kept = {key: copy.deepcopy(meta[key]) for key in INDEXED_METADATA if key in meta}
    annotations = meta.get("annotations") or {}
    kept["annotations"] = {k: annotations[k] for k in INDEXED_ANNOTATIONS if k in annotations}
    entry = {key: copy.deepcopy(body[key]) for key in ("spec", "status") if key in body}
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": kept,
        **entry,
    }


@kopf.index(GROUP, VERSION, "logs")
def logs_by_namespace(body: kopf.Body, namespace: str | None, **_: Any) -> dict[str, Any]:
    """Every Log, by namespace: the inputs and outputs views are checked against."""
    return {str(namespace): index_entry(body)}


@kopf.index(GROUP, VERSION, "derivedviews")
def views_by_namespace(body: kopf.Body, namespace: str | None, **_: Any) -> dict[str, Any]:
    """Every DerivedView, by namespace: the graph needs all of them to find cycles and writers."""
    return {str(namespace): index_entry(body)}


def indexes_of(found: dict[str, Any]) -> dict[str, Any]:
    """The indexes views and jobs are planned against, which kopf passes to every handler by
    their functions' names (jobs': see `jobs.py`)."""
    return {
        "logs": found["logs_by_namespace"],
        "views": found["views_by_namespace"],
        "jobs": found.get("jobs_by_namespace", {}),
    }


def _view(body: kopf.Body, spec: Any = None) -> DerivedView | str:
    """The view, or the message saying why its spec cannot be used; with `spec`, the view as it
    was with that spec (an update's previous one)."""
    document = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {
            "name": body.meta.get("name"),
            "namespace": body.meta.get("namespace"),
            "uid": body.meta.get("uid"),
        },
        "spec": body.get("spec") if spec is None else spec,
    }
    try:
        found = parse_resource(document)
    except ResourceError as exc:
        return str(exc)
    return found if isinstance(found, DerivedView) else "not a DerivedView"


def _plan(
    view: DerivedView,
    body: kopf.Body,
    status: Any,
    settings: OperatorSettings,
    indexes: Any,
    edited_from: DerivedView | None,
) -> ViewPlan:
    """The view's plan; a reprocess it would start is checked against its inputs' retained
    history first (the retention guard)."""
    namespace = view.metadata.namespace
    writers = [*indexes["views"].get(namespace, []), *indexes.get("jobs", {}).get(namespace, [])]
    logs, lineage = planning_bodies(indexes["logs"].get(namespace, []), writers, dict(body))
    pipeline, children, _invalid = namespace_pipeline(logs, lineage)
    planned = functools.partial(
        plan_view,
        pipeline,
        children,
        view,
        dict(status),
        checkpoint_root=settings.checkpoint_root,
        bootstrap_servers=settings.bootstrap_servers,
        generation=int(body.meta.get("generation") or 0),
        edited_from=edited_from,
        now=datetime.now(UTC),
    )
    plan = planned()
    if plan.starts and plan.runner is not None and plan.runner.revision > 1:
        topics = {s.topic: s.log for s in plan.runner.inputs}
        try:
            lost = lost_input_history(settings.admin, topics, kafka_security())
        except (KafkaAdminError, RecordsError) as exc:  # not without knowing what history it has
            raise kopf.TemporaryError(f"checking the inputs' history: {exc}", delay=15) from exc
        if lost is not None:
            plan = planned(history_lost=lost)
    return plan


def _runtime(settings: OperatorSettings, plan: ViewPlan, view: DerivedView) -> Runtime:
    """The serving revision's application on the configured runtime."""
    runner = plan.runner
    assert runner is not None
    namespace = view.metadata.namespace
    name = application_name(view.metadata.name, runner.revision)
    if settings.spark_runtime == "local":
        local = settings.local_runtime
        # An ended local process is simply started again: nothing to remove.
        return Runtime(
            namespace, name, lambda: local.state(runner), lambda: local.ensure(runner), lambda: None
        )

    def manifest() -> dict[str, Any]:
        owner = owner_of(view)
        return spark_application(runner, view.spec.spark, image=settings.image, owner=owner)

    return spark_operator_runtime(settings, namespace, name, manifest)


async def _make_topics(settings: OperatorSettings, plan: ViewPlan, view: DerivedView) -> None:
    """The revision's output and dead-letter topics, through the configured topic backend."""
    try:
        if settings.topic_backend == "strimzi":
            output = Log.model_validate(plan.output_log)
            owner = owner_of(view)
            for topic in plan.topics:
                await asyncio.to_thread(settings.strimzi.apply, output, topic, owner)
            return
        await asyncio.gather(*(settings.topic_batches.reconcile(t) for t in plan.topics))
    except KafkaAdminError as exc:
        raise kopf.TemporaryError(f"view topics: {exc}", delay=15) from exc


async def _observe(settings: OperatorSettings, plan: ViewPlan) -> dict[str, Any]:
    """Every live revision's consumer group offsets, and its inputs' start and end offsets
    (empty when Kafka does not answer: lag is then unknown, never 0)."""
    assert plan.lifecycle is not None
    rows = [r for r in plan.lifecycle.rows if r["phase"] in LIVE]
    topics = {s.topic for s in plan.runner.inputs} if plan.runner is not None else set()
    topics |= {str(s["topic"]) for r in rows for s in r.get("inputs") or []}
    try:
        groups = {
            int(r["revision"]): await asyncio.to_thread(
                settings.admin.committed, str(r["consumerGroup"])
            )
            for r in rows
            if r.get("consumerGroup")
        }
    except KafkaAdminError:
        return {}
    marks = {}
    for topic in sorted(topics):  # one at a time: a topic that is gone hides no other's offsets
        try:
            marks.update(await asyncio.to_thread(settings.admin.watermarks, [topic]))
        except KafkaAdminError:
            continue
    return {
        "groups": groups,
        "ends": {t: {p: end for p, (_, end) in parts.items()} for t, parts in marks.items()},
        "starts": {t: {p: low for p, (low, _) in parts.items()} for t, parts in marks.items()},
    }


def _stop_revisions(settings: OperatorSettings, view: DerivedView, revisions: Any) -> list[int]:
    """Stop the applications of replaced revisions (idempotent); those that were running."""
    namespace, name = view.metadata.namespace, view.metadata.name
    stopped = []
    for revision in revisions:
        if settings.spark_runtime == "local":
            app = settings.local_runtime.revision(namespace, name, revision)
            if app.pid() is not None:
                settings.local_runtime.stop(app)
                stopped.append(revision)
        elif settings.kube.delete(
            SPARK_API, "SparkApplication", namespace, application_name(name, revision)
        ):
            stopped.append(revision)
    return stopped


def read_topics(readers: Any) -> set[str]:
    """The topics live revisions of these views and jobs read (from their statuses)."""
    found: set[str] = set()
    for body in readers:
        status = body.get("status") or {}
        for item in status.get("inputs") or []:
            found.add(str(item.get("topic")))
        for row in status.get("revisions") or []:
            if row.get("phase") in LIVE:
                found |= {str(i.get("topic")) for i in row.get("inputs") or []}
    return found


def _delete_topics(
    settings: OperatorSettings, topics: Any, busy: set[str], output: dict[str, Any]
) -> list[str]:
    """Delete retired revisions' topics (their output Log says Delete) that no live revision of
    another view or job reads any more (a reader moves off at its own cutover); those now
    gone. Under the strimzi backend a topic goes with its KafkaTopic, which Strimzi's topic
    operator deletes it for (deleting the topic alone, it would make it again)."""
    log = Log.model_validate(output)
    gone = []
    for topic in topics:
        if topic in busy:
            continue
        try:
            if settings.topic_backend == "strimzi":
                settings.strimzi.delete(log, desired_topic(log, topic=topic))
            else:
                settings.admin.delete_topic(topic)
        except (KafkaAdminError, KubeError):
            continue  # tried again on the next reconcile
        gone.append(topic)
    return gone


def _child(plan: ViewPlan, indexes: Any) -> dict[str, Any] | None:
    """The view's output Log as the index holds it, None before it is made."""
    assert plan.output_log is not None
    meta = plan.output_log["metadata"]
    return next(
        (
            log
            for log in indexes["logs"].get(meta["namespace"], [])
            if log["metadata"]["name"] == meta["name"]
        ),
        None,
    )


async def _serve(settings: OperatorSettings, plan: ViewPlan, indexes: Any) -> None:
    """Point the output Log at the serving revision's topic: readers follow `status.topicName`."""
    assert plan.lifecycle is not None
    assert plan.output_log is not None
    serving = plan.lifecycle.row(plan.revision) or {}
    meta = plan.output_log["metadata"]
    child = _child(plan, indexes)
    topic = serving.get("topic")
    if child is None or not topic or (child.get("status") or {}).get("topicName") == topic:
        return
    update = {"topicName": topic}
    await asyncio.to_thread(
        settings.kube.patch_status, API, "Log", meta["namespace"], meta["name"], update
    )


def runtime_revision(plan: ViewPlan) -> int:
    """The revision the plan runs."""
    assert plan.runner is not None
    return plan.runner.revision


async def _rewind(
    settings: OperatorSettings,
    plan: ViewPlan,
    view: DerivedView,
    status: Any,
    now: datetime,
    generation: int,
) -> tuple[ViewPlan, dict[str, Any] | None]:
    """The spec's rewind of the running revision, carried out once (`rewind_once`); the plan to
    go on with (on the rewind's fresh checkpoint) and the `lastRewind` to record."""
    rewind = view.spec.rewind
    runner = plan.runner
    if rewind is None or runner is None or plan.lifecycle is None:
        return plan, None
    chosen = set(rewind.inputs) or {str(s.alias) for s in runner.inputs}
    meta = view.metadata
    target = RewindTarget(
        view.api_version,
        view.kind,
        meta.namespace,
        meta.name,
        runner.revision,
        runner.consumer_group,
        sorted({s.topic for s in runner.inputs if s.alias in chosen}),
        lambda: _stop_revisions(settings, view, [runner.revision]),
    )
    done = await rewind_once(
        settings, target, rewind.request_id, rewind.to, status, now, generation
    )
    if done is None:
        return plan, None
    folder = rewind_folder(rewind.request_id)
    rows = tuple(
        {**row, "checkpoint": folder} if row["revision"] == runner.revision else row
        for row in plan.lifecycle.rows
    )
    moved = replace(
        plan,
        runner=with_checkpoint(runner, folder),
        lifecycle=replace(plan.lifecycle, rows=rows),
    )
    return moved, done


async def reconcile_view(
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    settings: OperatorSettings,
    indexes: Any,
    old_spec: Any = None,
) -> None:
    """One reconcile of a view; see the module docstring. `old_spec` is the spec an edit
    replaced (on an update), to classify the edit."""
    generation = int(body.meta.get("generation") or 0)
    now = datetime.now(UTC)
    found = _view(body)
    if isinstance(found, str):
        problem = Problem("InvalidSpec", found)
        plan = ViewPlan(int(status.get("servingRevision") or 1), problems=(problem,))
        patch.status.update(view_status(plan, RunObservation(), status, generation, now))
        return
    old = _view(body, old_spec) if old_spec else None
    edited_from = old if isinstance(old, DerivedView) else None
    # The indexes change on the event loop: the thread plans from a copy of this namespace's.
    namespace = found.metadata.namespace
    seen_now = {
        kind: {namespace: list(indexes.get(kind, {}).get(namespace, []))}
        for kind in ("logs", "views", "jobs")
    }
    plan = await asyncio.to_thread(_plan, found, body, status, settings, seen_now, edited_from)
    meta = found.metadata
    seen = RunObservation()
    lifecycle = plan.lifecycle
    if plan.starts and plan.runner is not None:
        record = start_record(plan, generation, now)
        await asyncio.to_thread(
            settings.kube.patch_status, found.api_version, found.kind, meta.namespace,
            meta.name, record,
        )  # fmt: skip
        revision = plan.runner.revision
        kopf.info(body, reason="StartRevision", message=f"Starting revision {revision}.")
    if lifecycle is not None and lifecycle.cut_over is not None:
        # The view's status says first which revision serves; the output Log follows it.
        record = {"servingRevision": plan.revision, "revisions": list(lifecycle.rows)}
        await asyncio.to_thread(
            settings.kube.patch_status, found.api_version, found.kind, meta.namespace,
            meta.name, record,
        )  # fmt: skip
        message = f"Revision {lifecycle.cut_over} caught up and serves now."
        kopf.info(body, reason="CutOver", message=message)
    if plan.output_log is not None and lifecycle is not None:
        if not holds(_child(plan, indexes), plan.output_log):  # else: an apply changes nothing
            await asyncio.to_thread(settings.kube.apply, plan.output_log)
        await _serve(settings, plan, indexes)
        stopped = await asyncio.to_thread(_stop_revisions, settings, found, lifecycle.stop)
        if stopped:
            revisions = ", ".join(str(r) for r in stopped)
            kopf.info(body, reason="RevisionStopped", message=f"Stopped revision {revisions}.")
        namespace = meta.namespace
        readers = [
            *indexes["views"].get(namespace, []),
            *indexes.get("jobs", {}).get(namespace, []),
        ]
        busy = read_topics(r for r in readers if r["metadata"]["name"] != meta.name)
        gone = await asyncio.to_thread(
            _delete_topics, settings, lifecycle.delete_topics, busy, plan.output_log
        )
        if gone:
            plan = replace(
                plan, lifecycle=replace(lifecycle, rows=tuple(mark_deleted(lifecycle.rows, gone)))
            )
    rewound = None
    if plan.runner is not None and plan.output_log is not None:
        await _make_topics(settings, plan, found)
        plan, rewound = await _rewind(settings, plan, found, status, now, generation)
        if rewound is not None:
            message = f"Rewound revision {rewound['revision']} ({rewound['requestId']})."
            kopf.info(body, reason="Rewound", message=message)
        attempts = int((status.get("sparkApplication") or {}).get("attempts") or 0)
        runtime = _runtime(settings, plan, found)
        app, attempts = await run_application(settings, runtime, attempts)
        observed = await _observe(settings, plan)
        progress = settings.progress.poll(timeout=0) if settings.progress is not None else {}
        revision = runtime_revision(plan)
        key = progress_key("DerivedView", meta.namespace, meta.name, revision)
        seen = RunObservation(
            runtime.name,
            app,
            attempts,
            ends=observed.get("ends"),
            progress=progress.get(key),
            groups=observed.get("groups") or {},
            starts=observed.get("starts"),
        )
    written = view_status(plan, seen, status, generation, now)
    if rewound is not None:
        written["lastRewind"] = rewound
    patch.status.update(written)
    metrics.record_view(meta.namespace, meta.name, written)
    if seen.app is not None and seen.app.ended:
        # Come back when the restart is due (the timer would too, later).
        delay = restart_delay(seen.attempts)
        raise kopf.TemporaryError(f"{seen.app.message}; restarting in {delay:.0f}s", delay=delay)


@kopf.on.resume(GROUP, VERSION, "derivedviews")
@kopf.on.create(GROUP, VERSION, "derivedviews")
@kopf.on.update(GROUP, VERSION, "derivedviews", field="spec")
async def reconcile(
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    old: Any = None,
    **found: Any,
) -> None:
    """Reconcile a view on every change (an update's previous spec classifies the edit)."""
    with metrics.reconciling("DerivedView"):
        await reconcile_view(body, status, patch, memo.settings, indexes_of(found), old)
