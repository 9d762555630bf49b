"""A revision's Spark application, and rewinds of its position, for views and jobs alike.

A streaming application never finishes, so one that ended (even with exit code 0) is started
again after a capped back-off (`plan.spark_state.restart_delay`); the restarts in a row are
counted in the resource's status, and the due time of the next one is kept in memory (a restarted
operator restarts at once). Which runtime runs it is the services' business (`backends.base`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from distributary.api.common import Position
from distributary.backends.base import RevisionApp
from distributary.kafka.rewinds import move_group, rewind_offsets
from distributary.plan.conditions import rfc3339
from distributary.plan.spark_state import AppState, restart_delay
from distributary.plan.view_status import RunObservation
from distributary.plan.write_ahead import rewind_record
from distributary.reconcile.ports import Services, StatusStore, TryAgain


async def run_application(
    services: Services, app: RevisionApp, attempts: int
) -> tuple[AppState, int]:
    """Run the application, restarting one that ended once its back-off is over; its state and
    the restarts in a row."""
    key = (app.namespace, app.name)
    state = await asyncio.to_thread(app.state)
    if state.ended:
        due = services.restart_due.get(key)
        if due is None:
            attempts += 1
            services.restart_due[key] = time.monotonic() + restart_delay(attempts)
            return state, attempts
        if time.monotonic() < due:
            return state, attempts
        del services.restart_due[key]
        await asyncio.to_thread(app.remove)
    state = await asyncio.to_thread(app.start)
    return state, 0 if state.running else attempts


def come_back_for_restart(seen: RunObservation) -> None:
    """When the application ended, ask to run again when its restart is due (`TryAgain`)."""
    if seen.app is not None and seen.app.ended:
        delay = restart_delay(seen.attempts)
        raise TryAgain(f"{seen.app.message}; restarting in {delay:.0f}s", delay)


@dataclass(frozen=True)
class RewindTarget:
    """What a rewind moves: its revision and consumer group, the topics, and how to stop the
    revision's application."""

    revision: int
    group: str
    topics: list[str]
    stop: Callable[[], object]


async def rewind_once(
    services: Services,
    store: StatusStore,
    target: RewindTarget,
    request_id: str,
    to: Position,
    now: datetime,
    generation: int,
) -> dict[str, Any] | None:
    """Carry out a rewind once per request id: record it in status with every partition's
    offsets before and after (the write-ahead record a restarted operator carries on), stop the
    revision, move its group. The `lastRewind` to record, or None when it was done before."""
    last = dict(store.status.get("lastRewind") or {})
    if last.get("requestId") == request_id and last.get("phase") == "Done":
        return None
    if last.get("requestId") != request_id:
        offsets = await asyncio.to_thread(
            rewind_offsets, services.admin, target.group, target.topics, to
        )
        record = rewind_record(request_id, target.revision, offsets, generation, now)
        await store.record_ahead(record)
        last = record["lastRewind"]
    await asyncio.to_thread(target.stop)
    await asyncio.to_thread(move_group, services.admin, target.group, last["offsets"])
    return {**last, "phase": "Done", "completedAt": rfc3339(now)}
