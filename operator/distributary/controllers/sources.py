"""The Source controller: a database's changes as Logs, through the cluster's Kafka Connect.

Each round (on every change, and at every round of the observer loop, `observer.py`) reads the
password from the Source's Secret, asks the database for its tables (the same questions
`distributary run` and `validate --database` ask: a table missing, without a primary key or with a
column that cannot be carried exactly; `wal_level`, REPLICATION, the right to make the
publication), applies each table's Log as a child of the Source (compacted, keyed by the primary
key, its schema the table's), keeps the Debezium connector as the spec says (running or paused)
through the Connect backend (`backends.connect`: a plain REST endpoint, or Strimzi's
KafkaConnector), restarts a failed connector after the restart policy's back-off, reads the
replication slot (its lag and the WAL it keeps) and writes status: Ready/Reconciling/Stalled, the
connector's state, each table's Log and topic, the slot, and DataLossRisk when the slot keeps more
WAL than `spec.walWarning`.

A raised `spec.snapshot.epoch`, or a snapshot found interrupted, is a new revision beside the
serving one (`plan.source_revisions`, as under `distributary run`): its own connector, slot,
publication and topics, made here before its connector starts. The revisions are rows of
`status.revisions`, the write-ahead record: once the new revision has caught up (the connectors'
committed offsets, read from Connect's REST API), the table Logs are annotated with it and their
`status.topicName` moves to its topics (views reprocess them, Sinks follow), and the replaced
revision is recorded `Retiring`; the next round deletes its connector and drops its slot and
publication. A Strimzi KafkaConnector of `kafka.strimzi.io/v1` lists its offsets into a
ConfigMap on request (`backends.connect.StrimziConnectors.offsets`); an older v1beta2 one cannot:
there revision 1 serves on, a raised epoch is refused and an interrupted snapshot is only said.

The password reaches Connect only as a reference its workers resolve (`--connect-secrets`): the
connector's config, stored in Kafka, never holds it.

Deleting a Source deletes the connector and drops the slot and publication of every revision not
retired (else the server keeps WAL for the slot until its disk fills); its Logs go with it as
children, and their topics stay unless a Log says `deletionPolicy: Delete`. A database that
cannot be reached holds the deletion for up to `DELETE_TIMEOUT`, after which the Source goes and a
Warning event names the slots to drop by hand.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
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
from distributary.controllers.rounds import owner_of_body, round_status, run_round
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
from distributary.plan.pipeline import SOURCE_LABEL, revision_topic
from distributary.plan.restarts import PartRestarts
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
from distributary.plan.source_revisions import (
    CATCHING_UP,
    RETIRED,
    RETIRING,
    SERVING,
    CapturePosition,
    RevisionStep,
    capture_position,
    interrupted,
    interrupted_message,
    revision_step,
    revision_topics,
    serving_topics,
)
from distributary.plan.source_revisions import retired as retired_rows
from distributary.plan.topics import DesiredTopic, desired_topic
from distributary.plan.view_plan import SERVING_ANNOTATION

PLURAL = "sources"
DELETE_TIMEOUT = 300  # seconds a deletion waits for the database before the Source goes
LOGGER = logging.getLogger("distributary.sources")


def _table_logs(source: Source, owner: Mapping[str, Any], serving: int = 1) -> list[dict[str, Any]]:
    """The manifests of the Source's table Logs, children of the Source; after a re-snapshot's
    cutover each names the revision it serves (its topic is then that revision's)."""
    manifests = []
    for table in source.spec.tables:
        log = table_log(source, table)
        annotations = {SERVING_ANNOTATION: str(serving)} if serving > 1 else {}
        manifests.append(
            log_manifest(
                log.metadata.name,
                source.metadata.namespace,
                log.spec,
                labels={
                    "app.kubernetes.io/managed-by": "distributary",
                    SOURCE_LABEL: source.metadata.name,
                },
                annotations=annotations,
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
    namespace = str(meta.get("namespace"))
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
    recorded = [dict(r) for r in (body.get("status") or {}).get("revisions") or []]
    refused: list[Problem] = []  # kept to the end: the connector is kept as before meanwhile
    if source.spec.snapshot.epoch != 0 and not connectors.lists_offsets:
        refused.append(Problem("ResnapshotUnsupported", (
            f"spec.snapshot.epoch: is {source.spec.snapshot.epoch}, but {connectors.where} does "
            "not list the connectors' offsets (a KafkaConnector of kafka.strimzi.io/v1 does), "
            "so a new snapshot taken beside the serving one could never be known to have caught "
            "up: set it back, upgrade Strimzi, or delete and re-apply the Source to snapshot "
            "its tables again"
        )))  # fmt: skip
    live = _live(recorded)
    serving_before = _serving(recorded)
    names = [t.name for t in source.spec.tables]
    try:
        with connect(source.spec.postgres, password) as db:
            shapes = table_shapes(db, names)
            rights = capture_rights(db, source.identifier, names)
            readings = {r: slot_reading(db, source.revision_identifier(r)) for r in live}
    except DatabaseError as exc:
        return finished(
            source_observation(
                source, generation, first_sight=first, unreachable=f"{exc.field}: {exc}"
            ),
            connector=connector_name(source, serving_before),
        )
    reading, seconds = readings[serving_before]
    tables = [
        resolve_table(source, index, table, shapes.get(table.name))
        for index, table in enumerate(source.spec.tables)
    ]
    problems = [Problem(TABLE_PROBLEM, p) for t in tables for p in t.problems]
    problems += [Problem("CaptureRefused", p) for p in capture_problems(source, rights)]
    slot = {
        "name": source.revision_identifier(serving_before),
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
    logs = {t.name: table_log(whole, t) for t in whole.spec.tables}
    try:
        step = _step(services, source, logs, recorded, readings)
    except (ConnectError, KubeError) as exc:
        return finished(
            source_observation(
                source, generation, first_sight=first, unreachable=f"{connectors.where}: {exc}"
            ),
            connector=connector_name(source, serving_before),
        )
    serving = step.serving
    manifests = _table_logs(whole, owner_of_body(body), serving)
    problems = _apply_logs(services, manifests, str(meta.get("uid")))
    topics = serving_topics(step.rows)
    table_status = [
        {"name": table, "log": log.metadata.name, "topic": topics.get(table, log.topic),
         "columns": log.spec.record_schema, "key": list(log.spec.key or [])}
        for table, log in logs.items()
    ]  # fmt: skip
    fields: dict[str, Any] = {
        "connector": connector_name(source, serving),
        "tables": table_status,
        "slot": {k: v for k, v in slot.items() if v is not None},
        "publication": source.revision_identifier(serving),
        "servingRevision": serving,
        "revisions": list(step.rows),
    }
    if problems:
        return finished(
            source_observation(source, generation, problems=problems, slot=reading), **fields
        )
    reference = password_reference(services.settings.connect_secrets, namespace, secret)
    states: dict[int, ConnectorState | None] = {}
    try:
        if step.cut_over:
            _serve(services, logs, topics, serving)
        for revision in (serving, step.catching_up):
            if revision is not None:
                _topics(services, source, logs, revision)
                config = connector_config(
                    whole, revision_topics(whole, logs, revision), reference, revision
                )
                states[revision] = _run_connector(services, source, revision, config, body)
        rows = _retire(services, source, password, step, recorded)
    except KafkaAdminError as exc:
        return finished(
            source_observation(source, generation, first_sight=first, unreachable=f"Kafka: {exc}"),
            **fields,
        )
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
    except DatabaseError as exc:
        return finished(
            source_observation(
                source, generation, first_sight=first, unreachable=f"{exc.field}: {exc}"
            ),
            **fields,
        )
    fields["revisions"] = list(rows)
    state = states.get(serving)
    fields["connectorState"] = state.state if state is not None else None
    broken = interrupted(rows)
    observation = source_observation(
        source,
        generation,
        first_sight=first and state is None,
        connector=state,
        slot=reading,
        problems=[*refused, *([Problem("EpochRefused", step.problem)] if step.problem else [])],
        interrupted=(
            None
            if broken is None
            else interrupted_message(broken)
            if connectors.lists_offsets
            else STRIMZI_INTERRUPTED
        ),
        snapshotting=(
            f"Revision {step.catching_up} takes a new snapshot beside revision {serving}, "
            "which serves; it serves once it has caught up."
            if step.catching_up is not None
            else None
        ),
    )
    return finished(observation, **fields)


STRIMZI_INTERRUPTED = (
    "the snapshot was interrupted (the connector started again before it was whole) and taken "
    "again from a later point, so changes made in between may be missing from the table Logs; "
    "a KafkaConnector of kafka.strimzi.io/v1beta2 does not list its offsets, so no fresh "
    "snapshot is taken beside it: delete the Source and apply it again to take a clean one"
)


def _live(recorded: list[dict[str, Any]]) -> list[int]:
    """The revisions whose connectors run, as status recorded them (revision 1 at first)."""
    found = [int(r["revision"]) for r in recorded if r.get("phase") in (SERVING, CATCHING_UP)]
    return sorted(found) or [1]


def _serving(recorded: list[dict[str, Any]]) -> int:
    return next((int(r["revision"]) for r in recorded if r.get("phase") == SERVING), 1)


def _step(
    services: OperatorServices,
    source: Source,
    logs: Mapping[str, Log],
    recorded: list[dict[str, Any]],
    readings: Mapping[int, tuple[SlotReading, float | None]],
) -> RevisionStep:
    """The revisions' next step (`plan.source_revisions`) from each live connector's committed
    offsets and its slot: a new revision beside the serving one when the epoch was raised or a
    snapshot was interrupted, a cutover once it has caught up, a revision to retire."""
    assert services.connectors is not None
    namespace = source.metadata.namespace
    positions: dict[int, CapturePosition | None] = {}
    slots: dict[int, int | None] = {}
    restarted = set()
    for revision, (reading, _) in readings.items():
        connector = connector_name(source, revision)
        positions[revision] = capture_position(services.connectors.offsets(connector, namespace))
        slots[revision] = reading.confirmed if reading.exists else None
        if connector in services.memory.restarted:
            restarted.add(revision)
            services.memory.restarted.discard(connector)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    step = revision_step(source, logs, recorded, positions, now, slots, restarted)
    if services.connectors.lists_offsets:
        return step
    # Without offsets no revision could be known to have caught up: revision 1 serves on, and
    # an interrupted snapshot is only said (`STRIMZI_INTERRUPTED`).
    first = tuple(r for r in step.rows if r["revision"] == 1)
    return RevisionStep(first, 1, None, (), False, step.problem)


def _serve(
    services: OperatorServices, logs: Mapping[str, Log], topics: Mapping[str, str], revision: int
) -> None:
    """Point each table Log's readers at the revision's topic (`status.topicName`: views
    reprocess it, Sinks fill beside and switch); its manifest, applied before, names the
    revision, so that topic is the Log's from now on."""
    for table, log in logs.items():
        namespace, name = log.metadata.namespace, log.metadata.name
        services.kube.patch_status(
            f"{GROUP}/{VERSION}", "Log", namespace, name, {"topicName": topics[table]}
        )
        LOGGER.info("Log %s/%s serves %s: revision %d of its Source caught up",
                    namespace, name, topics[table], revision)  # fmt: skip


def _run_connector(
    services: OperatorServices,
    source: Source,
    revision: int,
    config: Mapping[str, str],
    body: Mapping[str, Any],
) -> ConnectorState | None:
    """Keep a revision's connector as the spec says (running or paused), a failed one restarted
    with back-off; its state."""
    connectors = services.connectors
    assert connectors is not None
    namespace = source.metadata.namespace
    connector = connector_name(source, revision)
    connectors.apply(connector, config, source.spec.paused, owner_of_body(body), namespace)
    state = connectors.state(connector, namespace)
    if state is not None and state.failed:
        _restart_later(services, source, connector, state)
    elif state is not None and state.running:
        services.memory.restarts.pop(f"{namespace}/{connector}", None)
    return state


def _retire(
    services: OperatorServices,
    source: Source,
    password: str,
    step: RevisionStep,
    recorded: list[dict[str, Any]],
) -> tuple[dict[str, Any], ...]:
    """Retire the revisions the status already recorded as Retiring (the write-ahead record:
    one the step marks now is retired in the next round, after the status says so): the
    connector deleted, the slot and publication dropped; their topics stay. The rows after."""
    assert services.connectors is not None
    namespace = source.metadata.namespace
    marked = {int(r["revision"]) for r in recorded if r.get("phase") == RETIRING}
    rows = step.rows
    for revision in step.retire:
        if revision not in marked:
            continue
        connector = connector_name(source, revision)
        services.connectors.delete(connector, namespace)
        services.memory.restarts.pop(f"{namespace}/{connector}", None)
        identifier = source.revision_identifier(revision)
        with connect(source.spec.postgres, password) as db:
            dropped = drop_capture(db, identifier, identifier)
        rows = retired_rows(rows, revision)
        what = " and ".join(dropped) if dropped else "nothing left to drop"
        LOGGER.info("Source %s/%s: revision %d retired: its connector deleted, %s dropped; its "
                    "topics stay", namespace, source.metadata.name, revision, what)  # fmt: skip
    return rows


def _topics(
    services: OperatorServices, source: Source, logs: Mapping[str, Log], revision: int
) -> None:
    """Make a revision's heartbeat topic (one partition, an hour kept) and, for a revision
    after the first, its table topics as its Logs' own (compacted, keyed, as many partitions),
    unless they were made: a heartbeat sent to a topic that does not exist holds the
    connector's Kafka transaction open, and readers at read_committed then see none of its
    changes. Revision 1 writes the topics its Logs make."""
    heartbeat = heartbeat_topic(source, revision)
    if heartbeat in services.memory.made:
        return
    retention = {"retention.ms": str(HEARTBEAT_RETENTION_MS)}
    wanted = [DesiredTopic(heartbeat, 1, None, retention)]
    if revision > 1:
        wanted += [desired_topic(log, topic=revision_topic(log, revision)) for log in logs.values()]
    topics = DirectTopics(services.admin)
    for topic in wanted:
        topics.apply(topic)
    services.memory.made.add(heartbeat)


def _restart_later(
    services: OperatorServices, source: Source, connector: str, state: ConnectorState
) -> None:
    """Restart a failed connector after the restart policy's back-off (`--restart-delay`)."""
    key = f"{source.metadata.namespace}/{connector}"
    restarts = services.memory.restarts.setdefault(key, PartRestarts())
    delay, now = restarts.failed(time.monotonic(), services.restart_policy)
    if delay is not None:
        LOGGER.warning("Source %s: the connector failed (%s); restarting it in %.0fs",
                       key, state.reason or "no reason given", delay)  # fmt: skip
    elif now:
        assert services.connectors is not None
        services.connectors.restart(connector, source.metadata.namespace)
        services.memory.restarted.add(connector)


async def reconcile_source(body: Mapping[str, Any], services: OperatorServices) -> None:
    """One round of a Source, its status written onto the version `body` was read at."""
    await run_round("Source", body, services, _round)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def reconcile(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Reconcile a Source on every change of its spec."""
    await reconcile_source(body, memo.services)


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def delete(
    body: kopf.Body, memo: kopf.Memo, retry: int = 0, runtime: Any = None, **_: Any
) -> None:
    """Delete the connectors and drop the slots and publications of every revision not yet
    retired; the Logs stay as their deletionPolicy says."""
    services: OperatorServices = memo.services
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    parsed = parse_body(body, Source)
    if isinstance(parsed, str):
        return  # never made anything it could find again
    source = parsed
    events = KubeEvents(services.kube, body)
    waited = runtime.total_seconds() if runtime is not None else 0.0
    recorded = [dict(r) for r in (body.get("status") or {}).get("revisions") or []]
    revisions = sorted({1, *(int(r["revision"]) for r in recorded if r.get("phase") != RETIRED)})
    try:
        if services.connectors is not None:
            for revision in revisions:
                await asyncio.to_thread(
                    services.connectors.delete, connector_name(source, revision), namespace
                )
        password = await asyncio.to_thread(
            secret_value, services, namespace, source.spec.postgres.password_secret,
            "spec.postgres.passwordSecret",
        )  # fmt: skip
        dropped = await asyncio.to_thread(_drop, source, password, revisions)
    except (SecretMissingError, DatabaseError, ConnectError, KubeError) as exc:
        if waited < DELETE_TIMEOUT and not isinstance(exc, SecretMissingError):
            raise kopf.TemporaryError(
                f"Source {namespace}/{name}: {exc}; trying again", delay=10
            ) from exc
        slots = [source.revision_identifier(r) for r in revisions]
        by_hand = "; ".join(
            f"SELECT pg_drop_replication_slot('{slot}'); DROP PUBLICATION {slot}" for slot in slots
        )
        message = (
            f"the Source is deleted, but its replication slot(s) {', '.join(slots)} and "
            f"publication(s) could not be dropped ({exc}): drop them by hand ({by_hand}), or "
            "the server keeps WAL for the slot until its disk fills"
        )
        events.warn("SlotLeft", message)
        LOGGER.warning("Source %s/%s: %s", namespace, name, message)
        return
    for revision in revisions:
        services.memory.restarts.pop(f"{namespace}/{connector_name(source, revision)}", None)
    metrics.forget(namespace, name)
    what = " and ".join(dropped) if dropped else "nothing left to drop"
    LOGGER.info("Source %s/%s deleted: %s dropped; its Logs stay as their deletionPolicy says",
                namespace, name, what)  # fmt: skip


def _drop(source: Source, password: str, revisions: list[int]) -> list[str]:
    dropped = []
    with connect(source.spec.postgres, password) as db:
        for revision in revisions:
            identifier = source.revision_identifier(revision)
            dropped += drop_capture(db, identifier, identifier)
    return dropped
