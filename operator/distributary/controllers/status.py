"""The operator's status store: every status write of every controller goes through a recorder.

A recorder is made from the object as it was read, and writes only onto that version
(`resourceVersion`): a status computed from an older read never overwrites a newer one, such as
another reconcile's write-ahead record or cutover. Each write it makes moves its version on, so
a reconcile's write-ahead record and its final status chain onto each other. When the object
changed meanwhile, the write is refused (`StatusConflictError`) and the reconcile is run again from
what is there now. The final status is written only where it changes something, and the
kind's metrics are published from it. A reconcile's final status also says which spec it carried
out (`status.handledSpec`, `handled.py`), which a write of observations only does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from distributary.controllers import metrics
from distributary.controllers.handled import HANDLED_FIELD, handled_text
from distributary.kube.errors import KubeError
from distributary.kube.resources import Kube
from distributary.plan.status.status_patch import changes, merged
from distributary.reconcile.ports import StatusConflictError


def _publish_view(namespace: str, name: str, status: Mapping[str, Any]) -> None:
    metrics.record_view(namespace, name, status)


def _publish_job(namespace: str, name: str, status: Mapping[str, Any]) -> None:
    metrics.record_job(namespace, name, status)


def _publish_log(namespace: str, name: str, status: Mapping[str, Any]) -> None:
    if "endOffsets" in status:
        metrics.record_log_offsets(namespace, name, status["endOffsets"], status.get("records"))


PUBLISH: dict[str, Callable[[str, str, Mapping[str, Any]], None]] = {
    "DerivedView": _publish_view,
    "StreamJob": _publish_job,
    "Log": _publish_log,
    "Sink": metrics.record_sink,
    "Source": metrics.record_source,
}


@dataclass
class StatusRecorder:
    """Writes one object's status onto the version read, and follows its own writes (the
    `StatusStore` of `reconcile.ports`, kept in the API server)."""

    kube: Kube
    api_version: str
    kind: str
    namespace: str
    name: str
    version: str | None
    status: dict[str, Any] = field(default_factory=dict)  # as written last (or read)
    handled: str | None = None  # the spec a reconcile carries out (`handled.handled_text`)

    @classmethod
    def of(cls, kube: Kube, body: Mapping[str, Any], reconciles: bool = True) -> StatusRecorder:
        """A recorder for the object `body` as read (its version and status); `reconciles`:
        its writer carries out the spec read, and its final status says so."""
        meta = body.get("metadata") or {}
        return cls(
            kube,
            str(body.get("apiVersion")),
            str(body.get("kind")),
            str(meta.get("namespace")),
            str(meta.get("name")),
            meta.get("resourceVersion"),
            dict(body.get("status") or {}),
            handled_text(body.get("spec")) if reconciles and "spec" in body else None,
        )

    async def record_ahead(self, record: Mapping[str, Any]) -> None:
        """Write a write-ahead record (`plan.edits.write_ahead`) before acting on it. Raises
        `StatusConflictError` when the object changed since it was read: then nothing may act."""
        await self._write(record)

    async def finish(self, status: Mapping[str, Any]) -> bool:
        """Write the reconcile's status where it changes something, and publish its metrics;
        whether it was written. Raises `StatusConflictError` as `record_ahead` does."""
        if self.handled is not None and self.status.get(HANDLED_FIELD) != self.handled:
            status = {**status, HANDLED_FIELD: self.handled}
        written = changes(self.status, status)
        if written:
            await self._write(status)
        publish = PUBLISH.get(self.kind)
        if publish is not None:
            publish(self.namespace, self.name, merged(self.status, status))
        return written

    async def _write(self, update: Mapping[str, Any]) -> None:
        try:
            stored = await asyncio.to_thread(
                self.kube.patch_status,
                self.api_version,
                self.kind,
                self.namespace,
                self.name,
                update,
                self.version,
            )
        except KubeError as exc:
            if exc.status == 409:
                raise StatusConflictError(
                    f"{self.kind} {self.namespace}/{self.name} changed since it was read"
                ) from exc
            raise
        self.version = (stored.get("metadata") or {}).get("resourceVersion") or self.version
        found = stored.get("status")
        self.status = dict(found) if isinstance(found, Mapping) else merged(self.status, update)
