"""Events posted on resources through the API client, from any task.

kopf's own posting works only inside its handlers (the observer's reconciles run outside them)
and only at the level its settings allow; the operator's events are posted here instead, by
`SENDERS` threads of their own: a reconcile never waits for its events, and events never take the
threads reconciles wait on the API server and Kafka with (on 1,300 new objects at once, about
1,600 events would otherwise queue before the reconciles' own requests).
At most `QUEUED` wait to be posted; beyond that an event is dropped, as Kubernetes' own event
recorders drop them, and the drop is logged. An event that cannot be posted is logged at debug
level: it is worth no failure of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from distributary.kube.errors import KubeError
from distributary.kube.resources import Kube
from distributary.plan.status.events import event_manifest

LOGGER = logging.getLogger(__name__)
SENDERS = 2  # threads posting events
QUEUED = 1000  # events waiting to be posted, at most


class EventQueue:
    """Posts what it is given on threads of its own, `QUEUED` waiting at most."""

    def __init__(self, senders: int = SENDERS, queued: int = QUEUED) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(senders, "events")
        self._queued = queued
        self._waiting = 0
        self._lock = threading.Lock()
        self.dropped = 0

    def submit(self, send: Callable[[], None], what: str) -> bool:
        """Post with `send` on a sender thread; False when the queue was full (dropped)."""
        with self._lock:
            if self._waiting >= self._queued:
                self.dropped += 1
                dropped = self.dropped
            else:
                self._waiting += 1
                dropped = 0
        if dropped:
            if dropped == 1 or dropped % 100 == 0:  # said, not once per event
                LOGGER.warning(
                    "%d events dropped (%d waiting to be posted; the API server is slow): %s",
                    dropped, self._queued, what,
                )  # fmt: skip
            return False
        self._pool.submit(self._send, send)
        return True

    def _send(self, send: Callable[[], None]) -> None:
        try:
            send()
        finally:
            with self._lock:
                self._waiting -= 1


_QUEUE = EventQueue()


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
            asyncio.get_running_loop()
        except RuntimeError:
            send()
            return
        _QUEUE.submit(send, f"{reason} on {self._what()}")

    def _what(self) -> str:
        meta = self.body.get("metadata") or {}
        return f"{self.body.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
