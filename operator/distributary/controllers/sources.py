"""The Source controller: a database's changes as Logs, through the cluster's Kafka Connect.

Each round (on every change, and every `--observe-interval` while the Source lives) reads the
password from the Source's Secret, asks the database for its tables (the same questions
`distributary run` and `validate --database` ask: a table missing, without a primary key or with
a column that cannot be carried exactly; `wal_level`, REPLICATION, the right to make the
publication), applies each table's Log as a child of the Source (compacted, keyed by the primary
key, its schema the table's), keeps the Debezium connector as the spec says (running or paused)
through the Connect backend (`backends.connect`: a plain REST endpoint, or Strimzi's
KafkaConnector), restarts a failed connector with back-off, reads the replication slot (its lag
and the WAL it keeps) and writes status: Ready/Reconciling/Stalled, the connector's state, each
table's Log and topic, the slot, and DataLossRisk when the slot keeps more WAL than
`spec.walWarning`.

The password reaches Connect only as a reference its workers resolve (`--connect-secrets`): the
connector's config, stored in Kafka, never holds it.

Deleting a Source deletes its connector and drops its slot and publication (else the server keeps
WAL for the slot until its disk fills); its Logs go with it as children, and their topics stay
unless a Log says `deletionPolicy: Delete`. A database that cannot be reached holds the deletion
for up to `DELETE_TIMEOUT`, after which the Source goes and a Warning event names the slot to drop
by hand.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf

from distributary.api import parse_body
from distributary.api.common import Condition
from distributary.api.log import Log, log_manifest
from distributary.api.source import Source
from distributary.backends.connect import ConnectError
from distributary.backends.direct import DirectTopics
from distributary.controllers import metrics
from distributary.controllers.events import KubeEvents
from distributary.controllers.indexes import GROUP, VERSION
from distributary.controllers.rounds import every_interval, owner_of_body, round_status, run_round
from distributary.controllers.secrets import SecretMissingError, secret_value
from distributary.controllers.services import OperatorServices
from distributary.databases.postgres import (
    DatabaseError,
    capture_rights,
    connect,
    drop_capture,
    slot_reading,
    table_shapes,
)
from distributary.graph import table_log
from distributary.kafka.admin import KafkaAdminError
from distributary.kube.resources import KubeError
from distributary.plan.children import holds
from distributary.plan.conditions import Observation, Problem
from distributary.plan.source_plan import (
    HEARTBEAT_RETENTION_MS,
    TABLE_PROBLEM,
    ConnectorState,
    SlotReading,
    capture_problems,
    connector_config,
    connector_name,
    heartbeat_topic,
    password_reference,
    resolve_table,
    resolved,
    source_observation,
)
from distributary.plan.source_revisions import capture_position, revision_step
from distributary.plan.topics import DesiredTopic

PLURAL = "sources"
SOURCE_LABEL = "distributary.dev/source"
RESTART_AFTER = (5.0, 15.0, 60.0)  # back-off of a failed connector's restarts
DELETE_TIMEOUT = 300  # seconds a deletion waits for the database before the Source goes
LOGGER = logging.getLogger("distributary.sources")


@dataclass
class _Restarts:
    """A failed connector's restarts: how many in a row, and when the next is due."""

    failures: int = 0
    due: float = 0.0


_RESTARTS: dict[tuple[str, str], _Restarts] = {}


