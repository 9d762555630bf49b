"""The StreamJob controller: a user's own PySpark application, run and tracked like a view.

One reconcile, on every change and by the observer between changes: check the job in the graph of
its namespace (`plan.job_plan`), record a new revision in status before starting it (a
write-ahead record), stop every other revision of the job, run the revision's application on the
configured runtime (a SparkApplication, or the job's file as a local process), restart one that
ended with capped back-off, and write status: positions and lag from the revision's consumer
group, the last batch from the progress topic, the last change's classification, conditions. The
job's Logs are its own resources; the job creates no topics.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import kopf

from distributary.api import ResourceError, parse_resource
from distributary.api.job import StreamJob
from distributary.controllers import metrics
from distributary.controllers.applications import (
    SPARK_API,
    RewindTarget,
    Runtime,
    rewind_once,
    run_application,
    spark_operator_runtime,
)
from distributary.controllers.settings import OperatorSettings
from distributary.controllers.views import GROUP, VERSION, index_entry, indexes_of
from distributary.kafka.admin import KafkaAdminError
from distributary.plan.conditions import Problem
from distributary.plan.job_plan import JobPlan, plan_job, with_job_rewind
from distributary.plan.job_status import job_start_record, job_status
from distributary.plan.positions import Offsets
from distributary.plan.progress import progress_key
from distributary.plan.spark import application_name, label_value
from distributary.plan.spark_state import AppState, restart_delay
from distributary.plan.view_plan import namespace_pipeline, planning_bodies, rewind_folder
from distributary.plan.view_status import RunObservation


@kopf.index(GROUP, VERSION, "streamjobs")
def jobs_by_namespace(body: kopf.Body, namespace: str | None, **_: Any) -> dict[str, Any]:
    """Every StreamJob, by namespace: the graph needs them to find each log's one writer."""
    return {str(namespace): index_entry(body)}


def _job(body: kopf.Body | dict[str, Any], spec: Any = None) -> StreamJob | str:
    meta = body.get("metadata") or {}
    document = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid")},
        "spec": body.get("spec") if spec is None else spec,
    }
    try:
        found = parse_resource(document)
    except ResourceError as exc:
        return str(exc)
    return found if isinstance(found, StreamJob) else "not a StreamJob"


def _plan(
    job: StreamJob,
    body: kopf.Body,
    status: Any,
    settings: OperatorSettings,
    indexes: Any,
    old: StreamJob | None,
) -> JobPlan:
    namespace = job.metadata.namespace
    writers = [*indexes["views"].get(namespace, []), *indexes["jobs"].get(namespace, [])]
    logs, lineage = planning_bodies(indexes["logs"].get(namespace, []), writers, dict(body))
    pipeline, children, _invalid = namespace_pipeline(logs, lineage)
    return plan_job(
        pipeline,
        children,
        job,
        dict(status),
        checkpoint_root=settings.checkpoint_root,
        bootstrap_servers=settings.bootstrap_servers,
        old=old,
    )


def _runtime(settings: OperatorSettings, plan: JobPlan, job: StreamJob) -> Runtime:
    """The revision's application on the configured runtime."""
    namespace = job.metadata.namespace
    name = application_name(job.metadata.name, plan.revision, "StreamJob")
    launch, manifest = plan.launch, plan.application
    if settings.spark_runtime == "local":
        local = settings.local_runtime
        folder = local.job(namespace, job.metadata.name, plan.revision)

        def start_local() -> AppState:
            if launch is None:  # a refused change: the running revision is left as it is
                return local.state_of(folder)
            return local.ensure_job(launch)

        return Runtime(namespace, name, lambda: local.state_of(folder), start_local, lambda: None)

    return spark_operator_runtime(settings, namespace, name, lambda: manifest)


def _retire_others(settings: OperatorSettings, job: StreamJob, revision: int) -> list[str]:
    """Stop every revision of `job` but `revision` (a replaced one, or one a crash left behind);
    what was stopped."""
    namespace, name = job.metadata.namespace, job.metadata.name
    stopped = []
    if settings.spark_runtime == "local":
        for app_namespace, app_name, app in settings.local_runtime.running("job-r*"):
            if (app_namespace, app_name) == (namespace, name) and app.folder.name != (
                f"job-r{revision}"
            ):
                settings.local_runtime.stop(app)
                stopped.append(app.folder.name)
        return stopped
    selector = f"distributary.dev/job={label_value(name)}"
    for item in settings.kube.list(SPARK_API, "SparkApplication", namespace, selector):
        labels = item["metadata"].get("labels") or {}
        if labels.get("distributary.dev/revision") != str(revision):
            settings.kube.delete(SPARK_API, "SparkApplication", namespace, item["metadata"]["name"])
            stopped.append(item["metadata"]["name"])
    return stopped


