"""A revision's Spark application, and rewinds of its position, for views and jobs alike.

A streaming application never finishes, so one that ended (even with exit code 0) is started
again after a capped back-off, and one that keeps failing makes its view or job Stalled
(`plan.applications.restarts`, with the services' `RestartPolicy`). Its history (failures, the last
error, since when it runs, when its restart is due) lives in the resource's status, read at the
start of each reconcile and written with the rest at its end, so a restarted operator waits for a
due restart and goes on counting. Which runtime runs it is the services' business (`backends.base`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from distributary.api.common import Position
from distributary.backends.base import Owner, RevisionApp
from distributary.kafka.rewinds import move_group, rewind_offsets
from distributary.plan.applications.restarts import RestartHistory, observed
from distributary.plan.applications.runner_spec import RUNNER_SPEC_HASH
from distributary.plan.applications.spark_state import AppState
from distributary.plan.edits.write_ahead import rewind_record
from distributary.plan.status.conditions import rfc3339, suspension
from distributary.plan.views.view_status import RunObservation
from distributary.reconcile.ports import Events, Services, StatusStore, TryAgain

RESTART_CHECK = 1.0  # seconds: the shortest wait before a due restart is looked at again
CLEAN_EXITS = frozenset({"COMPLETED", "SUCCEEDING"})  # a runner that ended without failing
REPORT_WAIT = 10.0  # seconds a due restart of such a runner waits for its report
REPORT_POLL = 0.2


async def run_application(
    services: Services,
    app: RevisionApp,
    history: RestartHistory,
    now: datetime,
    held: Callable[[AppState], Awaitable[bool]] | None = None,
) -> tuple[AppState, RestartHistory]:
    """Run the application, restarting one that ended once its back-off is over (a failure
    seen for the first time is counted and its restart scheduled); its state and its restart
    history as status is to record it. `held`, asked when a restart is due, says that the
    application must not be restarted after all (its runner reported that Spark refuses its
    query, which it would refuse again): it is then left as it ended."""
    policy = services.restart_policy
    state = await asyncio.to_thread(app.state)
    history = observed(history, state, now, policy)
    if state.ended:
        if not history.due(now):
            return state, history
        if held is not None and await held(state):
            return state, history
        await asyncio.to_thread(app.remove)
        history = history.restarted()
    state = await asyncio.to_thread(app.start)
    return state, observed(history, state, now, policy)


async def resume(
    events: Events, services: Services, owner: Owner, status: Mapping[str, Any], revision: int
) -> None:
    """When the view or job was suspended until now (its Ready condition's reason, as last
    written), start its running revision again as it ran (`SparkRuntime.keep`: its application
    is then brought to the spec as any is) and say so."""
    if suspension(status) is not None:
        await asyncio.to_thread(services.runtime.keep, owner, [revision])
        events.info("Resumed", f"Revision {revision} runs again where it stopped.")


async def report_of_clean_exit(
    services: Services, key: str, spec_hash: str, ended: AppState
) -> dict[str, dict[str, Any]]:
    """The progress records, once the runner's report about the spec it ran (`spec_hash`, the
    `runner_spec_hash` of the revision `key` names) is read. A runner that exited without
    failing stopped because Spark refused its query (`runner.main`), and the record saying so
    may not be read yet when its application is seen to have ended: it is waited for
    (`REPORT_WAIT` at most), so that no restart is made that Spark would refuse again. A
    runner that failed is not waited for: nothing new then."""
    if ended.state not in CLEAN_EXITS:
        return {}
    progress = services.progress.poll(timeout=0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REPORT_WAIT
    while (progress.get(key) or {}).get(RUNNER_SPEC_HASH) != spec_hash and loop.time() < deadline:
        await asyncio.sleep(REPORT_POLL)
        progress = services.progress.poll(timeout=0)
    return progress


def come_back_for_restart(seen: RunObservation, now: datetime) -> None:
    """When the application ended, ask to run again when its restart is due (`TryAgain`)."""
    due = seen.history.restart_at
    if seen.app is not None and seen.app.ended and due is not None:
        delay = max((due - now).total_seconds(), RESTART_CHECK)
        raise TryAgain(f"{seen.app.message}; restarting in {delay:.0f}s", delay)


@dataclass(frozen=True)
class RewindTarget:
    """What a rewind moves: its revision and consumer group, the topics, how to stop the
    revision's application and to tell that it has stopped, and the revision's transactional id
    when it commits its offsets in transactions (then it is fenced instead). `logs` names each
    topic's Log and `partial_history` is the spec's allowance to read what retention left
    (None: the kind has none), for the refusal of a rewind to a place the logs do not have."""

    revision: int
    group: str
    topics: list[str]
    stop: Callable[[], object]
    stopped: Callable[[], bool]
    writer: str | None = None
    logs: dict[str, str] = field(default_factory=dict)
    partial_history: bool | None = None


# How soon a rewind looks again whether the old driver is gone.
STOPPED_POLL = 2.0


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
    revision, move its group. The group moves only once the old process can no longer commit
    to it: it is fenced (an exactly-once view), or it is gone (`TryAgain` until then). The
    `lastRewind` to record, or None when it was done before.

    A rewind to a place the logs do not have raises `PositionRefusedError` before anything is
    recorded, stopped or moved; it is looked at again on every reconcile while the spec asks
    for it (a time no record had reached is carried out once records reach it)."""
    last = dict(store.status.get("lastRewind") or {})
    if last.get("requestId") == request_id and last.get("phase") == "Done":
        return None
    if last.get("requestId") != request_id:
        offsets = await asyncio.to_thread(
            functools.partial(
                rewind_offsets,
                services.admin,
                target.group,
                target.topics,
                to,
                logs=target.logs,
                partial_history=target.partial_history,
            )
        )
        record = rewind_record(request_id, target.revision, offsets, generation, now)
        await store.record_ahead(record)
        last = record["lastRewind"]
    await asyncio.to_thread(target.stop)
    if target.writer is None and not await asyncio.to_thread(target.stopped):
        raise TryAgain(
            f"rewind {request_id}: waiting for revision {target.revision}'s driver to exit, so "
            "that its last commit cannot undo the rewind",
            STOPPED_POLL,
        )
    moved = await asyncio.to_thread(
        move_group, services.admin, target.group, last["offsets"], target.writer
    )
    return {**last, "offsets": moved, "phase": "Done", "completedAt": rfc3339(now)}
