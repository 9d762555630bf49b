"""The reconcile of a Source: a database's changes as Logs, through Kafka Connect.

Each reconcile reads the password from the Source's Secret, asks the database for its tables (the
same questions `distributary run` and `validate --database` ask: a table missing, without a
primary key or with a column that cannot be carried exactly; `wal_level`, REPLICATION, the right
to make the publication), applies each table's Log as a child of the Source (compacted, keyed by
the primary key, its schema the table's), keeps each live revision's Debezium connector as the
spec says (running or paused) through the services' `Connectors`, restarts a failed connector
after the restart policy's back-off, reads the replication slot (its lag and the WAL it keeps)
and writes status: Ready/Reconciling/Stalled, the connector's state, each table's Log and topic,
the slot, and DataLossRisk when the slot keeps more WAL than `spec.walWarning`.

A raised `spec.snapshot.epoch`, or a snapshot found interrupted, is a new revision beside the
serving one (`plan.sources.source_revisions`): its own connector, slot, publication and topics, made
before its connector starts. The revisions are rows of `status.revisions`, written ahead
(`StatusStore.record_ahead`) before they are acted on, as a view's are: once the new revision has
caught up (the connectors' committed offsets), the rows say it serves and the replaced revision
is `Retiring`; then the table Logs move to its topics through `World.serve` (the port a view's
output Log moves through: views reprocess them, Sinks follow), and only then is the retiring
revision's connector deleted and its slot and publication dropped. A restarted operator finds the
rows and carries on. Where the connectors' offsets cannot be listed (`Connectors.lists_offsets`),
revision 1 serves on, a raised epoch is refused and an interrupted snapshot is only said.

The password reaches Connect only as a reference its workers resolve (`Services.connect_secrets`):
the connector's config, stored in Kafka, never holds it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from distributary.api import parse_body
from distributary.api.common import Condition
from distributary.api.log import Log, log_manifest
from distributary.api.source import Source
from distributary.backends.base import SecretMissingError
from distributary.backends.connect import ConnectError
from distributary.databases.postgres import DatabaseError
from distributary.graph import table_log
from distributary.kafka.admin import KafkaAdminError
from distributary.kube.errors import KubeError
from distributary.plan.applications.spark import owner_reference
from distributary.plan.pipelines.pipeline import SOURCE_LABEL
from distributary.plan.sources.source_plan import (
    TABLE_PROBLEM,
    ConnectorState,
    capture_problems,
    connector_config,
    connector_name,
    password_reference,
    resolve_table,
    resolved,
    source_observation,
)
from distributary.plan.sources.source_revisions import (
    RevisionStep,
    interrupted,
    interrupted_message,
    revision_topics,
    serving_topics,
)
from distributary.plan.status.conditions import Observation, Problem, conditions
from distributary.plan.views.view_plan import SERVING_ANNOTATION
from distributary.reconcile.ports import Events, Services, StatusStore, World
from distributary.reconcile.source_connectors import (
    epoch_refused,
    live,
    make_revision_topics,
    next_step,
    retire,
    run_connector,
    serving_revision,
)

STRIMZI_INTERRUPTED = (
    "the snapshot was interrupted (the connector started again before it was whole) and taken "
    "again from a later point, so changes made in between may be missing from the table Logs; "
    "a KafkaConnector of kafka.strimzi.io/v1beta2 does not list its offsets, so no fresh "
    "snapshot is taken beside it: delete the Source and apply it again to take a clean one"
)
NO_CONNECT = (
    "the operator has no Kafka Connect to run the connector on: run it with --connect-url URL "
    "(a Connect REST endpoint) or --connect-cluster NAME (a Strimzi KafkaConnect); the chart's "
    "values connect.url and connect.cluster"
)


@dataclass
class _Round:
    """What one reconcile found so far, and the status it makes of it."""

    source: Source
    generation: int
    previous: list[Condition]
    fields: dict[str, Any] = field(default_factory=dict)

    def status(self, observation: Observation) -> dict[str, Any]:
        return _status(observation, self.previous, self.fields)

    def unreachable(self, why: str, **found: Any) -> dict[str, Any]:
        first = not self.previous
        return self.status(
            source_observation(
                self.source, self.generation, first_sight=first, unreachable=why, **found
            )
        )

    def stalled(self, *problems: Problem, **found: Any) -> dict[str, Any]:
        return self.status(
            source_observation(self.source, self.generation, problems=problems, **found)
        )


def _status(
    observation: Observation, previous: list[Condition], fields: Mapping[str, Any]
) -> dict[str, Any]:
    """The status of a reconcile: its conditions (transition times kept from `previous`), the
    generation it observed, and the kind's own `fields`."""
    listed = conditions(observation, previous, datetime.now(UTC))
    return {
        "observedGeneration": observation.generation,
        "conditions": [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in listed],
        **fields,
    }


