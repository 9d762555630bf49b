"""A revision's Spark application on the configured runtime, for views and jobs alike.

A streaming application never finishes, so one that ended (even with exit code 0) is started
again after a capped back-off (`plan.spark_state.restart_delay`); the restarts in a row are
counted in the resource's status, and the due time of the next one is kept in memory (a restarted
operator restarts at once).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from distributary.api.common import Position
from distributary.controllers.settings import OperatorSettings
from distributary.kafka.rewinds import move_group, rewind_offsets
from distributary.plan.conditions import rfc3339
from distributary.plan.spark_state import AppState, restart_delay, spark_application_state
from distributary.plan.view_plan import holds


@dataclass(frozen=True)
class Runtime:
    """How to reach one revision's application: its name, and how to read, remove and start it
    (each a blocking call, run in a thread)."""

    namespace: str
    name: str
    state: Callable[[], AppState]
    start: Callable[[], AppState]
    remove: Callable[[], None]


SPARK_API = "sparkoperator.k8s.io/v1beta2"


def spark_operator_runtime(
    settings: OperatorSettings,
    namespace: str,
    name: str,
    manifest: Callable[[], dict[str, Any] | None],
) -> Runtime:
    """A revision's SparkApplication `name`, made from `manifest()` (None: leave it as it is).
    Starting it applies the manifest only when the application read last lacks part of it, so
    an observe round over many running views reads each application once and writes nothing."""
    read: dict[str, Any] = {}

    def state() -> AppState:
        read["app"] = settings.kube.get(SPARK_API, "SparkApplication", namespace, name)
        return spark_application_state(read["app"])

    def start() -> AppState:
        wanted = manifest()
        if wanted is None:
            return state()
        current = read.pop("app", None)
        if current is not None and holds(current, wanted):
            return spark_application_state(current)
        # The applied object carries the Spark operator's status: no second read needed.
        return spark_application_state(settings.kube.apply(wanted))

    def remove() -> None:
        read.pop("app", None)
        settings.kube.delete(SPARK_API, "SparkApplication", namespace, name)

    return Runtime(namespace, name, state, start, remove)


async def run_application(
    settings: OperatorSettings, app: Runtime, attempts: int
) -> tuple[AppState, int]:
    """Run the application, restarting one that ended once its back-off is over; its state and
    the restarts in a row."""
    key = (app.namespace, app.name)
    state = await asyncio.to_thread(app.state)
    if state.ended:
        due = settings.restart_due.get(key)
        if due is None:
            attempts += 1
            settings.restart_due[key] = time.monotonic() + restart_delay(attempts)
            return state, attempts
        if time.monotonic() < due:
            return state, attempts
        del settings.restart_due[key]
        await asyncio.to_thread(app.remove)
    state = await asyncio.to_thread(app.start)
    return state, 0 if state.running else attempts


@dataclass(frozen=True)
class RewindTarget:
    """What a rewind moves: the resource (for its status), its revision and consumer group, the
    topics, and how to stop the revision's application."""

    api_version: str
    kind: str
    namespace: str
    name: str
    revision: int
    group: str
    topics: list[str]
    stop: Callable[[], object]


async def rewind_once(
    settings: OperatorSettings,
    target: RewindTarget,
    request_id: str,
    to: Position,
    status: Any,
    now: datetime,
    generation: int,
) -> dict[str, Any] | None:
    """Carry out a rewind once per request id: record it in status with every partition's
    offsets before and after (the write-ahead record a restarted operator carries on), stop the
    revision, move its group. The `lastRewind` to record, or None when it was done before."""
    last = dict(status.get("lastRewind") or {})
    if last.get("requestId") == request_id and last.get("phase") == "Done":
        return None
    if last.get("requestId") != request_id:
        offsets = await asyncio.to_thread(
            rewind_offsets, settings.admin, target.group, target.topics, to
        )
        last = {
            "requestId": request_id,
            "revision": target.revision,
            "phase": "Pending",
            "offsets": offsets,
        }
        record = {
            "lastRewind": last,
            "pendingAction": {
                "action": "Rewind",
                "revision": target.revision,
                "generation": generation,
                "startedAt": rfc3339(now),
            },
        }
        await asyncio.to_thread(
            settings.kube.patch_status, target.api_version, target.kind, target.namespace,
            target.name, record,
        )  # fmt: skip
    await asyncio.to_thread(target.stop)
    await asyncio.to_thread(move_group, settings.admin, target.group, last["offsets"])
    return {**last, "phase": "Done", "completedAt": rfc3339(now)}
