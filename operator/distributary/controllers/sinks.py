"""The Sink controller: a PostgreSQL table or a Redis cache kept equal to a Log.

Each round (on every change, and every `--observe-interval` while the Sink lives) reads the Log
the Sink names (its columns, key and the topic it serves: a view's output follows its serving
revision), writes the store's password from its Secret where only the Sink's process reads it,
keeps one process (`python -m distributary.sinks`) running on that topic, and writes status: the
position the store holds (mirrored to the Sink's consumer group, committed with the rows), the lag,
and Ready/Reconciling/Stalled.

The process stores each batch's offsets in the same transaction as its rows, so it may be killed
at any point and started again: the table is exactly what the log implies. When the Log's serving
topic changes (the view cut over), a new process fills the new revision's table beside the one
readers read and switches them over in one transaction; a Redis Sink cannot switch its keys
atomically, so it stops and says so (Stalled). A process that refuses its store (a column of
another type, another key) exits with code 3: the Sink is Stalled with its reason until its spec
changes.

Processes run under the operator's `local` runtime (on its own machine, as revisions do). Deleting
a Sink stops its process and leaves its table or keys as they are.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kopf

from distributary.api import parse_body
from distributary.api.common import Condition
from distributary.api.log import Log
from distributary.api.sink import Sink
from distributary.controllers import metrics
from distributary.controllers.handling import one_at_a_time
from distributary.controllers.indexes import GROUP, VERSION
from distributary.controllers.secrets import SecretMissingError, secret_value
from distributary.controllers.services import OperatorServices
from distributary.controllers.status import StatusRecorder
from distributary.plan.conditions import Observation, Problem, Work, conditions
from distributary.plan.sink_plan import SinkRun, sink_run
from distributary.reconcile.ports import StatusConflictError
from distributary.sql import SqlError

PLURAL = "sinks"
REFUSED_MARK = ": refused: "  # in the last line of a process that refused its store
LOGGER = logging.getLogger("distributary.sinks")


def _password_file(services: OperatorServices, sink: Sink, folder: Path) -> str | None:
    """Write the store's password where the Sink's process reads it (0600, in the Sink's own
    folder, as a kubelet mounts a Secret); its path, or None when the store needs none."""
    store = sink.spec.postgres or sink.spec.redis
    secret = store.password_secret if store is not None else None
    if secret is None:
        return None
    field = "postgres" if sink.spec.postgres is not None else "redis"
    value = secret_value(services, sink.metadata.namespace, secret, f"spec.{field}.passwordSecret")
    path = folder / "secrets" / secret.name / secret.key
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists() or path.read_text("utf-8") != value:
        descriptor = os.open(path.with_suffix(".new"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(value)
        os.replace(path.with_suffix(".new"), path)
    return str(path)


def _round(services: OperatorServices, body: Mapping[str, Any]) -> dict[str, Any]:
    """One round of a Sink, blocking: its process kept as its spec says; its status."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    generation = int(meta.get("generation") or 0)
    before = body.get("status") or {}
    previous = [Condition.model_validate(c) for c in before.get("conditions") or []]

    def finished(
        problems: tuple[Problem, ...] = (), work: tuple[Work, ...] = (), ready: str = "",
        **fields: Any,
    ) -> dict[str, Any]:  # fmt: skip
        observation = Observation(
            generation,
            first_sight=not previous,
            problems=problems,
            work=work,
            ready_reason="Serving",
            ready_message=ready or "The store holds what the log holds.",
        )
        listed = conditions(observation, previous, datetime.now(UTC))
        return {
            "observedGeneration": generation,
            "conditions": [
                c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in listed
            ],
            **fields,
        }

    parsed = parse_body(body, Sink)
    if isinstance(parsed, str):
        return finished((Problem("InvalidSpec", parsed),))
    sink = parsed
    local = services.sink_processes
    if local is None:
        return finished((Problem("NoSinkRuntime", (
            "Sinks run as processes of the operator's local runtime (--spark-runtime local) in "
            "this version; under spark-operator, run the Sink with `distributary run` beside "
            "the cluster, or use the local runtime"
        )),))  # fmt: skip
    found = services.kube.get("distributary.dev/v1alpha1", "Log", namespace, sink.spec.log)
    if found is None:
        return finished(work=(Work("WaitingForLog", f"Log {sink.spec.log} does not exist yet."),))
    log = parse_body(found, Log)
    topic = (found.get("status") or {}).get("topicName")
    if isinstance(log, str) or not topic:
        why = "has no topic yet" if not isinstance(log, str) else f"cannot be read: {log}"
        return finished(work=(Work("WaitingForLog", f"Log {sink.spec.log} {why}."),))
    if not log.spec.record_schema:
        return finished((Problem("LogHasNoSchema", (
            f"Log {sink.spec.log} has no schema, and the table is made from the Log's columns: "
            "declare spec.schema on the Log"
        )),))  # fmt: skip
    app = local.sink(namespace, name)
    try:
        password = _password_file(services, sink, app.folder)
        run = sink_run(sink, log.spec.record_schema, log.spec.key or [], topic,
                       services.bootstrap_servers, password, services.kafka_security)  # fmt: skip
    except SecretMissingError as exc:
        return finished((Problem("SecretMissing", str(exc)),))
    except SqlError as exc:
        return finished((Problem("LogSchemaRefused", f"Log {sink.spec.log}'s schema: {exc}"),))
    ran = _last_run(app.spec_file)
    if ran is not None and ran.topic == topic:
        # A view's output topic holds one revision's rows, of that revision's columns; the
        # Log's spec may already describe the next revision, catching up beside.
        run = run.model_copy(update={"columns": ran.columns, "key": ran.key})
    fields: dict[str, Any] = {"topic": topic}
    if ran is not None and ran.topic != topic and sink.spec.redis is not None:
        local.stop(app)
        return finished((Problem("CacheCannotSwitch", (
            f"Log {sink.spec.log} now serves {topic}, not {ran.topic}: the cache holds the keys "
            "of the revision before, and Redis cannot switch them in one transaction; point "
            "spec.redis.keyPrefix at a new prefix to fill it from the serving revision"
        )),), topic=ran.topic)  # fmt: skip
    if app.pid() is None and ran == run and REFUSED_MARK in app.last_line():
        # It refused its store with this very spec: started again, it would refuse again.
        return finished((Problem("StoreRefused", _refusal(app.last_line())),), **fields)
    state = local.ensure_sink(run)
    position, lag = _position(services, run)
    fields.update(position={str(p): o for p, o in sorted(position.items())}, lag=lag)
    if not state.running:
        return finished(
            work=(Work("Starting", f"The Sink's process starts on {topic}."),), **fields
        )
    if lag is None or lag > 0:
        behind = "its position is not known yet" if lag is None else f"{lag} records behind"
        return finished(work=(Work("CatchingUp", f"The store is {behind} {topic}."),), **fields)
    return finished(ready=f"The store holds every record of {topic}.", **fields)


