"""The one reconcile of a Sink: a PostgreSQL table or a Redis cache kept equal to a Log.

Both front ends run it: the operator on every change of the spec and at every observer round,
`distributary run` at every round, in the pipeline's order. It reads the Log the Sink names (its
columns, key and the topic it serves: a view's output follows its serving revision), keeps one
process (`python -m distributary.sinks`) running on that topic through the services'
`SinkRuntime` (a Deployment in a cluster, a process on this machine; how the store's password
reaches the process is the runtime's), and writes status: the position the store holds (mirrored
to the Sink's consumer group, committed with the rows), the lag, and Ready/Reconciling/Stalled.

The process stores each batch's offsets in the same transaction as its rows, so it may be killed
at any point and started again. When the Log's serving topic changes (the view cut over), a new
process fills the new revision's table beside the one readers read and switches them over in one
transaction. A process that refuses its store (a column of another type, another key) says so in
its group's commit metadata (`plan.sinks.sink_plan.REFUSED_METADATA`), the one signal every runtime
gives: the Sink is Stalled with its reason, and its process is not started again with that spec.

A process that exits is started again after the services' `RestartPolicy` (the operator's
`--restart-delay` flags), its history in `status.process`, as an application's is in a view's
status; a process that made progress since it was last seen starts a fresh history, so only
failures without progress make the back-off grow and, in the end, the Sink Stalled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from distributary.api import parse_body
from distributary.api.common import Condition
from distributary.api.log import Log
from distributary.api.sink import Sink
from distributary.backends.base import SecretMissingError, SinkRuntime
from distributary.kafka.admin import KafkaAdmin
from distributary.plan.applications.restarts import (
    APPLICATION_FAILING,
    RestartHistory,
    RestartPolicy,
    duration,
    stalled,
)
from distributary.plan.applications.spark import owner_reference
from distributary.plan.applications.spark_state import AppState
from distributary.plan.sinks.sink_plan import REFUSED_METADATA, SinkRun, sink_run
from distributary.plan.status.conditions import Observation, Problem, Work, conditions, rfc3339
from distributary.reconcile.applications import run_application
from distributary.reconcile.ports import Events, Services, StatusStore, World
from distributary.sql import SqlError

LOGGER = logging.getLogger("distributary.sinks")


@dataclass(frozen=True)
class Held:
    """What the Sink's consumer group says: the position the store holds, its lag (None: not
    known yet) and the refusal its process left in the commit metadata (None: none)."""

    position: dict[int, int] = field(default_factory=dict)
    lag: int | None = None
    refused: str | None = None


def held_by_group(admin: KafkaAdmin, run: SinkRun) -> Held:
    """The position the Sink mirrored to its group, its lag, and a refusal left in the group's
    commit metadata; nothing known when Kafka does not answer (observed again next round)."""
    try:
        committed = admin.committed(run.group).get(run.topic, {})
        lag = admin.lag(run.group, [run.topic]).get(run.topic, {})
        said = admin.committed_metadata(run.group, run.topic)
    except Exception as exc:  # observed again next round
        LOGGER.debug("the position of Sink %s: %s", run.name, exc)
        return Held()
    refused = next(
        (m[len(REFUSED_METADATA) :] for m in said if m.startswith(REFUSED_METADATA)), None
    )
    return Held(dict(committed), sum(lag.values()) if committed else None, refused)


def same_revision(run: SinkRun, ran: SinkRun | None) -> SinkRun:
    """A view's output topic holds one revision's rows, of that revision's columns; the Log's
    spec may already describe the next revision, catching up beside: a process that read the
    topic before keeps the columns it had."""
    if ran is not None and ran.topic == run.topic:
        return run.model_copy(update={"columns": ran.columns, "key": ran.key})
    return run


def refusal_message(said: str) -> str:
    """Why the Sink is Stalled when its process refused its store, with the fix."""
    said = said.rstrip(".")
    return (f"The Sink's process refused its store: {said or 'see its log'}. Fix the table or "
            "the spec; a changed spec starts it again.")  # fmt: skip


def _unchanged(run: SinkRun, last: SinkRun | None) -> bool:
    """Whether the process was last given this very spec (where its password and Kafka's
    credentials lie aside)."""
    if last is None:
        return False
    aside = {"password_file": None, "kafka_security": None}  # as each runtime hands them over
    return last.model_copy(update=aside) == run.model_copy(update=aside)


def _history(status: Mapping[str, Any], app: str, topic: str, generation: int) -> RestartHistory:
    """The process's restart history as status records it: none for another process (a new
    topic) or a changed spec."""
    record = status.get("process") or {}
    if (
        record.get("name") != app
        or status.get("topic") != topic
        or status.get("observedGeneration") != generation
    ):
        return RestartHistory()
    return RestartHistory.from_status(record)


def _forgiven(history: RestartHistory, before: Mapping[str, Any], now: dict[int, int]) -> bool:
    """Whether the store moved on since the last round: then earlier failures are forgiven."""
    was = {int(p): int(o) for p, o in (before.get("position") or {}).items()}
    return bool(history.attempts) and bool(now) and was != now


def _restart_findings(
    history: RestartHistory, state: AppState, now: datetime, policy: RestartPolicy
) -> tuple[tuple[Problem, ...], tuple[Work, ...]]:
    """`ApplicationFailing` once the process failed too often without progress; `Restarting`
    while it waits for its restart."""
    if stalled(history, now, policy):
        count = len(history.recent(now, policy))
        text = (
            f"The Sink's process exited {count} times within {duration(policy.window)} "
            f"without moving on; the last error: {history.last_error or 'none given'}"
        )
        if history.restart_at is not None:
            text += f"; the next retry is at {rfc3339(history.restart_at)}"
        return (Problem(APPLICATION_FAILING, text),), ()
    if state.ended and history.restart_at is not None:
        return (), (
            Work(
                "Restarting",
                f"Its process exited ({state.message}); restart {history.attempts} is due at "
                f"{rfc3339(history.restart_at)}",
            ),
        )
    return (), ()


@dataclass
class _Round:
    """One reconcile's findings, turned into the status it writes."""

    generation: int
    previous: list[Condition]
    fields: dict[str, Any] = field(default_factory=dict)

    def status(
        self, problems: tuple[Problem, ...] = (), work: tuple[Work, ...] = (), ready: str = ""
    ) -> dict[str, Any]:
        observation = Observation(
            self.generation,
            first_sight=not self.previous,
            problems=problems,
            work=work,
            ready_reason="Serving",
            ready_message=ready or "The store holds what the log holds.",
        )
        listed = conditions(observation, self.previous, datetime.now(UTC))
        return {
            "observedGeneration": self.generation,
            "conditions": [
                c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in listed
            ],
            **self.fields,
        }


