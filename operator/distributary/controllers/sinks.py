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
readers read and switches them over in one transaction (a Redis Sink: keys filled beside,
switched in one script). A process that refuses its store (a column of
another type, another key) exits with code 3: the Sink is Stalled with its reason until its spec
changes.

Where the process runs follows the operator's runtime: under `spark-operator`, a Deployment of the
job image (`backends.sink_workloads`; the pod reads the password from its Secret, and a refusal
reaches the operator as the group's commit metadata); under `local`, a process on the operator's
machine, as revisions are. Deleting a Sink stops its process and leaves its table or keys as they
are.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf

from distributary.api import parse_body
from distributary.api.common import Condition
from distributary.api.log import Log
from distributary.api.sink import Sink
from distributary.backends.local_spark import LocalRuntime
from distributary.backends.sink_workloads import SinkDeployments
from distributary.controllers import metrics
from distributary.controllers.indexes import GROUP, VERSION
from distributary.controllers.rounds import every_interval, owner_of_body, round_status, run_round
from distributary.controllers.secrets import SecretMissingError, secret_value
from distributary.controllers.services import OperatorServices
from distributary.plan.conditions import Observation, Problem, Work
from distributary.plan.sink_plan import REFUSED_METADATA, SinkRun, sink_manifests, sink_run
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
    namespace = str(meta.get("namespace"))
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
        return round_status(observation, previous, **fields)

    parsed = parse_body(body, Sink)
    if isinstance(parsed, str):
        return finished((Problem("InvalidSpec", parsed),))
    sink = parsed
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
    try:
        run = sink_run(sink, log.spec.record_schema, log.spec.key or [], topic,
                       services.bootstrap_servers, None, services.kafka_security)  # fmt: skip
    except SqlError as exc:
        return finished((Problem("LogSchemaRefused", f"Log {sink.spec.log}'s schema: {exc}"),))
    fields: dict[str, Any] = {"topic": topic}
    try:
        if services.sink_processes is not None:
            running, problem, waiting = _local(services, services.sink_processes, sink, run)
        else:
            running, problem, waiting = _in_cluster(services, sink, run, body)
    except SecretMissingError as exc:
        return finished((Problem("SecretMissing", str(exc)),), **fields)
    if problem is not None:
        return finished((problem,), **fields)
    position, lag, refused = _position(services, run)
    fields.update(position={str(p): o for p, o in sorted(position.items())}, lag=lag)
    if not running and refused is not None and services.sink_processes is None:
        # The pod's process refused its store (Kubernetes starts it again, to refuse again).
        return finished((Problem("StoreRefused", _refusal(refused)),), **fields)
    if not running:
        why = f": {waiting}" if waiting else ""
        return finished(
            work=(Work("Starting", f"The Sink's process starts on {topic}{why}."),), **fields
        )
    if lag is None or lag > 0:
        behind = "its position is not known yet" if lag is None else f"{lag} records behind"
        return finished(work=(Work("CatchingUp", f"The store is {behind} {topic}."),), **fields)
    return finished(ready=f"The store holds every record of {topic}.", **fields)


def _same_revision(run: SinkRun, ran: SinkRun | None) -> SinkRun:
    """A view's output topic holds one revision's rows, of that revision's columns; the Log's
    spec may already describe the next revision, catching up beside: a process that read the
    topic before keeps the columns it had."""
    if ran is not None and ran.topic == run.topic:
        return run.model_copy(update={"columns": ran.columns, "key": ran.key})
    return run


def _local(
    services: OperatorServices, local: LocalRuntime, sink: Sink, run: SinkRun
) -> tuple[bool, Problem | None, str]:
    """The Sink's process on the operator's machine (the local runtime): (running, a problem
    only its user can fix, what it waits for)."""
    app = local.sink(sink.metadata.namespace, sink.metadata.name)
    password = _password_file(services, sink, app.folder)
    run = _same_revision(
        run.model_copy(update={"password_file": password}), _last_run(app.spec_file)
    )
    if app.pid() is None and _last_run(app.spec_file) == run and REFUSED_MARK in app.last_line():
        # It refused its store with this very spec: started again, it would refuse again.
        return False, Problem("StoreRefused", _refusal(app.last_line())), ""
    return local.ensure_sink(run).running, None, ""


def _in_cluster(
    services: OperatorServices, sink: Sink, run: SinkRun, body: Mapping[str, Any]
) -> tuple[bool, Problem | None, str]:
    """The Sink's process as a Deployment of the job image (the spark-operator runtime)."""
    namespace, name = sink.metadata.namespace, sink.metadata.name
    workloads = SinkDeployments(services.kube)
    run = _same_revision(run, workloads.last_run(namespace, name))
    store = sink.spec.postgres or sink.spec.redis
    secret = store.password_secret if store is not None else None
    owner = owner_of_body(body)
    settings = services.settings
    workloads.ensure(
        sink_manifests(
            run,
            namespace=namespace,
            name=name,
            image=settings.image,
            owner=owner,
            password=(secret.name, secret.key) if secret is not None else None,
            kafka=settings.kafka_secrets,
        )
    )
    pod = workloads.state(namespace, name)
    return pod.running, None, pod.waiting


def _refusal(line: str) -> str:
    said = line.split(REFUSED_MARK, 1)[-1] if REFUSED_MARK in line else line
    said = said.rstrip(".")
    return (f"The Sink's process refused its store: {said or 'see its log'}. Fix the table or "
            "the spec; a changed spec starts it again.")  # fmt: skip


def _last_run(spec_file: Path) -> SinkRun | None:
    try:
        return SinkRun.model_validate_json(spec_file.read_text("utf-8"))
    except (OSError, ValueError):
        return None


def _position(
    services: OperatorServices, run: SinkRun
) -> tuple[dict[int, int], int | None, str | None]:
    """The position the Sink mirrored to its group, its lag (None: not known yet), and the
    refusal its process left in the group's commit metadata (None: none)."""
    try:
        committed = services.admin.committed(run.group).get(run.topic, {})
        lag = services.admin.lag(run.group, [run.topic]).get(run.topic, {})
        said = services.admin.committed_metadata(run.group, run.topic)
    except Exception as exc:  # observed again next round
        LOGGER.debug("the position of Sink %s: %s", run.name, exc)
        return {}, None, None
    refused = next(
        (m[len(REFUSED_METADATA) :] for m in said if m.startswith(REFUSED_METADATA)), None
    )
    return dict(committed), (sum(lag.values()) if committed else None), refused


async def reconcile_sink(body: Mapping[str, Any], services: OperatorServices) -> None:
    """One round of a Sink, its status written onto the version `body` was read at."""
    await run_round("Sink", body, services, _round)


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
    await every_interval("Sink", stopped, body, memo.services, _round)


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
