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
from datetime import UTC, datetime
from typing import Any

import kopf

from distributary.api import ResourceError, owner_of, parse_resource
from distributary.api.log import Log
from distributary.api.view import DerivedView
from distributary.controllers import metrics
from distributary.controllers.applications import Runtime, run_application
from distributary.controllers.settings import OperatorSettings
from distributary.kafka.admin import KafkaAdminError
from distributary.plan.conditions import Problem
from distributary.plan.positions import Offsets
from distributary.plan.progress import progress_key
from distributary.plan.spark import application_name, spark_application
from distributary.plan.spark_state import AppState, restart_delay, spark_application_state
from distributary.plan.view_plan import ViewPlan, namespace_pipeline, plan_view
from distributary.plan.view_status import ViewObservation, start_record, view_status

GROUP, VERSION = "distributary.dev", "v1alpha1"
SPARK_API = "sparkoperator.k8s.io/v1beta2"


@kopf.index(GROUP, VERSION, "logs")
def logs_by_namespace(body: kopf.Body, namespace: str | None, **_: Any) -> dict[str, Any]:
    """Every Log, by namespace: the inputs and outputs views are checked against."""
    return {str(namespace): copy.deepcopy(dict(body))}


@kopf.index(GROUP, VERSION, "derivedviews")
def views_by_namespace(body: kopf.Body, namespace: str | None, **_: Any) -> dict[str, Any]:
    """Every DerivedView, by namespace: the graph needs all of them to find cycles and writers."""
    return {str(namespace): copy.deepcopy(dict(body))}


def _indexes(found: dict[str, Any]) -> dict[str, Any]:
    """The indexes, which kopf passes by their functions' names (jobs': see `jobs.py`)."""
    return {
        "logs": found["logs_by_namespace"],
        "views": found["views_by_namespace"],
        "jobs": found.get("jobs_by_namespace", {}),
    }


def _view(body: kopf.Body) -> DerivedView | str:
    document = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {
            "name": body.meta.get("name"),
            "namespace": body.meta.get("namespace"),
            "uid": body.meta.get("uid"),
        },
        "spec": body.get("spec"),
    }
    try:
        found = parse_resource(document)
    except ResourceError as exc:
        return str(exc)
    return found if isinstance(found, DerivedView) else "not a DerivedView"


def _plan(
    view: DerivedView, body: kopf.Body, status: Any, settings: OperatorSettings, indexes: Any
) -> ViewPlan:
    namespace = view.metadata.namespace
    logs = list(indexes["logs"].get(namespace, []))
    views = [
        v
        for v in indexes["views"].get(namespace, [])
        if v["metadata"]["name"] != view.metadata.name
    ]
    views.append(dict(body))
    views += indexes.get("jobs", {}).get(namespace, [])  # writers of logs too
    pipeline, children, _invalid = namespace_pipeline(logs, views)
    return plan_view(
        pipeline,
        children,
        view,
        dict(status),
        checkpoint_root=settings.checkpoint_root,
        bootstrap_servers=settings.bootstrap_servers,
    )


def _runtime(settings: OperatorSettings, plan: ViewPlan, view: DerivedView) -> Runtime:
    """The serving revision's application on the configured runtime."""
    runner = plan.runner
    assert runner is not None
    namespace = view.metadata.namespace
    name = application_name(view.metadata.name, plan.revision)
    if settings.spark_runtime == "local":
        local = settings.local_runtime
        # An ended local process is simply started again: nothing to remove.
        return Runtime(
            namespace, name, lambda: local.state(runner), lambda: local.ensure(runner), lambda: None
        )

    def state() -> AppState:
        return spark_application_state(
            settings.kube.get(SPARK_API, "SparkApplication", namespace, name)
        )

    def start() -> AppState:
        owner = owner_of(view)
        manifest = spark_application(runner, view.spec.spark, image=settings.image, owner=owner)
        settings.kube.apply(manifest)
        return state()

    def remove() -> None:
        settings.kube.delete(SPARK_API, "SparkApplication", namespace, name)

    return Runtime(namespace, name, state, start, remove)