def _stop_revision(settings: OperatorSettings, job: StreamJob, revision: int) -> None:
    """Stop one revision's application (for a rewind)."""
    namespace, name = job.metadata.namespace, job.metadata.name
    if settings.spark_runtime == "local":
        settings.local_runtime.stop(settings.local_runtime.job(namespace, name, revision))
    else:
        app = application_name(name, revision, "StreamJob")
        settings.kube.delete(SPARK_API, "SparkApplication", namespace, app)


async def _rewind(
    settings: OperatorSettings,
    plan: JobPlan,
    job: StreamJob,
    status: Any,
    now: datetime,
    generation: int,
) -> tuple[JobPlan, dict[str, Any] | None]:
    """The spec's rewind, carried out once (`rewind_once`); the plan to go on with (on the
    rewind's fresh checkpoint) and the `lastRewind` to record."""
    rewind = job.spec.rewind
    if rewind is None or plan.launch is None or plan.consumer_group is None:
        return plan, None
    chosen = set(rewind.inputs) or {i.log for i in plan.inputs}
    meta = job.metadata
    target = RewindTarget(
        job.api_version,
        job.kind,
        meta.namespace,
        meta.name,
        plan.revision,
        plan.consumer_group,
        sorted({i.topic for i in plan.inputs if i.log in chosen}),
        lambda: _stop_revision(settings, job, plan.revision),
    )
    done = await rewind_once(
        settings, target, rewind.request_id, rewind.to, status, now, generation
    )
    if done is None:
        return plan, None
    return with_job_rewind(plan, rewind_folder(rewind.request_id), "distributary-spark", job), done


async def _positions(
    settings: OperatorSettings, plan: JobPlan
) -> tuple[Offsets | None, Offsets | None]:
    if plan.consumer_group is None or not plan.inputs:
        return None, None
    try:
        committed = await asyncio.to_thread(settings.admin.committed, plan.consumer_group)
        marks = await asyncio.to_thread(settings.admin.watermarks, [i.topic for i in plan.inputs])
    except KafkaAdminError:
        return None, None
    ends = {t: {p: end for p, (_, end) in parts.items()} for t, parts in marks.items()}
    return committed, ends


async def reconcile_job(
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    settings: OperatorSettings,
    indexes: Any,
    old_spec: Any = None,
) -> None:
    """One reconcile of a job; see the module docstring. `old_spec` is the spec an update
    replaces, to classify the change field by field."""
    generation = int(body.meta.get("generation") or 0)
    now = datetime.now(UTC)
    found = _job(body)
    if isinstance(found, str):
        plan = JobPlan(int(status.get("revision") or 1), problems=(Problem("InvalidSpec", found),))
        patch.status.update(job_status(plan, RunObservation(), status, generation, now))
        return
    old = _job(body, old_spec) if old_spec else None
    plan = _plan(
        found, body, status, settings, indexes, old if isinstance(old, StreamJob) else None
    )
    seen = RunObservation()
    rewound = None
    if plan.spec_hash is not None:
        meta = found.metadata
        if plan.starts:
            record = job_start_record(plan, generation, now)
            await asyncio.to_thread(
                settings.kube.patch_status, found.api_version, found.kind, meta.namespace,
                meta.name, record,
            )  # fmt: skip
            kopf.info(body, reason="StartRevision", message=f"Starting revision {plan.revision}.")
        stopped = await asyncio.to_thread(_retire_others, settings, found, plan.revision)
        if stopped:
            kopf.info(body, reason="RevisionStopped", message=f"Stopped {', '.join(stopped)}.")
        plan, rewound = await _rewind(settings, plan, found, status, now, generation)
        if rewound is not None:
            message = f"Rewound revision {rewound['revision']} ({rewound['requestId']})."
            kopf.info(body, reason="Rewound", message=message)
        attempts = int((status.get("sparkApplication") or {}).get("attempts") or 0)
        runtime = _runtime(settings, plan, found)
        app, attempts = await run_application(settings, runtime, attempts)
        committed, ends = await _positions(settings, plan)
        progress = settings.progress.poll(timeout=0) if settings.progress is not None else {}
        key = progress_key("StreamJob", meta.namespace, meta.name, plan.revision)
        seen = RunObservation(runtime.name, app, attempts, committed, ends, progress.get(key))
    written = job_status(plan, seen, status, generation, now)
    if rewound is not None:
        written["lastRewind"] = rewound
    patch.status.update(written)
    metrics.record_job(found.metadata.namespace, found.metadata.name, written)
    if seen.app is not None and seen.app.ended:
        delay = restart_delay(seen.attempts)
        raise kopf.TemporaryError(f"{seen.app.message}; restarting in {delay:.0f}s", delay=delay)


@kopf.on.resume(GROUP, VERSION, "streamjobs")
@kopf.on.create(GROUP, VERSION, "streamjobs")
@kopf.on.update(GROUP, VERSION, "streamjobs", field="spec")
async def reconcile(
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    old: Any = None,
    **found: Any,
) -> None:
    """Reconcile a job on every change."""
    with metrics.reconciling("StreamJob"):
        await reconcile_job(body, status, patch, memo.settings, indexes_of(found), old)
