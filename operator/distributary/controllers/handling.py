"""How the operator drives the one reconcile of each kind but Logs (`reconcile/`).

What a view's, job's or Sink's reconcile does is `reconcile.view`'s, `reconcile.job`'s and
`reconcile.sink`'s, shared with `distributary run`. Here is what the operator gives them: the
resource's status in the API server (`status.py`, written onto the version read), Kubernetes
events, the namespace as kopf's indexes hold it, and its output Log as a child resource whose
status names the serving topic. A reconcile that must wait is run again by kopf after the delay it
asks for; one whose status changed under it, at once from the new one. One that fails unexpectedly
(a bug, an error nothing caught) leaves the resource Stalled with `ReconcileError` and a Warning
event, is logged in one line (the traceback at debug level) and runs again with back-off
(`reconcile.failures`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf

from distributary.api.log import Log
from distributary.controllers import metrics
from distributary.controllers.events import KubeEvents
from distributary.controllers.handled import HANDLED
from distributary.controllers.indexes import (
    indexes_of,
    namespace_indexes,
)
from distributary.controllers.services import OperatorServices
from distributary.controllers.status import StatusRecorder
from distributary.plan.applications.children import holds
from distributary.plan.revisions.lifecycle import read_topics
from distributary.plan.status.conditions import Problem
from distributary.plan.views.view_plan import (
    namespace_pipeline,
    planning_bodies,
    reprocessing_outputs,
)
from distributary.reconcile.failures import (
    RECONCILE_ERROR,
    ReconcileFailedError,
    failure_message,
    failure_status,
    retry_delay,
)
from distributary.reconcile.job import reconcile_job
from distributary.reconcile.log import parse_log, served_topic
from distributary.reconcile.ports import Lineage, StatusConflictError, TryAgain
from distributary.reconcile.sink import reconcile_sink
from distributary.reconcile.source import reconcile_source
from distributary.reconcile.view import reconcile_view

RECONCILES: dict[str, Callable[..., Awaitable[None]]] = {
    "DerivedView": reconcile_view,
    "StreamJob": reconcile_job,
    "Sink": reconcile_sink,
    "Source": reconcile_source,
}
CONFLICT_RETRY = 1.0  # seconds before a reconcile whose status changed under it runs again
LOGGER = logging.getLogger("distributary.reconcile")


_RECONCILING: dict[tuple[str, str, str], asyncio.Lock] = {}


def one_at_a_time(kind: str, namespace: str, name: str) -> asyncio.Lock:
    """The lock that keeps a view's or job's reconciles from overlapping in this process: kopf's
    handler and the observer's round both reconcile, and two at once would both act on the
    world (start the same revision's runner twice; restart one a rewind has just stopped)
    before either wrote status."""
    return _RECONCILING.setdefault((kind, namespace, name), asyncio.Lock())


class ReconcileError(kopf.TemporaryError):
    """A reconcile that failed unexpectedly, retried by kopf after its back-off (counted as an
    error, not a wait, in the metrics)."""


@dataclass(frozen=True)
class Namespace:
    """A view's or job's namespace as the indexes hold it (the `World` of `reconcile.ports`): a
    copy taken when the reconcile starts, since the indexes change on the event loop while a
    thread plans from them."""

    services: OperatorServices
    indexes: Mapping[str, Any]

    @classmethod
    def of(cls, services: OperatorServices, indexes: Any, namespace: str) -> Namespace:
        """`namespace`'s part of `indexes`."""
        return cls(services, namespace_indexes(indexes, namespace))

    def _items(self, kind: str, namespace: str) -> list[Any]:
        return list(self.indexes.get(kind, {}).get(namespace, []))

    def lineage(self, resource: Mapping[str, Any]) -> Lineage:
        """The graph of `resource`'s lineage in its namespace (`planning_bodies`), and the
        outputs of the views in it that have a revision catching up."""
        namespace = str((resource.get("metadata") or {}).get("namespace"))
        writers = [*self._items("views", namespace), *self._items("jobs", namespace)]
        logs = self._items("logs", namespace)
        if resource.get("kind") == "StreamJob":
            # A job makes the dead-letter topic of the Log it writes: to it, a Log being deleted
            # is gone, or it would make again the topic that Log's deletion has just removed.
            logs = [log for log in logs if not (log.get("metadata") or {}).get("deletionTimestamp")]
        logs, lineage = planning_bodies(logs, writers, dict(resource))
        allowed = self.services.settings.allowed_sql_functions
        pipeline, children, _invalid = namespace_pipeline(logs, lineage, allowed_functions=allowed)
        return Lineage(pipeline, children, reprocessing_outputs(lineage))

    async def serve(self, output: dict[str, Any], topic: str) -> None:
        """Apply the output Log when the index shows it lacks part of `output`, then point its
        status at `topic` (readers follow `status.topicName`)."""
        meta = output["metadata"]
        child: Mapping[str, Any] | None = next(
            (
                log
                for log in self._items("logs", meta["namespace"])
                if log["metadata"]["name"] == meta["name"]
            ),
            None,
        )
        if child is None or not holds(child, output):  # else an apply changes nothing
            child = await asyncio.to_thread(self.services.kube.apply, output)
        assert child is not None
        held = (child.get("status") or {}).get("topicName")
        if held != topic and not (held is None and _will_serve(child, topic)):
            await StatusRecorder.of(self.services.kube, child).record_ahead({"topicName": topic})

    def read_elsewhere(self, namespace: str, name: str) -> set[str]:
        """The topics live revisions of the namespace's other views and jobs read."""
        readers = [*self._items("views", namespace), *self._items("jobs", namespace)]
        return read_topics(r for r in readers if r["metadata"]["name"] != name)

    def adopt_logs(self, manifests: Sequence[dict[str, Any]], owner_uid: str) -> list[Problem]:
        """Apply each of a Source's table Logs unless it holds its manifest already; a Log of
        that name that is not the Source's is left alone and named in a problem."""
        kube, problems = self.services.kube, []
        for manifest in manifests:
            meta = manifest["metadata"]
            found = kube.get(manifest["apiVersion"], "Log", meta["namespace"], meta["name"])
            if found is not None:
                owners = (found.get("metadata") or {}).get("ownerReferences") or []
                if not any(o.get("uid") == owner_uid for o in owners):
                    problems.append(Problem("LogTaken", (
                        f"Log {meta['name']} exists and is not this Source's: rename the "
                        "table's Log (spec.tables[].log) or delete that Log"
                    )))  # fmt: skip
                    continue
                if holds(found, manifest):
                    continue
            kube.apply(manifest)
        return problems

    def log(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The Log `name` as the index holds it (its status names the topic it serves)."""
        logs = self._items("logs", namespace)
        return next((log for log in logs if log["metadata"]["name"] == name), None)


def _will_serve(log: Mapping[str, Any], topic: str) -> bool:
    """Whether the Log's own reconcile, which has not written its status yet (it was just
    made), will name `topic` (the serving revision's, from its annotation). Its status is then
    left to it: a write here would change the Log under its first reconcile, which would fail
    on it and run again."""
    found = parse_log(log)
    return isinstance(found, Log) and served_topic(found).name == topic


def unhandled_spec(body: Mapping[str, Any]) -> Any:
    """The spec an edit replaced while kopf's update handler has not handled the edit yet (what
    kopf last handled: `handled.HANDLED`), None when no edit is pending or nothing is recorded.
    A reconcile started by anything else meanwhile (an application's change, the observer) then
    classifies the edit as the update handler does, field by field ("arguments changed"), and
    records it so; without it, it carried the edit out as an unknown change of definition and the
    update handler, coming second, found it done."""
    return HANDLED.replaced_spec(body)


async def reconcile_resource(
    body: kopf.Body,
    services: OperatorServices,
    indexes: Any,
    old_spec: Any = None,
    attempt: int = 0,
) -> None:
    """One reconcile of a view or job as the operator runs it (`reconcile.view` or
    `reconcile.job`), its status written onto the version `body` was read at. An unexpected
    failure (`attempt` failed tries before this one) is recorded on the resource and raised as
    `ReconcileFailedError` with its back-off; `TryAgain` and `StatusConflictError` pass."""
    meta = body.get("metadata") or {}
    store = StatusRecorder.of(services.kube, body)
    try:
        world = Namespace.of(services, indexes, str(meta.get("namespace")))
        events = KubeEvents(services.kube, body)
        reconcile = RECONCILES[str(body.get("kind"))]
        if old_spec is None:
            old_spec = unhandled_spec(body)
        await reconcile(body, services, store, world, events, old_spec)
    except (TryAgain, StatusConflictError):
        raise
    except Exception as exc:
        raise await recorded_failure(body, store, exc, attempt) from exc


async def recorded_failure(
    body: kopf.Body, store: StatusRecorder, exc: Exception, attempt: int
) -> ReconcileFailedError:
    """Say that the reconcile of `body` failed (`attempt` failed tries before): Stalled with
    `ReconcileError` in its status, a Warning event, the traceback in the debug log; the error
    to raise, with its one line and its back-off."""
    delay = retry_delay(attempt)
    meta = body.get("metadata") or {}
    kind, name = str(body.get("kind")), f"{meta.get('namespace')}/{meta.get('name')}"
    message = failure_message(kind, name, exc, "it is retried with back-off")
    LOGGER.debug("the reconcile of %s %s failed", kind, name, exc_info=exc)
    generation = int(meta.get("generation") or 0)
    patch = failure_status(store.status, message, generation, datetime.now(UTC))
    try:
        if patch is not None:
            await store.record_ahead(patch)
    except Exception as failed:  # the status stays as it was; the retry writes it
        LOGGER.debug("recording the failure of %s %s: %s", kind, name, failed)
    KubeEvents(store.kube, body).warn(RECONCILE_ERROR, message)
    return ReconcileFailedError(f"{message}; again in {delay:.0f}s", delay)


async def handle(kind: str, body: kopf.Body, memo: kopf.Memo, old: Any, found: Any) -> None:
    """A kopf handler's reconcile: waiting, conflicts and unexpected failures (after their
    `retry`-th try, which sets the back-off) become kopf's retries."""
    meta = body.get("metadata") or {}
    lock = one_at_a_time(kind, str(meta.get("namespace")), str(meta.get("name")))
    with metrics.reconciling(kind):
        try:
            attempt = int(found.get("retry") or 0)
            async with lock:  # after an observer's reconcile of it that has begun
                await reconcile_resource(body, memo.services, indexes_of(found), old, attempt)
        except ReconcileFailedError as exc:  # recorded on the resource; one line in the log
            raise ReconcileError(str(exc), delay=exc.delay) from None
        except TryAgain as exc:
            raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc
        except StatusConflictError as exc:
            raise kopf.TemporaryError(f"{exc}: reconciling again", delay=CONFLICT_RETRY) from exc
