"""The Log controller: a Log's topic made and kept as its spec says, and its offsets in status.

On every change (and on the operator's start, for Logs it already knew) the topic backend
carries out the topic plan; between changes the observer (`observer.py`) reads the watermarks
into status. Status is
replaced whole from `plan.logs.log_status`, so a field never outlives the reason it was written. A
spec the operator cannot use, or a Kafka it cannot reach, becomes a condition, never a crash: the
handler retries an unreachable Kafka with kopf's back-off.

Deleting a Log never deletes its topic unless `deletionPolicy: Delete` says so; only such Logs
carry a finalizer, and its handler gives up after a bounded time (with an event saying the topic
was left behind) so that a Kafka outage cannot block a namespace's deletion forever. A view's
output Log takes every topic the view wrote with it (`plan.logs.log_deletion`): each revision's and
the view's dead letters, since it is what garbage collection leaves of the view. A job's
dead-letter topic goes with the Log it belongs to (the job's first output), found through the
index of jobs.

A topic belongs to one Log across the Kafka cluster (`plan.kafka_topics.claims`, kept by
`backends.claimed`): a Log whose topic another Log owns is Stalled (`TopicTaken`, naming the owner),
makes and changes nothing, and looks again every `RETRY_SECONDS` until the owner's claim is
released. Deleting a Log releases its claims; `Delete` deletes only topics the Log owns and made,
and an event says which were kept and why. A Log deleted while the operator was down (no finalizer
keeps it until the operator sees it) is released by a sweep at start and every
`--claims-sweep-interval` (`sweep_claims`), in the watched namespaces only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import kopf

from distributary.api import parse_body
from distributary.api.job import StreamJob
from distributary.api.log import Log
from distributary.backends.claimed import ClaimedTopicBackend
from distributary.controllers import metrics
from distributary.controllers.events import KubeEvents
from distributary.controllers.handling import ReconcileError, one_at_a_time, recorded_failure
from distributary.controllers.indexes import GROUP, VERSION
from distributary.controllers.services import OperatorServices
from distributary.controllers.status import StatusRecorder
from distributary.kafka.admin import KafkaAdminError
from distributary.kube.errors import KubeError
from distributary.plan.logs.log_deletion import deleted_topics, view_of
from distributary.reconcile.log import parse_log, reconcile_log
from distributary.reconcile.ports import StatusConflictError

PLURAL = "logs"
RETRY_SECONDS = 15
DELETE_TIMEOUT = 300  # seconds a Delete-policy Log may wait for Kafka before it is let go
SWEEP_RETRY_SECONDS = 60  # before a claims sweep that could not finish runs again
LOGGER = logging.getLogger("distributary.claims")


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def reconcile(body: kopf.Body, memo: kopf.Memo, retry: int = 0, **_: Any) -> None:
    """Make the topic as the spec says and record the outcome; an unexpected failure becomes
    a condition and an event, retried with back-off (`handling.recorded_failure`)."""
    with metrics.reconciling("Log"):
        try:
            await _reconcile(body, memo.services)
        except StatusConflictError as exc:
            raise kopf.TemporaryError(f"{exc}: reconciling again", delay=1.0) from exc
        except kopf.TemporaryError:
            raise
        except Exception as exc:
            recorder = StatusRecorder.of(memo.services.kube, body)
            failure = await recorded_failure(body, recorder, exc, retry)
            raise ReconcileError(str(failure), delay=failure.delay) from None


async def _reconcile(body: kopf.Body, services: OperatorServices) -> None:
    """The Log's one reconcile (`reconcile.log`); what may succeed later is tried again."""
    recorder = StatusRecorder.of(services.kube, body)
    result = await reconcile_log(body, services, recorder, KubeEvents(services.kube, body))
    if result.taken is not None:
        raise kopf.TemporaryError(result.taken, delay=RETRY_SECONDS)  # until it is released
    if result.refused is not None and result.refused_again is not None:
        raise kopf.TemporaryError(result.refused, delay=result.refused_again)
    if result.unreachable is not None:
        raise kopf.TemporaryError(result.unreachable, delay=RETRY_SECONDS)
    if result.waiting is not None:  # another controller acts (Strimzi): look again soon
        raise kopf.TemporaryError(result.waiting.message, delay=RETRY_SECONDS / 3)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
