"""Events posted on resources through the API client, from any task.

kopf's own posting works only inside its handlers (the observer's reconciles run outside them)
and only at the level its settings allow; the operator's events are posted here instead, each in
a thread of its own so that a slow API server never holds up a reconcile. An event that cannot be
posted is logged at debug level: it is worth no failure of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from distributary.kube.resources import Kube, KubeError
from distributary.plan.status.events import event_manifest

LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class KubeEvents:
    """A resource's events (the `Events` port of `reconcile.ports`)."""

    kube: Kube
    body: Mapping[str, Any]

    def info(self, reason: str, message: str) -> None:
        """A Normal event on the resource."""
        self.post("Normal", reason, message)

    def warn(self, reason: str, message: str) -> None:
        """A Warning event on the resource."""
        self.post("Warning", reason, message)

    def post(self, kind: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        """Post the event without waiting for it (at once when no event loop runs)."""
        manifest = event_manifest(self.body, kind, reason, message, datetime.now(UTC))

        def send() -> None:
            try:
                self.kube.create(manifest)
            except (KubeError, OSError) as exc:
                LOGGER.debug("event %s on %s not posted: %s", reason, self._what(), exc)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            send()
            return
        loop.run_in_executor(None, send)

    def _what(self) -> str:
        meta = self.body.get("metadata") or {}
        return f"{self.body.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