def _refusal(line: str) -> str:
    said = line.split(REFUSED_MARK, 1)[-1] if REFUSED_MARK in line else line
    return (f"The Sink's process refused its store: {said or 'see its log'}. Fix the table or "
            "the spec; a changed spec starts it again.")  # fmt: skip


def _last_run(spec_file: Path) -> SinkRun | None:
    try:
        return SinkRun.model_validate_json(spec_file.read_text("utf-8"))
    except (OSError, ValueError):
        return None


def _position(services: OperatorServices, run: SinkRun) -> tuple[dict[int, int], int | None]:
    """The position the Sink mirrored to its group, and its lag (None: not known yet)."""
    try:
        committed = services.admin.committed(run.group).get(run.topic, {})
        lag = services.admin.lag(run.group, [run.topic]).get(run.topic, {})
    except Exception as exc:  # observed again next round
        LOGGER.debug("the position of Sink %s: %s", run.name, exc)
        return {}, None
    return dict(committed), (sum(lag.values()) if committed else None)


async def reconcile_sink(body: Mapping[str, Any], services: OperatorServices) -> None:
    """One round of a Sink, its status written onto the version `body` was read at."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return
    async with one_at_a_time("Sink", str(meta.get("namespace")), str(meta.get("name"))):
        recorder = StatusRecorder.of(services.kube, body)
        status = await asyncio.to_thread(_round, services, body)
        try:
            await recorder.finish(status)
        except StatusConflictError:
            LOGGER.debug(
                "Sink %s/%s changed while reconciled", meta.get("namespace"), meta.get("name")
            )


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def reconcile(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Reconcile a Sink on every change of its spec."""
    await reconcile_sink(body, memo.services)


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)
async def observe(stopped: kopf.DaemonStopped, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Every `--observe-interval` while the Sink lives: its process kept running on the
    topic its Log serves (started again when it died), its position and lag in status."""
    services: OperatorServices = memo.services
    while not stopped:
        await stopped.wait(services.settings.observe_interval)
        if stopped:
            break
        try:
            await reconcile_sink(body, services)
        except Exception as exc:  # the next round tries again; the log says why
            LOGGER.warning("Sink %s/%s: %s", body.meta.get("namespace"), body.meta.get("name"), exc)


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def delete(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Stop the Sink's process (it finishes its transaction); the store keeps its rows."""
    services: OperatorServices = memo.services
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    local = services.sink_processes
    if local is not None:
        app = local.sink(namespace, name)
        await asyncio.to_thread(local.stop, app)
    metrics.forget(namespace, name)
    LOGGER.info(
        "Sink %s/%s deleted: its process stopped; its store keeps its rows", namespace, name
    )