async def reconcile_sink(
    body: Mapping[str, Any],
    services: Services,
    store: StatusStore,
    world: World,
    events: Events,
    old: Any = None,
    now: datetime | None = None,
) -> None:
    """Keep the Sink's process on the topic its Log serves, and record what it holds."""
    now = now or datetime.now(UTC)
    meta = body.get("metadata") or {}
    before = store.status
    found = _Round(
        int(meta.get("generation") or 0),
        [Condition.model_validate(c) for c in before.get("conditions") or []],
    )
    status = await _reconcile(body, services, store.status, world, events, found, now)
    _announce(events, before, status)
    await store.finish(status)


async def _reconcile(
    body: Mapping[str, Any],
    services: Services,
    before: Mapping[str, Any],
    world: World,
    events: Events,
    found: _Round,
    now: datetime,
) -> dict[str, Any]:
    planned = await _planned(body, services, world)
    if not isinstance(planned, tuple):
        return found.status(*planned.findings)
    sink, run = planned
    found.fields["topic"] = run.topic
    runtime: SinkRuntime = services.sinks  # type: ignore[assignment] # checked by _planned
    namespace, name = sink.metadata.namespace, sink.metadata.name
    last = await asyncio.to_thread(runtime.last_run, namespace, name)
    run = same_revision(run, last)
    try:
        app = await asyncio.to_thread(runtime.sink_app, sink, run, _owner(body))
    except SecretMissingError as exc:
        return found.status((Problem("SecretMissing", str(exc)),))
    held = await asyncio.to_thread(held_by_group, services.admin, run)
    found.fields.update(
        position={str(p): o for p, o in sorted(held.position.items())}, lag=held.lag
    )
    if held.refused is not None and _unchanged(run, last):
        state = await asyncio.to_thread(app.state)
        if not state.running and state.state != "ABSENT":
            # It refused its store with this very spec: started again, it would refuse again.
            found.fields["process"] = {"name": app.name, "state": state.state}
            return found.status((Problem("StoreRefused", refusal_message(held.refused)),))
    history = _history(before, app.name, run.topic, found.generation)
    if _forgiven(history, before, held.position):
        history = replace(history, attempts=0, failures=())
    if not _unchanged(run, last):  # a new process: how the last one ended does not count
        _say_new_process(events, sink, run, last)
        if (await asyncio.to_thread(app.state)).ended:
            await asyncio.to_thread(app.remove)
        history = RestartHistory()
    counted = history.restart_at
    state, history = await run_application(services, app, history, now)
    if state.ended and counted is None and history.restart_at is not None:
        delay = max((history.restart_at - now).total_seconds(), 0.0)
        events.info("Restarting", f"Its process exited ({state.message}); starting it "
                                  f"again in {delay:.0f}s")  # fmt: skip
    found.fields["process"] = {"name": app.name, "state": state.state, **history.status_fields()}
    problems, work = _restart_findings(history, state, now, services.restart_policy)
    if problems or work:
        return found.status(problems, work)
    topic = run.topic
    if not state.running:
        why = f": {state.message}" if state.message else ""
        starting = Work("Starting", f"The Sink's process starts on {topic}{why}.")
        return found.status(work=(starting,))
    if held.lag is None or held.lag > 0:
        behind = f"{held.lag} records behind"
        if held.lag is None:
            behind = "its position is not known yet"
        return found.status(work=(Work("CatchingUp", f"The store is {behind} {topic}."),))
    return found.status(ready=f"The store holds every record of {topic}.")


