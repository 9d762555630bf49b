"""The observer: one loop that reads positions and offsets into status between changes.

kopf's timers would do this per resource, but kopf guards every resource that has a timer with a
finalizer, and a finalizer on every Log would let an operator outage block a namespace's
deletion. So one loop, started with the operator, lists the Logs and views of the watched
namespaces every interval: a Log's watermarks go to its status and metrics; a view, job, Sink or
Source goes through the same reconcile as on a change (positions, lag, progress, restarts of ended
applications), and its status is patched when it changed. A failure on one resource is logged
and the loop goes on with the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, cast

import kopf

from distributary.api.common import GROUP_VERSION
from distributary.controllers.handling import one_at_a_time, reconcile_resource
from distributary.controllers.indexes import indexes_of
from distributary.controllers.services import OperatorServices
from distributary.controllers.status import StatusRecorder
from distributary.kafka.admin import KafkaAdminError
from distributary.kube.errors import KubeError
from distributary.plan.logs.log_status import offsets_status, subscribers
from distributary.plan.revisions.positions import Watermarks
from distributary.reconcile.failures import ReconcileFailedError
from distributary.reconcile.ports import StatusConflictError, TryAgain

API = GROUP_VERSION
LOGGER = logging.getLogger("distributary.observer")
NUDGE_ATTEMPTS, NUDGE_PAUSE = 5, 1.0


async def observe_forever(services: OperatorServices) -> None:
    """Observe every `settings.observe_interval` seconds (from the start of one round to the
    start of the next) until cancelled."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    settings = services.settings
    while True:
        await asyncio.sleep(max(0.0, started + settings.observe_interval - loop.time()))
        started = loop.time()
        for namespace in settings.namespaces or (None,):
            try:
                await observe_namespace(services, namespace)
            except (KubeError, KafkaAdminError) as exc:
                LOGGER.warning("observing %s: %s", namespace or "every namespace", exc)
            except Exception:  # the loop must outlive any one failure; the next round retries
                LOGGER.exception("observing %s failed", namespace or "every namespace")


