"""How the operator drives the one reconcile of views and jobs (`reconcile/`).

What a view's or job's reconcile does is `reconcile.view`'s and `reconcile.job`'s, shared with
`distributary run`. Here is what the operator gives them: the view's status in the API server
(`status.py`, written onto the version read), Kubernetes events, the view's namespace as kopf's
indexes hold it, and its output Log as a child resource whose status names the serving topic. A
reconcile that must wait is run again by kopf after the delay it asks for; one whose status changed
under it, at once from the new one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from distributary.controllers import metrics
from distributary.controllers.indexes import (
    indexes_of,
    namespace_indexes,
)
from distributary.controllers.services import OperatorServices
from distributary.controllers.status import StatusRecorder
from distributary.plan.children import holds
from distributary.plan.lifecycle import read_topics
from distributary.plan.view_plan import namespace_pipeline, planning_bodies, reprocessing_outputs
from distributary.reconcile.job import reconcile_job
from distributary.reconcile.ports import Lineage, StatusConflictError, TryAgain
from distributary.reconcile.view import reconcile_view

CONFLICT_RETRY = 1.0  # seconds before a reconcile whose status changed under it runs again


@dataclass(frozen=True)
class KubeEvents:
    """A resource's events, posted by kopf."""

    body: kopf.Body

    def info(self, reason: str, message: str) -> None:
        """A Normal event on the resource."""
        kopf.info(self.body, reason=reason, message=message)


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
        logs, lineage = planning_bodies(self._items("logs", namespace), writers, dict(resource))
        pipeline, children, _invalid = namespace_pipeline(logs, lineage)
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
        if (child.get("status") or {}).get("topicName") != topic:
            await StatusRecorder.of(self.services.kube, child).record_ahead({"topicName": topic})

    def read_elsewhere(self, namespace: str, name: str) -> set[str]:
        """The topics live revisions of the namespace's other views and jobs read."""
        readers = [*self._items("views", namespace), *self._items("jobs", namespace)]
        return read_topics(r for r in readers if r["metadata"]["name"] != name)


async def reconcile_resource(
    body: kopf.Body, services: OperatorServices, indexes: Any, old_spec: Any = None
) -> None:
    """One reconcile of a view or job as the operator runs it (`reconcile.view` or
    `reconcile.job`), its status written onto the version `body` was read at."""
    meta = body.get("metadata") or {}
    world = Namespace.of(services, indexes, str(meta.get("namespace")))
    store = StatusRecorder.of(services.kube, body)
    events = KubeEvents(body)
    reconcile = reconcile_view if body.get("kind") == "DerivedView" else reconcile_job
    await reconcile(body, services, store, world, events, old_spec)


async def handle(kind: str, body: kopf.Body, memo: kopf.Memo, old: Any, found: Any) -> None:
    """A kopf handler's reconcile: waiting and conflicts become kopf's retries."""
    with metrics.reconciling(kind):
        try:
            await reconcile_resource(body, memo.services, indexes_of(found), old)
        except TryAgain as exc:
            raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc
        except StatusConflictError as exc:
            raise kopf.TemporaryError(f"{exc}: reconciling again", delay=CONFLICT_RETRY) from exc
