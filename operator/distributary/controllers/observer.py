"""The observer: one loop that reads positions and offsets into status between changes.

kopf's timers would do this per resource, but kopf guards every resource that has a timer with a
finalizer, and a finalizer on every Log would let an operator outage block a namespace's
deletion. So one loop, started with the operator, lists the Logs and views of the watched
namespaces every interval: a Log's watermarks go to its status and metrics; a view or job goes
through the same reconcile as on a change (positions, lag, progress, restarts of ended
applications), and its status is patched when it changed. A failure on one resource is logged
and the loop goes on with the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, cast

import kopf

from distributary.controllers import metrics
from distributary.controllers.jobs import reconcile_job
from distributary.controllers.settings import OperatorSettings
from distributary.controllers.views import reconcile_view
from distributary.kafka.admin import KafkaAdminError
from distributary.kube.resources import KubeError
from distributary.plan.log_status import offsets_status, subscribers

API = "distributary.dev/v1alpha1"
LOGGER = logging.getLogger("distributary.observer")


async def observe_forever(settings: OperatorSettings) -> None:
    """Observe every `settings.observe_interval` seconds (from the start of one round to the
    start of the next) until cancelled."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        await asyncio.sleep(max(0.0, started + settings.observe_interval - loop.time()))
        started = loop.time()
        for namespace in settings.namespaces or (None,):
            try:
                await observe_namespace(settings, namespace)
            except (KubeError, KafkaAdminError) as exc:
                LOGGER.warning("observing %s: %s", namespace or "every namespace", exc)
            except Exception:  # the loop must outlive any one failure; the next round retries
                LOGGER.exception("observing %s failed", namespace or "every namespace")


async def observe_namespace(settings: OperatorSettings, namespace: str | None) -> None:
    """One round over the Logs and views of `namespace` (None: every namespace)."""
    kube = settings.kube
    logs = await asyncio.to_thread(kube.list, API, "Log", namespace)
    views = await asyncio.to_thread(kube.list, API, "DerivedView", namespace)
    jobs = await asyncio.to_thread(kube.list, API, "StreamJob", namespace)
    for log in logs:
        if not (log.get("metadata") or {}).get("deletionTimestamp"):
            readers = [
                r
                for r in [*views, *jobs]
                if r["metadata"]["namespace"] == log["metadata"]["namespace"]
            ]
            await _observe_log(settings, log, readers)
    by_namespace: dict[str, dict[str, list[dict[str, Any]]]] = {"logs": {}, "views": {}, "jobs": {}}
    for kind, items in (("logs", logs), ("views", views), ("jobs", jobs)):
        for item in items:
            by_namespace[kind].setdefault(item["metadata"]["namespace"], []).append(item)
    for view in views:
        if not view["metadata"].get("deletionTimestamp"):
            await _observe(settings, view, by_namespace)
    for job in jobs:
        if not job["metadata"].get("deletionTimestamp"):
            await _observe(settings, job, by_namespace)
    if settings.spark_runtime == "local":
        await _stop_orphans(settings, namespace, views, "r*")
        await _stop_orphans(settings, namespace, jobs, "job-r*")


async def _stop_orphans(
    settings: OperatorSettings, namespace: str | None, owners: list[dict[str, Any]], pattern: str
) -> None:
    """Stop local processes whose view or job is gone (deleted, even while the operator was
    down)."""
    alive = {(v["metadata"]["namespace"], v["metadata"]["name"]) for v in owners}
    for owner_namespace, name, app in settings.local_runtime.running(pattern):
        if namespace in (None, owner_namespace) and (owner_namespace, name) not in alive:
            LOGGER.info("%s/%s is gone: stopping %s", owner_namespace, name, app.folder)
            await asyncio.to_thread(settings.local_runtime.stop, app)


async def _observe_log(
    settings: OperatorSettings, log: dict[str, Any], views: list[dict[str, Any]]
) -> None:
    status = log.get("status") or {}
    topic = status.get("topicName")
    if not topic:
        return
    marks = await asyncio.to_thread(settings.admin.watermarks, [topic])
    update = offsets_status(topic, marks)
    update["subscribers"] = subscribers(log["metadata"]["name"], views)
    namespace, name = log["metadata"]["namespace"], log["metadata"]["name"]
    if "endOffsets" in update:
        metrics.record_log_offsets(namespace, name, update["endOffsets"], update.get("records"))
    if _changed(status, update):
        await asyncio.to_thread(settings.kube.patch_status, API, "Log", namespace, name, update)


async def _observe(settings: OperatorSettings, item: dict[str, Any], indexes: Any) -> None:
    """Reconcile a view or job as on a change, and write its status if it changed."""
    body = kopf.Body(cast(kopf.RawBody, item))
    patch = kopf.Patch()
    reconcile = reconcile_view if item["kind"] == "DerivedView" else reconcile_job
    namespace, name = item["metadata"]["namespace"], item["metadata"]["name"]
    try:
        with contextlib.suppress(kopf.TemporaryError):  # the status says what is awaited
            await reconcile(body, body.status, patch, settings, indexes)
        update = dict(patch.get("status") or {})
        if _changed(item.get("status") or {}, update):
            # Only onto the status this round read: a newer one (a handler's write-ahead
            # record, a cutover) is never overwritten; the next round starts from it.
            version = item["metadata"].get("resourceVersion")
            await asyncio.to_thread(
                settings.kube.patch_status, API, item["kind"], namespace, name, update, version
            )
    except KubeError as exc:
        if exc.status != 409:
            LOGGER.warning("observing %s %s/%s: %s", item["kind"], namespace, name, exc)
    except KafkaAdminError as exc:
        LOGGER.warning("observing %s %s/%s: %s", item["kind"], namespace, name, exc)
    except Exception:  # one resource never stops the others
        LOGGER.exception("observing %s %s/%s failed", item["kind"], namespace, name)


def _changed(before: dict[str, Any], update: dict[str, Any]) -> bool:
    return any(before.get(key) != value for key, value in update.items())
