"""Events posted on resources through the API client, from any task.

kopf's own posting works only inside its handlers (the observer's reconciles run outside them)
and only at the level its settings allow; the operator's events are posted here instead, by
`SENDERS` threads of their own: a reconcile never waits for its events, and events never take the
threads reconciles wait on the API server and Kafka with.
Warnings are posted first, at once. Normal events say what was done (a topic made, a revision
started) and are worth less than doing it: they wait while a reconcile is running, `PATIENCE`
seconds at most, so that when a thousand objects are applied at once each is Ready before its
events are posted (about one per object, which took the API server a quarter of its requests).
At most `QUEUED` wait to be posted; beyond that an event is dropped, as Kubernetes' own event
recorders drop them, and the drop is logged. An event that cannot be posted is logged at debug
level: it is worth no failure of its own.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from distributary.controllers import metrics
from distributary.kube.errors import KubeError
from distributary.kube.resources import Kube
from distributary.plan.status.events import event_manifest

LOGGER = logging.getLogger(__name__)
SENDERS = 2  # threads posting events
QUEUED = 5000  # events waiting to be posted, at most
PATIENCE = 30.0  # seconds a Normal event waits at most for the running reconciles to end
LOOK_EVERY = 0.2  # seconds between two looks at whether reconciles still run


class EventQueue:
    """Posts what it is given on threads of its own, `QUEUED` waiting at most: urgent ones
    first, the others once `busy` says no or they have waited `patience` seconds."""

    def __init__(
        self,
        senders: int = SENDERS,
        queued: int = QUEUED,
        busy: Callable[[], bool] = lambda: False,
        patience: float = PATIENCE,
    ) -> None:
        self._senders = senders
        self._queued = queued
        self._busy = busy
        self._patience = patience
        self._urgent: deque[Callable[[], None]] = deque()
        self._later: deque[tuple[float, Callable[[], None]]] = deque()
        self._waiting = 0  # queued or being sent
        self._changed = threading.Condition()
        self._threads: list[threading.Thread] = []
        self.dropped = 0

    def submit(self, send: Callable[[], None], what: str, urgent: bool = True) -> bool:
        """Post with `send` on a sender thread; False when the queue was full (dropped)."""
        with self._changed:
            dropped = 0
            if self._waiting >= self._queued:
                self.dropped += 1
                dropped = self.dropped
            else:
                self._waiting += 1
                if urgent:
                    self._urgent.append(send)
                else:
                    self._later.append((time.monotonic(), send))
                while len(self._threads) < self._senders:
                    name = f"events-{len(self._threads)}"
                    thread = threading.Thread(target=self._send_forever, name=name, daemon=True)
                    self._threads.append(thread)
                    thread.start()
                self._changed.notify()
        if dropped and (dropped == 1 or dropped % 100 == 0):  # said, not once per event
            LOGGER.warning(
                "%d events dropped (%d waiting to be posted; the API server is slow): %s",
                dropped, self._queued, what,
            )  # fmt: skip
        return not dropped

    def drain(self, timeout: float) -> bool:
        """Wait until nothing waits to be posted, `timeout` seconds at most; whether it is so."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._waiting and time.monotonic() < deadline:
                self._changed.wait(min(LOOK_EVERY, max(0.0, deadline - time.monotonic())))
            return not self._waiting

    def _next(self) -> Callable[[], None] | None:
        if self._urgent:
            return self._urgent.popleft()
        if self._later:
            queued_at, send = self._later[0]
            if time.monotonic() - queued_at >= self._patience or not self._busy():
                self._later.popleft()
                return send
        return None

    def _send_forever(self) -> None:
        while True:
            with self._changed:
                send = self._next()
                while send is None:
                    self._changed.wait(LOOK_EVERY)
                    send = self._next()
            try:
                send()
            except Exception as exc:  # a send logs its own failures; nothing stops the sender
                LOGGER.debug("posting an event: %s", exc)
            finally:
                with self._changed:
                    self._waiting -= 1
                    self._changed.notify_all()


_QUEUE = EventQueue(busy=metrics.reconciles_running)


def drain(timeout: float) -> bool:
    """Wait until every event submitted so far has been sent (or dropped); False when `timeout`
    seconds passed first."""
    return _QUEUE.drain(timeout)


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
        _QUEUE.submit(send, f"{reason} on {self._what()}", urgent=kind == "Warning")

    def _what(self) -> str:
        meta = self.body.get("metadata") or {}
        return f"{self.body.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