@dataclass(frozen=True)
class _Findings:
    """A Sink that cannot be planned yet, or ever: why."""

    findings: tuple[tuple[Problem, ...], tuple[Work, ...]]


async def _planned(
    body: Mapping[str, Any], services: Services, world: World
) -> tuple[Sink, SinkRun] | _Findings:
    """The Sink and its process's spec on the topic its Log serves; or why there is none."""

    def problem(reason: str, message: str) -> _Findings:
        return _Findings(((Problem(reason, message),), ()))

    def waiting(message: str) -> _Findings:
        return _Findings(((), (Work("WaitingForLog", message),)))

    sink = parse_body(body, Sink)
    if isinstance(sink, str):
        return problem("InvalidSpec", sink)
    if services.sinks is None:
        return problem("NoSinkRuntime", "No Sink runtime is configured: Sinks cannot run here.")
    log_body = await asyncio.to_thread(world.log, sink.metadata.namespace, sink.spec.log)
    if log_body is None:
        return waiting(f"Log {sink.spec.log} does not exist yet.")
    log = parse_body(log_body, Log)
    topic = (log_body.get("status") or {}).get("topicName")
    if isinstance(log, str) or not topic:
        why = "has no topic yet" if not isinstance(log, str) else f"cannot be read: {log}"
        return waiting(f"Log {sink.spec.log} {why}.")
    if not log.spec.record_schema:
        return problem("LogHasNoSchema", (
            f"Log {sink.spec.log} has no schema, and the table is made from the Log's columns: "
            "declare spec.schema on the Log"
        ))  # fmt: skip
    if not await _topic_made(services.admin, topic):
        return waiting(f"The topic {topic} of Log {sink.spec.log} is not made yet.")
    try:
        run = sink_run(sink, log.spec.record_schema, log.spec.key or [], topic,
                       services.bootstrap_servers, None, services.kafka_security)  # fmt: skip
    except SqlError as exc:
        return problem("LogSchemaRefused", f"Log {sink.spec.log}'s schema: {exc}")
    return sink, run


def _owner(body: Mapping[str, Any]) -> dict[str, Any]:
    """The controlling ownerReference to the Sink, for its children."""
    meta = body.get("metadata") or {}
    owner = {"apiVersion": str(body.get("apiVersion")), "kind": "Sink"}
    return owner_reference({**owner, "name": str(meta.get("name")), "uid": str(meta.get("uid"))})


async def _topic_made(admin: KafkaAdmin, topic: str) -> bool:
    """Whether `topic` exists (it is made by the reconcile of its writer); when Kafka does not
    answer, the Log's word for it is taken."""
    try:
        return bool((await asyncio.to_thread(admin.list_partitions, [topic])).get(topic))
    except Exception as exc:  # the process waits for Kafka itself
        LOGGER.debug("the partitions of %s: %s", topic, exc)
        return True


def _say_new_process(events: Events, sink: Sink, run: SinkRun, last: SinkRun | None) -> None:
    """A process on a new spec: the first, or one filling a new revision's table beside."""
    if last is not None and last.topic != run.topic:
        where = last.table if sink.spec.postgres else f"{last.key_prefix}<key>"
        events.info("CutOver", f"Log {sink.spec.log} now serves {run.topic}: filling it beside "
                               f"{where}, which readers read until it is whole")  # fmt: skip
    else:
        events.info("Started", f"{run.topic} -> {run.table} ({run.mode})")


def _announce(events: Events, before: Mapping[str, Any], status: Mapping[str, Any]) -> None:
    """Say once that the Sink became Stalled, and why (not again while it stays so)."""

    def stalled_of(found: Mapping[str, Any]) -> tuple[str, str] | None:
        for condition in found.get("conditions") or []:
            if condition.get("type") == "Stalled" and condition.get("status") == "True":
                return str(condition.get("reason")), str(condition.get("message") or "")
        return None

    now = stalled_of(status)
    if now is not None and now != stalled_of(before):
        events.warn(now[0], now[1])