def owner_of(body: Mapping[str, Any]) -> dict[str, Any]:
    """The controlling ownerReference to the Source, for its children."""
    meta = body.get("metadata") or {}
    owner = {"apiVersion": str(body.get("apiVersion")), "kind": str(body.get("kind"))}
    return owner_reference({**owner, "name": str(meta.get("name")), "uid": str(meta.get("uid"))})


def table_logs(source: Source, owner: Mapping[str, Any], serving: int = 1) -> list[dict[str, Any]]:
    """The manifests of the Source's table Logs, children of the Source; after a re-snapshot's
    cutover each names the revision it serves (its topic is then that revision's)."""
    manifests = []
    for table in source.spec.tables:
        log = table_log(source, table)
        annotations = {SERVING_ANNOTATION: str(serving)} if serving > 1 else {}
        labels = {"app.kubernetes.io/managed-by": "distributary"}
        labels[SOURCE_LABEL] = source.metadata.name
        manifest = log_manifest(
            log.metadata.name,
            source.metadata.namespace,
            log.spec,
            labels=labels,
            annotations=annotations,
            ownerReferences=[dict(owner)],
        )
        manifests.append(manifest)
    return manifests


async def reconcile_source(
    body: Mapping[str, Any],
    services: Services,
    store: StatusStore,
    world: World,
    events: Events,
    old: Any = None,
) -> None:
    """Keep a Source's connectors, table Logs and revisions as its spec says; record its status,
    its revisions' rows written ahead of the cutover and retirement they lead to."""
    meta = body.get("metadata") or {}
    generation = int(meta.get("generation") or 0)
    previous = [Condition.model_validate(c) for c in store.status.get("conditions") or []]
    parsed = parse_body(body, Source)
    if isinstance(parsed, str):
        observation = Observation(generation, problems=(Problem("InvalidSpec", parsed),))
        await store.finish(_status(observation, previous, {}))
        return
    found = _Round(parsed, generation, previous)
    status = await _reconcile(body, services, store, world, events, found)
    await store.finish(status)