async def _make_topics(settings: OperatorSettings, plan: ViewPlan, view: DerivedView) -> None:
    """The revision's output and dead-letter topics, through the configured topic backend."""
    try:
        if settings.topic_backend == "strimzi":
            output = Log.model_validate(plan.output_log)
            owner = owner_of(view)
            for topic in plan.topics:
                await asyncio.to_thread(settings.strimzi.apply, output, topic, owner)
            return
        for topic in plan.topics:
            await asyncio.to_thread(settings.topics.apply, topic)
    except KafkaAdminError as exc:
        raise kopf.TemporaryError(f"view topics: {exc}", delay=15) from exc


async def _positions(
    settings: OperatorSettings, plan: ViewPlan
) -> tuple[Offsets | None, Offsets | None]:
    if plan.runner is None:
        return None, None
    topics = [source.topic for source in plan.runner.inputs]
    try:
        committed = await asyncio.to_thread(settings.admin.committed, plan.runner.consumer_group)
        marks = await asyncio.to_thread(settings.admin.watermarks, topics)
    except KafkaAdminError:
        return None, None
    ends = {t: {p: end for p, (_, end) in parts.items()} for t, parts in marks.items()}
    return committed, ends


async def reconcile_view(
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    settings: OperatorSettings,
    indexes: Any,
) -> None:
    """One reconcile of a view; see the module docstring."""
    generation = int(body.meta.get("generation") or 0)
    now = datetime.now(UTC)
    found = _view(body)
    if isinstance(found, str):
        problem = Problem("InvalidSpec", found)
        plan = ViewPlan(int(status.get("servingRevision") or 1), problems=(problem,))
        patch.status.update(view_status(plan, ViewObservation(), status, generation, now))
        return
    plan = _plan(found, body, status, settings, indexes)
    seen = ViewObservation()
    if plan.runner is not None and plan.output_log is not None:
        if plan.starts:
            record = start_record(plan, generation, now)
            meta = found.metadata
            await asyncio.to_thread(
                settings.kube.patch_status,
                found.api_version,
                found.kind,
                meta.namespace,
                meta.name,
                record,
            )
            kopf.info(body, reason="StartRevision", message=f"Starting revision {plan.revision}.")
        await asyncio.to_thread(settings.kube.apply, plan.output_log)
        await _make_topics(settings, plan, found)
        attempts = int((status.get("sparkApplication") or {}).get("attempts") or 0)
        runtime = _runtime(settings, plan, found)
        app, attempts = await run_application(settings, runtime, attempts)
        committed, ends = await _positions(settings, plan)
        progress = settings.progress.poll() if settings.progress is not None else {}
        key = progress_key(
            "DerivedView", found.metadata.namespace, found.metadata.name, plan.revision
        )
        seen = ViewObservation(runtime.name, app, attempts, committed, ends, progress.get(key))
    written = view_status(plan, seen, status, generation, now)
    patch.status.update(written)
    metrics.record_view(found.metadata.namespace, found.metadata.name, written)
    if seen.app is not None and seen.app.ended:
        # Come back when the restart is due (the timer would too, later).
        delay = restart_delay(seen.attempts)
        raise kopf.TemporaryError(f"{seen.app.message}; restarting in {delay:.0f}s", delay=delay)


@kopf.on.resume(GROUP, VERSION, "derivedviews")
@kopf.on.create(GROUP, VERSION, "derivedviews")
@kopf.on.update(GROUP, VERSION, "derivedviews", field="spec")
async def reconcile(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, memo: kopf.Memo, **found: Any
) -> None:
    """Reconcile a view on every change."""
    with metrics.reconciling("DerivedView"):
        await reconcile_view(body, status, patch, memo.settings, _indexes(found))