async def observe_namespace(services: OperatorServices, namespace: str | None) -> None:
    """One round over the Logs and views of `namespace` (None: every namespace)."""
    kube = services.kube
    logs = await asyncio.to_thread(kube.list, API, "Log", namespace)
    views = await asyncio.to_thread(kube.list, API, "DerivedView", namespace)
    jobs = await asyncio.to_thread(kube.list, API, "StreamJob", namespace)
    sinks = await asyncio.to_thread(kube.list, API, "Sink", namespace)
    sources = await asyncio.to_thread(kube.list, API, "Source", namespace)
    live = [log for log in logs if not (log.get("metadata") or {}).get("deletionTimestamp")]
    marks = await _watermarks(services, live)
    readers_in: dict[str, list[dict[str, Any]]] = {}
    for reader in [*views, *jobs, *sinks]:
        readers_in.setdefault(reader["metadata"]["namespace"], []).append(reader)
    for log in live:
        readers = readers_in.get(log["metadata"]["namespace"], [])
        await _observe_log(services, log, readers, marks)
    by_namespace: dict[str, dict[str, list[dict[str, Any]]]] = {"logs": {}, "views": {}, "jobs": {}}
    for kind, items in (("logs", logs), ("views", views), ("jobs", jobs)):
        for item in items:
            by_namespace[kind].setdefault(item["metadata"]["namespace"], []).append(item)
    for view in views:
        if not view["metadata"].get("deletionTimestamp"):
            await _observe(services, view, by_namespace)
    for job in jobs:
        if not job["metadata"].get("deletionTimestamp"):
            await _observe(services, job, by_namespace)
    for source in sources:
        if not source["metadata"].get("deletionTimestamp"):
            await _observe(services, source, by_namespace)
    for sink in sinks:
        if not sink["metadata"].get("deletionTimestamp"):
            await _observe(services, sink, by_namespace)
    alive = {
        (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in [*views, *jobs]
    }
    for stopped in await asyncio.to_thread(services.runtime.orphans, namespace, alive):
        LOGGER.info("its view or job is gone: stopped %s", stopped)


async def _watermarks(services: OperatorServices, logs: list[dict[str, Any]]) -> Watermarks:
    """The watermarks of every Log's topic, read for all of them at once (three requests)."""
    topics = {str(topic) for log in logs if (topic := (log.get("status") or {}).get("topicName"))}
    if not topics:
        return {}
    admin = services.admin
    counts = await asyncio.to_thread(admin.list_partitions, topics)
    each = await asyncio.to_thread(admin.watermarks_each, {t: n for t, n in counts.items() if n})
    return {topic: marks[topic] for topic, marks in each.items()}


async def _observe_log(
    services: OperatorServices, log: dict[str, Any], views: list[dict[str, Any]], read: Watermarks
) -> None:
    status = log.get("status") or {}
    topic = status.get("topicName")
    if not topic:
        return
    if topic in read:
        marks = {topic: read[topic]}
    else:  # not answered with the others (e.g. not made yet by Strimzi): asked alone
        try:
            marks = await asyncio.to_thread(services.admin.watermarks, [topic])
        except KafkaAdminError as exc:  # one Log's topic never stops the round
            LOGGER.debug("observing Log %s: %s", log["metadata"]["name"], exc)
            return
    update = offsets_status(topic, marks)
    update["subscribers"] = subscribers(log["metadata"]["name"], views)
    # Written meanwhile (by its handler, or a view's cutover): the next round looks again.
    with contextlib.suppress(StatusConflictError):
        await StatusRecorder.of(services.kube, log, reconciles=False).finish(update)


async def _observe(
    services: OperatorServices, item: dict[str, Any], indexes: Any, wait: bool = False
) -> bool:
    """Reconcile a view, job or Sink as on a change, and write its status if it changed; False when
    the status had changed since `item` was read (nothing was written). A round leaves alone what
    a handler reconciles at that moment; with `wait` (something changed that the handler may have
    read before the change), the reconcile waits for the handler's and runs after it."""
    kind, namespace, name = item["kind"], item["metadata"]["namespace"], item["metadata"]["name"]
    lock = one_at_a_time(kind, namespace, name)
    if lock.locked() and not wait:
        return True  # its handler reconciles it now: this round leaves it alone
    try:
        async with lock:
            # Read again under the lock: the round's listing may be older than a handler's
            # reconcile that finished meanwhile. Status is written only onto the version read
            # here: a newer one (a handler's write-ahead record, a cutover) is never
            # overwritten; the next round starts from it.
            current = await asyncio.to_thread(services.kube.get, API, kind, namespace, name)
            if not current or (current.get("metadata") or {}).get("deletionTimestamp"):
                return True
            body = kopf.Body(cast(kopf.RawBody, {**current, "kind": kind}))
            await reconcile_resource(body, services, indexes)
    except ReconcileFailedError as exc:  # recorded on the resource; the next round tries again
        LOGGER.warning("observing %s %s/%s: %s", item["kind"], namespace, name, exc)
    except TryAgain:
        pass  # the status says what is awaited
    except StatusConflictError:
        return False
    except KubeError as exc:
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
    (and an ended one is restarted) within moments; a reconcile of it at work, which may have read
    the application before the change, is waited for. Registered for the spark-operator runtime.
    kopf's first listing only records the states: the first round looks at everything."""
    services: OperatorServices = memo.services
    meta = body.meta
    key = (str(meta.get("namespace")), str(meta.get("name")))
    if type == "DELETED":
        services.applications.gone(*key)
        return
    before = services.applications.saw(body)
    if type is None or before == services.applications.state(*key):
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
            if item is None or await _observe(services, item, indexes, wait=True):
                break
            await asyncio.sleep(NUDGE_PAUSE)