async def _reconcile(
    body: Mapping[str, Any],
    services: Services,
    store: StatusStore,
    world: World,
    events: Events,
    found: _Round,
) -> dict[str, Any]:
    source = found.source
    connectors = services.connectors
    if connectors is None or services.captures is None or services.secret is None:
        return found.stalled(Problem("NoConnect", NO_CONNECT))
    namespace = source.metadata.namespace
    secret = source.spec.postgres.password_secret
    try:
        password = await asyncio.to_thread(
            services.secret, namespace, secret, "spec.postgres.passwordSecret"
        )
    except SecretMissingError as exc:
        return found.stalled(Problem("SecretMissing", str(exc)))
    recorded = [dict(r) for r in store.status.get("revisions") or []]
    refused = epoch_refused(source, connectors)
    running = live(recorded)
    serving_before = serving_revision(recorded)
    try:
        reading = await asyncio.to_thread(services.captures.read, source, password, running)
    except DatabaseError as exc:
        found.fields["connector"] = connector_name(source, serving_before)
        return found.unreachable(f"{exc.field}: {exc}")
    slot_now, seconds = reading.readings[serving_before]
    tables = [
        resolve_table(source, index, table, reading.shapes.get(table.name))
        for index, table in enumerate(source.spec.tables)
    ]
    problems = [Problem(TABLE_PROBLEM, p) for t in tables for p in t.problems]
    problems += [Problem("CaptureRefused", p) for p in capture_problems(source, reading.rights)]
    slot = {
        "name": source.revision_identifier(serving_before),
        "active": slot_now.active if slot_now.exists else None,
        "retainedWalBytes": slot_now.retained_bytes,
        "lagBytes": slot_now.lag_bytes,
        "lagSeconds": seconds,
    }
    if problems:
        found.fields["slot"] = {k: v for k, v in slot.items() if v is not None}
        return found.stalled(*problems, slot=slot_now)
    whole = resolved(source, tables)
    logs = {t.name: table_log(whole, t) for t in whole.spec.tables}
    try:
        step = await asyncio.to_thread(next_step, services, source, logs, recorded, reading)
    except (ConnectError, KubeError) as exc:
        found.fields["connector"] = connector_name(source, serving_before)
        return found.unreachable(f"{connectors.where}: {exc}")
    serving = step.serving
    manifests = table_logs(whole, owner_of(body), serving)
    uid = str((body.get("metadata") or {}).get("uid"))
    taken = await asyncio.to_thread(world.adopt_logs, manifests, uid)
    topics = serving_topics(step.rows)
    found.fields.update(
        connector=connector_name(source, serving),
        tables=[
            {
                "name": table,
                "log": log.metadata.name,
                "topic": topics.get(table, log.topic),
                "columns": log.spec.record_schema,
                "key": list(log.spec.key or []),
            }
            for table, log in logs.items()
        ],
        slot={k: v for k, v in slot.items() if v is not None},
        publication=source.revision_identifier(serving),
        servingRevision=serving,
        revisions=list(step.rows),
    )
    if taken:
        return found.stalled(*taken, slot=slot_now)
    if list(step.rows) != recorded:  # the rows, written ahead of the cutover and retirement
        await store.record_ahead({"revisions": list(step.rows), "servingRevision": serving})
    try:
        states = await _act(body, services, world, events, found, step, logs, manifests, password)
    except KafkaAdminError as exc:
        return found.unreachable(f"Kafka: {exc}")
    except (ConnectError, KubeError) as exc:
        return found.unreachable(f"{connectors.where}: {exc}", slot=slot_now)
    except DatabaseError as exc:
        return found.unreachable(f"{exc.field}: {exc}")
    state = states.get(serving)
    found.fields["connectorState"] = state.state if state is not None else None
    broken = interrupted(found.fields["revisions"])
    observation = source_observation(
        source,
        found.generation,
        first_sight=not found.previous and state is None,
        connector=state,
        slot=slot_now,
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
    return found.status(observation)


async def _act(
    body: Mapping[str, Any],
    services: Services,
    world: World,
    events: Events,
    found: _Round,
    step: RevisionStep,
    logs: Mapping[str, Log],
    manifests: list[dict[str, Any]],
    password: str,
) -> dict[int, ConnectorState | None]:
    """What the rows recorded say: the table Logs moved to the serving revision's topics, each
    live revision's topics and connector, the retiring revisions retired. The connectors'
    states; the rows after, in `found`."""
    source = found.source
    serving = step.serving
    topics = serving_topics(step.rows)
    if serving > 1:  # every time, as a view's output: the rows may be written, not acted on
        for manifest, (table, log) in zip(manifests, logs.items(), strict=True):  # spec's order
            await world.serve(manifest, topics.get(table, log.topic))
    if step.cut_over:
        events.info("CutOver", f"Revision {serving} caught up: the table Logs serve "
                               f"{', '.join(topics.values())} from now on")  # fmt: skip
    reference = password_reference(
        services.connect_secrets, source.metadata.namespace, source.spec.postgres.password_secret
    )
    states: dict[int, ConnectorState | None] = {}
    for revision in (serving, step.catching_up):
        if revision is not None:
            await asyncio.to_thread(make_revision_topics, services, source, logs, revision)
            config = connector_config(
                source, revision_topics(source, logs, revision), reference, revision
            )
            states[revision] = await asyncio.to_thread(
                run_connector, services, events, source, revision, config, owner_of(body)
            )
    found.fields["revisions"] = list(
        await asyncio.to_thread(retire, services, events, source, password, step)
    )
    return states
