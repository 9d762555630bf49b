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
from distributary.controllers.views import indexes_of, reconcile_view
from distributary.kafka.admin import KafkaAdminError
from distributary.kube.resources import KubeError
from distributary.plan.log_status import offsets_status, subscribers
from distributary.plan.positions import Watermarks

API = "distributary.dev/v1alpha1"
LOGGER = logging.getLogger("distributary.observer")
NUDGE_ATTEMPTS, NUDGE_PAUSE = 5, 1.0


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
    live = [log for log in logs if not (log.get("metadata") or {}).get("deletionTimestamp")]
    marks = await _watermarks(settings, live)
    readers_in: dict[str, list[dict[str, Any]]] = {}
    for reader in [*views, *jobs]:
        readers_in.setdefault(reader["metadata"]["namespace"], []).append(reader)
    for log in live:
        readers = readers_in.get(log["metadata"]["namespace"], [])
        await _observe_log(settings, log, readers, marks)
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


async def _watermarks(settings: OperatorSettings, logs: list[dict[str, Any]]) -> Watermarks:
    """The watermarks of every Log's topic, read for all of them at once (three requests)."""
    topics = {str(topic) for log in logs if (topic := (log.get("status") or {}).get("topicName"))}
    if not topics:
        return {}
    admin = settings.admin
    counts = await asyncio.to_thread(admin.list_partitions, topics)
    each = await asyncio.to_thread(admin.watermarks_each, {t: n for t, n in counts.items() if n})
    return {topic: marks[topic] for topic, marks in each.items()}


async def _observe_log(
    settings: OperatorSettings, log: dict[str, Any], views: list[dict[str, Any]], read: Watermarks
) -> None:
    status = log.get("status") or {}
    topic = status.get("topicName")
    if not topic:
        return
    if topic in read:
        marks = {topic: read[topic]}
    else:  # not answered with the others (e.g. not made yet by Strimzi): asked alone
        try:
            marks = await asyncio.to_thread(settings.admin.watermarks, [topic])
        except KafkaAdminError as exc:  # one Log's topic never stops the round
            LOGGER.debug("observing Log %s: %s", log["metadata"]["name"], exc)
            return
    update = offsets_status(topic, marks)
    update["subscribers"] = subscribers(log["metadata"]["name"], views)
    namespace, name = log["metadata"]["namespace"], log["metadata"]["name"]
    if "endOffsets" in update:
        metrics.record_log_offsets(namespace, name, update["endOffsets"], update.get("records"))
    if _changed(status, update):
        await asyncio.to_thread(settings.kube.patch_status, API, "Log", namespace, name, update)


async def _observe(settings: OperatorSettings, item: dict[str, Any], indexes: Any) -> bool:
    """Reconcile a view or job as on a change, and write its status if it changed; False when
    the status had changed since `item` was read (nothing was written)."""
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
        if exc.status == 409:
            return False
        LOGGER.warning("observing %s %s/%s: %s", item["kind"], namespace, name, exc)
    except KafkaAdminError as exc:
        LOGGER.warning("observing %s %s/%s: %s", item["kind"], namespace, name, exc)
    except Exception:  # one resource never stops the others
        LOGGER.exception("observing %s %s/%s failed", item["kind"], namespace, name)
    return True


async def application_changed(
    body: kopf.Body, type: str | None, memo: kopf.Memo, **found: Any
) -> None:
    """A SparkApplication changed: when its state did, reconcile the view or job that owns it
    now rather than at the next round, so that a view turns Ready when its application runs
    (and an ended one is restarted) within moments. Registered for the spark-operator runtime.
    kopf's first listing only records the states: the first round looks at everything."""
    settings: OperatorSettings = memo.settings
    meta = body.meta
    key = (str(meta.get("namespace")), str(meta.get("name")))
    state = str(((body.get("status") or {}).get("applicationState") or {}).get("state") or "")
    before = settings.application_states.get(key)
    if type == "DELETED":
        settings.application_states.pop(key, None)
        return
    settings.application_states[key] = state
    if type is None or before == state:
        return
    indexes = indexes_of(found)
    for owner in meta.get("ownerReferences") or []:
        kind = {"DerivedView": "views", "StreamJob": "jobs"}.get(str(owner.get("kind")))
        if kind is None or not owner.get("controller"):
            continue
        for _ in range(NUDGE_ATTEMPTS):  # a handler wrote status meanwhile: look again at it
            item = next(
                (
                    dict(item)
                    for item in indexes[kind].get(key[0], [])
                    if item["metadata"]["name"] == owner.get("name")
                    and not item["metadata"].get("deletionTimestamp")
                ),
                None,
            )
            if item is None or await _observe(settings, item, indexes):
                break
            await asyncio.sleep(NUDGE_PAUSE)


def _changed(before: dict[str, Any], update: dict[str, Any]) -> bool:
    return any(before.get(key) != value for key, value in update.items())