async def forget(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Drop a deleted Log's metrics and, unless `delete_topic` does it after deleting its
    topics, release its claims (no finalizer: this never delays a deletion)."""
    namespace, name = str(body.meta.get("namespace")), str(body.meta.get("name"))
    metrics.forget_log(namespace, name)
    if (body.get("spec") or {}).get("deletionPolicy") != "Delete":
        await _release(memo.services, namespace, name)


async def _release(services: OperatorServices, namespace: str, name: str) -> None:
    try:
        await services.topics.release(namespace, name)
    except KafkaAdminError as exc:
        message = f"claims of Log {namespace}/{name} not released yet: {exc}"
        raise kopf.TemporaryError(message, delay=RETRY_SECONDS) from exc


async def sweep_claims_forever(services: OperatorServices) -> None:
    """Sweep deleted Logs' claims now and every `settings.claims_sweep_interval` seconds (a
    sweep that could not finish: again within `SWEEP_RETRY_SECONDS`), until cancelled."""
    interval = services.settings.claims_sweep_interval
    while True:
        try:
            done = await sweep_claims(services)
        except Exception:  # the loop must outlive any one failure; the next sweep retries
            LOGGER.exception("claims sweep failed")
            done = False
        await asyncio.sleep(interval if done else min(interval, SWEEP_RETRY_SECONDS))


async def sweep_claims(services: OperatorServices) -> bool:
    """Release the claims of Logs of the watched namespaces that are gone (deleted while the
    operator was down, or whose release failed): one log line per Log released, none when no
    claim is stale. A listing that fails releases nothing, and says so. False: not finished."""
    claimed = services.topics
    if not isinstance(claimed, ClaimedTopicBackend):
        return True
    namespaces = services.settings.namespaces

    async def listed() -> set[str]:
        found: set[str] = set()
        for namespace in namespaces or (None,):
            logs = await asyncio.to_thread(
                services.kube.list, f"{GROUP}/{VERSION}", "Log", namespace
            )
            found.update(f"{m['metadata']['namespace']}/{m['metadata']['name']}" for m in logs)
        return found

    try:
        released = await claimed.sweep(listed, namespaces or None)
    except KubeError as exc:
        LOGGER.warning("claims sweep: none released, the Logs could not be listed: %s", exc)
        return False
    except KafkaAdminError as exc:
        LOGGER.warning("claims sweep: not finished: %s", exc)
        return False
    for claimant, topics in released.items():
        LOGGER.info(
            "Log %s is gone: released its claims on %s", claimant.identity, ", ".join(topics)
        )
    return True


@kopf.on.delete(
    GROUP,
    VERSION,
    PLURAL,
    when=lambda spec, **_: spec.get("deletionPolicy") == "Delete",
    backoff=RETRY_SECONDS,
)
async def delete_topic(
    body: kopf.Body,
    status: kopf.Status,
    memo: kopf.Memo,
    runtime: timedelta,
    jobs_by_namespace: Any = None,
    **_: Any,
) -> None:
    """With `deletionPolicy: Delete`, delete the topic (the user asked for it); a view's output
    Log takes every revision's topic and the view's dead-letter topic with it, a job's output
    the job's dead-letter topic."""
    services: OperatorServices = memo.services
    events = KubeEvents(services.kube, body)
    spec = body.get("spec") or {}
    found = parse_log(body)
    if isinstance(found, Log):
        jobs = _jobs(jobs_by_namespace, found.metadata.namespace)
        topics = deleted_topics(found, status.get("topicName"), jobs)
    else:
        topics = (str(status.get("topicName") or spec.get("topicName") or body.meta["name"]),)
    given_up = runtime.total_seconds() >= DELETE_TIMEOUT
    left: dict[str, Exception] = {}
    kept: list[str] = []
    async with _view_at_rest(found):
        for topic in topics:  # each deletion is idempotent: a retry starts again from the first
            try:
                why = await services.topics.delete(found if isinstance(found, Log) else None, topic)
            except (KafkaAdminError, KubeError) as exc:
                if not given_up:
                    message = f"topic {topic} not deleted yet: {exc}"
                    raise kopf.TemporaryError(message, delay=RETRY_SECONDS) from exc
                left[topic] = exc  # past the deadline: still try the others
                continue
            if why is not None:
                kept.append(topic)
                events.warn("TopicKept", why)
    try:  # its claims: on the topics deleted or kept, and any others it still holds
        await _release(services, str(body.meta.get("namespace")), str(body.meta.get("name")))
    except kopf.TemporaryError:
        if not given_up:
            raise
    if left:
        # Let the Log go rather than block its namespace's deletion forever; say so loudly.
        reasons = "; ".join(f"{topic}: {exc}" for topic, exc in left.items())
        events.warn("TopicLeftBehind", f"{_named(list(left))} not deleted: {reasons}")
        return
    deleted = [topic for topic in topics if topic not in kept]
    if deleted:
        events.info("TopicDeleted", f"{_named(deleted)} deleted (deletionPolicy: Delete).")


def _view_at_rest(found: Log | str) -> contextlib.AbstractAsyncContextManager[Any]:
    """Held while a view's output Log deletes its topics: a reconcile of the view that began
    before the view was deleted may still be making them, and deleting them meanwhile would leave
    them made again. This waits for it; one that begins later reads the view again, finds it
    gone and makes nothing."""
    view = view_of(found) if isinstance(found, Log) else None
    if isinstance(found, Log) and view:
        return one_at_a_time("DerivedView", found.metadata.namespace, view)
    return contextlib.nullcontext()


def _jobs(index: Any, namespace: str) -> list[StreamJob]:
    """The StreamJobs of `namespace` in kopf's index (those whose spec parses)."""
    found = []
    for entry in list((index or {}).get(namespace, [])):
        job = parse_body(entry, StreamJob)
        if isinstance(job, StreamJob):
            found.append(job)
    return found


def _named(topics: Sequence[str]) -> str:
    return f"Topic {topics[0]}" if len(topics) == 1 else f"Topics {', '.join(topics)}"