def _table_logs(source: Source, owner: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The manifests of the Source's table Logs, children of the Source."""
    manifests = []
    for table in source.spec.tables:
        log = table_log(source, table)
        manifests.append(
            log_manifest(
                log.metadata.name,
                source.metadata.namespace,
                log.spec,
                labels={
                    "app.kubernetes.io/managed-by": "distributary",
                    SOURCE_LABEL: source.metadata.name,
                },
                ownerReferences=[dict(owner)],
            )
        )
    return manifests


def _apply_logs(
    services: OperatorServices, manifests: list[dict[str, Any]], uid: str
) -> list[Problem]:
    """Apply each table Log unless it holds its manifest already; a Log of that name that is not
    this Source's is left alone and reported."""
    problems = []
    for manifest in manifests:
        meta = manifest["metadata"]
        found = services.kube.get(manifest["apiVersion"], "Log", meta["namespace"], meta["name"])
        if found is not None:
            owners = (found.get("metadata") or {}).get("ownerReferences") or []
            if not any(o.get("uid") == uid for o in owners):
                problems.append(Problem("LogTaken", (
                    f"Log {meta['name']} exists and is not this Source's: rename the table's Log "
                    "(spec.tables[].log) or delete that Log"
                )))  # fmt: skip
                continue
            if holds(found, manifest):
                continue
        services.kube.apply(manifest)
    return problems


def _round(services: OperatorServices, body: Mapping[str, Any]) -> dict[str, Any]:
    """One round of a Source, blocking: act as its spec says and return its status."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    generation = int(meta.get("generation") or 0)
    previous = [
        Condition.model_validate(c) for c in (body.get("status") or {}).get("conditions") or []
    ]
    first = not previous

    def finished(observation: Observation, **fields: Any) -> dict[str, Any]:
        return round_status(observation, previous, **fields)

    parsed = parse_body(body, Source)
    if isinstance(parsed, str):
        return finished(Observation(generation, problems=(Problem("InvalidSpec", parsed),)))
    source = parsed
    connectors = services.connectors
    if connectors is None:
        problem = Problem("NoConnect", (
            "the operator has no Kafka Connect to run the connector on: run it with "
            "--connect-url URL (a Connect REST endpoint) or --connect-cluster NAME (a Strimzi "
            "KafkaConnect); the chart's values connect.url and connect.cluster"
        ))  # fmt: skip
        return finished(source_observation(source, generation, problems=[problem]))
    secret = source.spec.postgres.password_secret
    try:
        password = secret_value(services, namespace, secret, "spec.postgres.passwordSecret")
    except SecretMissingError as exc:
        problem = Problem("SecretMissing", str(exc))
        return finished(source_observation(source, generation, problems=[problem]))
    if source.spec.snapshot.epoch != 0:
        problem = Problem("ResnapshotUnsupported", (
            f"spec.snapshot.epoch: is {source.spec.snapshot.epoch}, but the operator does not "
            "take a new snapshot beside the serving one yet (distributary run does): set it to "
            "0, or delete and re-apply the Source to snapshot its tables again"
        ))  # fmt: skip
        return finished(source_observation(source, generation, problems=[problem]))
    names = [t.name for t in source.spec.tables]
    try:
        with connect(source.spec.postgres, password) as db:
            shapes = table_shapes(db, names)
            rights = capture_rights(db, source.identifier, names)
            reading, seconds = slot_reading(db, source.identifier)
    except DatabaseError as exc:
        return finished(
            source_observation(
                source, generation, first_sight=first, unreachable=f"{exc.field}: {exc}"
            ),
            connector=connector_name(source),
        )
    tables = [
        resolve_table(source, index, table, shapes.get(table.name))
        for index, table in enumerate(source.spec.tables)
    ]
    problems = [Problem(TABLE_PROBLEM, p) for t in tables for p in t.problems]
    problems += [Problem("CaptureRefused", p) for p in capture_problems(source, rights)]
    slot = {
        "name": source.identifier,
        "active": reading.active if reading.exists else None,
        "retainedWalBytes": reading.retained_bytes,
        "lagBytes": reading.lag_bytes,
        "lagSeconds": seconds,
    }
    if problems:
        return finished(
            source_observation(source, generation, problems=problems, slot=reading),
            slot={k: v for k, v in slot.items() if v is not None},
        )
    whole = resolved(source, tables)
    manifests = _table_logs(whole, owner_of_body(body))
    problems = _apply_logs(services, manifests, str(meta.get("uid")))
    logs = {t.name: table_log(whole, t) for t in whole.spec.tables}
    table_status = [
        {"name": table, "log": log.metadata.name, "topic": log.spec.topic_name,
         "columns": log.spec.record_schema, "key": list(log.spec.key or [])}
        for table, log in logs.items()
    ]  # fmt: skip
    fields: dict[str, Any] = {
        "connector": connector_name(source),
        "tables": table_status,
        "slot": {k: v for k, v in slot.items() if v is not None},
        "publication": source.identifier,
    }
    if problems:
        return finished(
            source_observation(source, generation, problems=problems, slot=reading), **fields
        )
    try:
        _heartbeats(services, source)
    except KafkaAdminError as exc:
        return finished(
            source_observation(source, generation, first_sight=first, unreachable=f"Kafka: {exc}"),
            **fields,
        )
    topics = {table: str(log.spec.topic_name) for table, log in logs.items()}
    reference = password_reference(services.settings.connect_secrets, namespace, secret)
    config = connector_config(whole, topics, reference)
    connector = connector_name(source)
    try:
        connectors.apply(connector, config, source.spec.paused, owner_of_body(body), namespace)
        state = connectors.state(connector, namespace)
        if state is not None and state.failed:
            _restart_later(services, source, connector, state)
        elif state is not None and state.running:
            _RESTARTS.pop((namespace, name), None)
    except (ConnectError, KubeError) as exc:
        return finished(
            source_observation(
                source,
                generation,
                first_sight=first,
                unreachable=f"{connectors.where}: {exc}",
                slot=reading,
            ),
            **fields,
        )
    fields["connectorState"] = state.state if state is not None else None
    row = _snapshot_row(services, source, logs, body, reading)
    fields["servingRevision"] = 1
    fields["revisions"] = [row]
    observation = source_observation(
        source,
        generation,
        first_sight=first and state is None,
        connector=state,
        slot=reading,
        interrupted=OPERATOR_INTERRUPTED if row.get("snapshot") == "Interrupted" else None,
    )
    return finished(observation, **fields)


OPERATOR_INTERRUPTED = (
    "the snapshot was interrupted (the connector started again before it was whole) and taken "
    "again from a later point, so changes made in between may be missing from the table Logs: "
    "delete the Source and apply it again to take a clean snapshot (the operator does not take "
    "one beside the serving one yet)"
)
_RESTARTED: set[str] = set()  # connectors restarted by the operator since their last round


def _snapshot_row(
    services: OperatorServices,
    source: Source,
    logs: Mapping[str, Log],
    body: Mapping[str, Any],
    reading: SlotReading,
) -> dict[str, Any]:
    """Revision 1's status row: its connector's position, and whether its snapshot is to be
    trusted (`plan.source_revisions`): a connector restarted before its snapshot was whole, or
    whose snapshot's position is later than its slot's starting point, took it again."""
    assert services.connectors is not None
    connector = connector_name(source)
    recorded = [dict(r) for r in (body.get("status") or {}).get("revisions") or []]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    offsets = services.connectors.offsets(connector, source.metadata.namespace)
    restarted = {1} if connector in _RESTARTED else set()
    _RESTARTED.discard(connector)
    confirmed = reading.confirmed if reading.exists else None
    step = revision_step(  # only revision 1's row is kept: the operator takes no other yet
        source,
        logs,
        [r for r in recorded if r.get("revision") == 1][:1],
        {1: capture_position(offsets)},
        now,
        {1: confirmed},
        restarted,
    )
    return next(r for r in step.rows if r["revision"] == 1)


_HEARTBEATS: set[str] = set()  # heartbeat topics known to exist


def _heartbeats(services: OperatorServices, source: Source) -> None:
    """Make the connector's heartbeat topic (one partition, an hour kept) unless it was made:
    a heartbeat sent to a topic that does not exist holds the connector's Kafka transaction
    open, and readers at read_committed then see none of its changes."""
    topic = heartbeat_topic(source)
    if topic not in _HEARTBEATS:
        retention = {"retention.ms": str(HEARTBEAT_RETENTION_MS)}
        DirectTopics(services.admin).apply(DesiredTopic(topic, 1, None, retention))
        _HEARTBEATS.add(topic)


def _restart_later(
    services: OperatorServices, source: Source, connector: str, state: ConnectorState
) -> None:
    """Restart a failed connector after its back-off (5 s, 15 s, then every minute)."""
    key = (source.metadata.namespace, source.metadata.name)
    restarts = _RESTARTS.setdefault(key, _Restarts())
    now = time.monotonic()
    if restarts.due == 0.0:
        delay = RESTART_AFTER[min(restarts.failures, len(RESTART_AFTER) - 1)]
        restarts.due = now + delay
        LOGGER.warning("Source %s/%s: the connector failed (%s); restarting it in %.0fs",
                       *key, state.reason or "no reason given", delay)  # fmt: skip
    elif now >= restarts.due:
        restarts.failures += 1
        restarts.due = 0.0
        assert services.connectors is not None
        services.connectors.restart(connector, source.metadata.namespace)
        _RESTARTED.add(connector)


async def reconcile_source(body: Mapping[str, Any], services: OperatorServices) -> None:
    """One round of a Source, its status written onto the version `body` was read at."""
    await run_round("Source", body, services, _round)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def reconcile(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Reconcile a Source on every change of its spec."""
    await reconcile_source(body, memo.services)


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)
async def observe(stopped: kopf.DaemonStopped, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Every `--observe-interval` while the Source lives: the connector kept as the spec says
    (restarted when it failed, made again when Connect lost it), the slot read, status
    written."""
    await every_interval("Source", stopped, body, memo.services, _round)


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def delete(
    body: kopf.Body, memo: kopf.Memo, retry: int = 0, runtime: Any = None, **_: Any
) -> None:
    """Delete the connector and drop the slot and publication; the Logs stay as their
    deletionPolicy says."""
    services: OperatorServices = memo.services
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    parsed = parse_body(body, Source)
    if isinstance(parsed, str):
        return  # never made anything it could find again
    source = parsed
    events = KubeEvents(services.kube, body)
    waited = runtime.total_seconds() if runtime is not None else 0.0
    try:
        if services.connectors is not None:
            await asyncio.to_thread(services.connectors.delete, connector_name(source), namespace)
        password = await asyncio.to_thread(
            secret_value, services, namespace, source.spec.postgres.password_secret,
            "spec.postgres.passwordSecret",
        )  # fmt: skip
        dropped = await asyncio.to_thread(_drop, source, password)
    except (SecretMissingError, DatabaseError, ConnectError, KubeError) as exc:
        if waited < DELETE_TIMEOUT and not isinstance(exc, SecretMissingError):
            raise kopf.TemporaryError(
                f"Source {namespace}/{name}: {exc}; trying again", delay=10
            ) from exc
        message = (
            f"the Source is deleted, but its replication slot {source.identifier!r} and "
            f"publication could not be dropped ({exc}): drop them by hand (SELECT "
            f"pg_drop_replication_slot('{source.identifier}'); DROP PUBLICATION "
            f"{source.identifier}), or the server keeps WAL for the slot until its disk fills"
        )
        events.warn("SlotLeft", message)
        LOGGER.warning("Source %s/%s: %s", namespace, name, message)
        return
    _RESTARTS.pop((namespace, name), None)
    metrics.forget(namespace, name)
    what = " and ".join(dropped) if dropped else "nothing left to drop"
    LOGGER.info("Source %s/%s deleted: %s dropped; its Logs stay as their deletionPolicy says",
                namespace, name, what)  # fmt: skip


def _drop(source: Source, password: str) -> list[str]:
    with connect(source.spec.postgres, password) as db:
        return drop_capture(db, source.identifier, source.identifier)
