"""A Source's desired state: its tables' Logs and its Debezium connector, from its spec and what the
database says of its tables. Pure: the database is read by `databases.postgres`, Connect is called
by a runtime; here is only what to ask of them.

Each table becomes a compacted Log keyed by its primary key, whose columns are the table's as
Debezium writes them with the settings below (`decimal.handling.mode=string`,
`time.precision.mode=connect`, JSON without schemas): see `spark_type` for the mapping, which
refuses a column type it cannot carry exactly rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distributary.api.log import quantity_bytes
from distributary.api.source import SecretKey, Source, SourceTable
from distributary.graph import DELETED_COLUMN
from distributary.plan.status.conditions import ExtraCondition, Observation, Problem, Work
from distributary.sql import SqlError, parse_ddl

CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
UNWRAP = "io.debezium.transforms.ExtractNewRecordState"
ROUTER = "org.apache.kafka.connect.transforms.RegexRouter"
CAST = "org.apache.kafka.connect.transforms.Cast$Value"
IS_TOMBSTONE = "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone"
HEARTBEAT_MS = 10_000
HEARTBEAT_PREFIX = "distributary-heartbeat"
HEARTBEAT_RETENTION_MS = 3_600_000

# Reasons of a Source's conditions.
TABLE_PROBLEM = "TableProblem"  # a table missing, without a primary key, or with a column refused
DATABASE_UNREACHABLE = "DatabaseUnreachable"
CONNECTOR_FAILED = "ConnectorFailed"
DATA_LOSS_RISK = "DataLossRisk"
SNAPSHOTTING = "Snapshotting"  # a new revision takes its snapshot beside the serving one
SNAPSHOT_INTERRUPTED = "SnapshotInterrupted"  # the snapshot was taken again from a later point
PAUSED = "Paused"

_SCALARS = {
    "smallint": "SMALLINT",
    "integer": "INT",
    "bigint": "BIGINT",
    "real": "FLOAT",
    "double precision": "DOUBLE",
    "boolean": "BOOLEAN",
    "text": "STRING",
    "uuid": "STRING",
    "json": "STRING",
    "jsonb": "STRING",
    "xml": "STRING",
    "citext": "STRING",
    "inet": "STRING",
    "cidr": "STRING",
    "macaddr": "STRING",
    "money": "STRING",
    "numeric": "STRING",  # no precision given: any number of digits, kept exactly as text
    "bytea": "BINARY",  # base64 in JSON, which Spark decodes
    "timestamp with time zone": "TIMESTAMP",  # an ISO-8601 string in UTC
    "timestamp without time zone": "BIGINT",  # milliseconds since the epoch
    "date": "INT",  # days since the epoch
    "time without time zone": "INT",  # milliseconds since midnight
}
_SIZED = re.compile(r"^(character varying|character|bit varying|varchar|char)(\(\d+\))?$")
_NUMERIC = re.compile(r"^numeric\((\d+),(\d+)\)$")
_PRECISION = re.compile(r"^(timestamp|time)\(\d\) (with|without) time zone$")


@dataclass(frozen=True)
class Column:
    """A table column as the database describes it (`format_type` of its type)."""

    name: str
    type: str
    enum: bool = False  # a user-defined enum type: its labels, as strings


@dataclass(frozen=True)
class TableShape:
    """A table's columns, in order, and its primary key."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]


def spark_type(column: Column) -> str | None:
    """The Spark type of a column's values as the connector writes them; None when refused."""
    pg = column.type
    if column.enum:
        return "STRING"
    if pg.endswith("[]"):
        element = spark_type(Column(column.name, pg[:-2]))
        return f"ARRAY<{element}>" if element is not None else None
    precise = _PRECISION.match(pg)
    if precise:
        pg = f"{precise.group(1)} {precise.group(2)} time zone"
    numeric = _NUMERIC.match(pg)
    if numeric:
        precision, scale = int(numeric.group(1)), int(numeric.group(2))
        return f"DECIMAL({precision},{scale})" if precision <= 38 else "STRING"
    if _SIZED.match(pg):
        return "STRING"
    return _SCALARS.get(pg)


def _quoted(name: str) -> str:
    return f"`{name.replace('`', '``')}`"


@dataclass(frozen=True)
class ResolvedTable:
    """A table's Log columns and key as the database has them, or why it cannot be captured."""

    table: str
    columns: str | None
    key: tuple[str, ...]
    problems: tuple[str, ...] = ()


def resolve_table(
    source: Source, index: int, table: SourceTable, shape: TableShape | None
) -> ResolvedTable:
    """What the Log of `table` holds given the table's `shape` in the database (None: there is
    no such table), each problem naming the field and the fix."""
    field = f"spec.tables[{index}]"
    where = f"database {source.spec.postgres.database!r}"
    if shape is None:
        return ResolvedTable(table.name, None, (), (
            f"{field}.name: there is no table {table.name!r} in {where}, or user "
            f"{source.spec.postgres.user!r} may not read it: create it, grant SELECT on it, or "
            "fix the name",
        ))  # fmt: skip
    problems: list[str] = []
    if not shape.primary_key:
        problems.append(
            f"{field}.name: table {table.name!r} has no primary key, so its rows have no key "
            "and a delete or update could not be told apart: add a primary key to the table"
        )
    typed: list[str] = []
    for column in shape.columns:
        kind = spark_type(column)
        if kind is None:
            problems.append(
                f"{field}.name: column {column.name!r} of {table.name!r} is of type "
                f"{column.type!r}, which Distributary cannot carry exactly yet: change the "
                "column's type or capture a view of the table without it"
            )
        else:
            typed.append(f"{_quoted(column.name)} {kind}")
    if table.key is not None and [k.lower() for k in table.key] != [
        k.lower() for k in shape.primary_key
    ]:
        problems.append(
            f"{field}.key: is {list(table.key)} but the primary key of {table.name!r} is "
            f"{list(shape.primary_key)}: the Log is keyed as the connector keys its records, by "
            "the primary key; remove spec.tables[].key or set it to the primary key"
        )
    columns = ", ".join(typed) if typed else None
    if table.record_schema is not None and columns is not None:
        problems.extend(_schema_problems(field, table.record_schema, columns))
    return ResolvedTable(table.name, columns, shape.primary_key, tuple(problems))


def _schema_problems(field: str, declared: str, derived: str) -> list[str]:
    try:
        wanted = {c.name.lower(): c.type for c in parse_ddl(declared)}
        have = {c.name.lower(): c.type for c in parse_ddl(derived)}
    except SqlError as exc:
        return [f"{field}.schema: {exc}: write it as Spark DDL, e.g. 'id INT, name STRING'"]
    wanted.pop(DELETED_COLUMN, None)
    if wanted == have:
        return []
    return [
        f"{field}.schema: is {declared!r} but the table's columns are {derived!r}: remove "
        "spec.tables[].schema to follow the table, or make the two agree"
    ]


def resolved(source: Source, tables: Sequence[ResolvedTable]) -> Source:
    """The Source with each table's schema and key as the database has them (problems aside),
    so its table Logs carry the columns views read."""
    found = {t.table: t for t in tables}
    updated = []
    for table in source.spec.tables:
        got = found.get(table.name)
        if got is None or got.columns is None:
            updated.append(table)
            continue
        updated.append(
            table.model_copy(update={"record_schema": got.columns, "key": list(got.key) or None})
        )
    spec = source.spec.model_copy(update={"tables": updated})
    return source.model_copy(update={"spec": spec})


@dataclass(frozen=True)
class CaptureRights:
    """What the database server and the Source's user allow: logical decoding needs the
    server's `wal_level` at `logical` and a user with REPLICATION (or a superuser)."""

    wal_level: str
    replication: bool
    superuser: bool
    # Debezium makes the Source's publication on its first start, unless it exists: that needs
    # CREATE on the database, and a publication of a table may be made only by its owner.
    publication_exists: bool = True
    may_create: bool = True
    not_owned: tuple[str, ...] = ()


def capture_problems(source: Source, rights: CaptureRights) -> list[str]:
    """Why the connector could not read the server's changes as the Source's user, each problem
    naming the field and the fix (none: it can)."""
    postgres = source.spec.postgres
    problems = []
    if rights.wal_level != "logical":
        problems.append(
            f"spec.postgres: the server at {database_address(source)} has wal_level "
            f"{rights.wal_level!r}, so it keeps no changes to decode: set wal_level = logical "
            "(ALTER SYSTEM SET wal_level = logical, or postgresql.conf) and restart the server"
        )
    if not (rights.replication or rights.superuser):
        problems.append(
            f"spec.postgres.user: user {postgres.user!r} has neither REPLICATION nor superuser, "
            f'so it may not read the server\'s changes: ALTER ROLE "{postgres.user}" '
            "REPLICATION as a superuser, or name a user that has it"
        )
    if not rights.publication_exists and not rights.superuser:
        publication, tables = source.identifier, ", ".join(t.name for t in source.spec.tables)
        make = f"or make it yourself: CREATE PUBLICATION {publication} FOR TABLE {tables}"
        if not rights.may_create:
            problems.append(
                f"spec.postgres.user: user {postgres.user!r} may not create the Source's "
                f"publication {publication} in database {postgres.database!r}: GRANT CREATE ON "
                f'DATABASE "{postgres.database}" TO "{postgres.user}", {make}'
            )
        if rights.not_owned:
            owned = ", ".join(rights.not_owned)
            problems.append(
                f"spec.tables: user {postgres.user!r} does not own {owned}, and only a table's "
                f"owner may publish it: make {postgres.user!r} the owner (ALTER TABLE ... OWNER "
                f"TO), {make}"
            )
    return problems


def database_address(source: Source) -> str:
    """The Source's database as people name it: database@host:port."""
    postgres = source.spec.postgres
    return f"{postgres.database}@{postgres.host}:{postgres.port}"


def connector_name(source: Source, revision: int = 1) -> str:
    """The Connect connector of a revision of a Source's table Logs: unique per namespace, name
    and revision (`.r<N>` from revision 2 on)."""
    suffix = f".r{revision}" if revision > 1 else ""
    return f"distributary.{source.metadata.namespace}.{source.metadata.name}{suffix}"


def topic_prefix(source: Source, revision: int = 1) -> str:
    """Debezium's topic.prefix: the start of the topics it names before they are routed, and of
    its heartbeat topic; one per revision, so two connectors of a Source never share a name."""
    return connector_name(source, revision)


def heartbeat_topic(source: Source, revision: int = 1) -> str:
    """Where the connector's heartbeats go: they let the slot's position advance while the
    captured tables are idle and others are written (else the server keeps their WAL)."""
    return f"{HEARTBEAT_PREFIX}.{topic_prefix(source, revision)}"


def connector_config(
    source: Source, topics: Mapping[str, str], password: str, revision: int = 1
) -> dict[str, str]:
    """The Debezium connector of revision `revision` of the table Logs. `topics` maps each
    table (schema.table) to its topic in that revision; `password` is a reference Connect
    resolves (a config provider's `${dir:...:key}`), never the password itself. Each revision
    has its own slot and publication; one after the first always begins with a snapshot."""
    postgres = source.spec.postgres
    prefix = topic_prefix(source, revision)
    identifier = source.revision_identifier(revision)
    tables = [t.name for t in source.spec.tables]
    initial = revision > 1 or source.spec.snapshot.mode == "Initial"
    config = {
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": postgres.host,
        "database.port": str(postgres.port),
        "database.user": postgres.user,
        "database.password": password,
        "database.dbname": postgres.database,
        "database.sslmode": postgres.ssl_mode,
        "topic.prefix": prefix,
        "slot.name": identifier,
        "publication.name": identifier,
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(re.escape(t) for t in tables),
        "snapshot.mode": "initial" if initial else "no_data",
        "decimal.handling.mode": "string",
        "time.precision.mode": "connect",
        "binary.handling.mode": "base64",
        "heartbeat.interval.ms": str(HEARTBEAT_MS),
        "topic.heartbeat.prefix": HEARTBEAT_PREFIX,
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": "false",
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": "false",
        # Records and the connector's offsets are committed in one Kafka transaction, so a
        # worker that dies loses and repeats nothing (readers at read_committed).
        "exactly.once.support": "required",
        "transaction.boundary": "poll",
        "transforms": ",".join(["unwrap", "deleted", *(f"route{i}" for i in range(len(tables)))]),
        "transforms.unwrap.type": UNWRAP,
        "transforms.unwrap.delete.tombstone.handling.mode": "rewrite-with-tombstone",
        # Debezium writes the marker as the text "true"/"false"; the Log's column is a boolean.
        "transforms.deleted.type": CAST,
        "transforms.deleted.spec": f"{DELETED_COLUMN}:boolean",
        "transforms.deleted.predicate": "tombstone",
        "transforms.deleted.negate": "true",
        "predicates": "tombstone",
        "predicates.tombstone.type": IS_TOMBSTONE,
    }
    for index, table in enumerate(tables):
        schema, name = table.split(".", 1)
        config[f"transforms.route{index}.type"] = ROUTER
        config[f"transforms.route{index}.regex"] = re.escape(f"{prefix}.{schema}.{name}")
        config[f"transforms.route{index}.replacement"] = topics[table]
    return config


@dataclass(frozen=True)
class SlotReading:
    """The replication slot as the database server reports it."""

    exists: bool
    active: bool = False
    retained_bytes: int | None = None  # WAL kept for the slot (from its restart_lsn)
    lag_bytes: int | None = None  # WAL since the position the connector confirmed
    confirmed: int | None = None  # the position the connector confirmed (LSN as a number)


def wal_warning(source: Source, slot: SlotReading) -> str | None:
    """The DataLossRisk message when the slot keeps more WAL than `spec.walWarning`, else
    None: a slot that nobody reads keeps the server's WAL until its disk fills."""
    if not slot.exists or slot.retained_bytes is None:
        return None
    limit = quantity_bytes(source.spec.wal_warning)
    if slot.retained_bytes <= limit:
        return None
    reading = "nobody reads it" if not slot.active else "the connector confirms too slowly"
    return (
        f"replication slot {source.identifier!r} keeps {slot.retained_bytes} bytes of WAL on "
        f"the database server, over spec.walWarning ({source.spec.wal_warning}), and "
        f"{reading}: the server's disk fills until the Source reads again; resume or fix the "
        "Source, or delete it (which drops the slot)"
    )


@dataclass(frozen=True)
class ConnectorState:
    """A connector as Connect reports it: its state, its tasks' states, and the first line of
    the trace of what failed (or why there is no state yet)."""

    state: str
    tasks: tuple[str, ...] = ()
    reason: str = ""

    @property
    def running(self) -> bool:
        """The connector and every task of it run."""
        return (
            self.state == "RUNNING" and bool(self.tasks) and all(t == "RUNNING" for t in self.tasks)
        )

    @property
    def failed(self) -> bool:
        """The connector or a task of it failed."""
        return self.state == "FAILED" or "FAILED" in self.tasks


def password_reference(secrets: str, namespace: str, secret: SecretKey) -> str:
    """What a connector's config says instead of the password, for a cluster's Connect: with
    `secrets` = "kubernetes", Strimzi's KubernetesSecretConfigProvider reads the Secret itself
    (`${secrets:NAMESPACE/NAME:KEY}`); otherwise `secrets` is the folder where the workers
    mount each Secret (`FOLDER/NAME/KEY`), read by Kafka's DirectoryConfigProvider."""
    if secrets == "kubernetes":
        return f"${{secrets:{namespace}/{secret.name}:{secret.key}}}"
    return f"${{dir:{secrets.rstrip('/')}/{secret.name}:{secret.key}}}"


STRIMZI_RESERVED = ("name", "connector.class", "tasks.max")  # KafkaConnector fields instead


def kafka_connector_manifest(
    api_version: str,
    name: str,
    namespace: str,
    cluster: str,
    config: Mapping[str, str],
    paused: bool,
    owner: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The KafkaConnector of Strimzi's KafkaConnect `cluster` that carries `config` (whose
    connector.class and tasks.max become the resource's own fields), running or paused; owned
    by the Source when it is in the Source's namespace; its offsets listed on request into a
    ConfigMap (`offsets_config_map`) where the version has `spec.listOffsets`."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {"strimzi.io/cluster": cluster, "app.kubernetes.io/managed-by": "distributary"},
    }
    if owner is not None:
        metadata["ownerReferences"] = [dict(owner)]
    spec: dict[str, Any] = {
        "class": config["connector.class"],
        "tasksMax": int(config.get("tasks.max", "1")),
        "state": "paused" if paused else "running",
        "config": {k: v for k, v in config.items() if k not in STRIMZI_RESERVED},
    }
    if lists_offsets(api_version):
        spec["listOffsets"] = {"toConfigMap": {"name": offsets_config_map(name)}}
    return {"apiVersion": api_version, "kind": "KafkaConnector", "metadata": metadata, "spec": spec}


OFFSETS_ANNOTATION = "strimzi.io/connector-offsets"  # "list": Strimzi writes them to a ConfigMap
OFFSETS_KEY = "offsets.json"  # ...under this key, as Connect's REST API gives them


def lists_offsets(api_version: str) -> bool:
    """Whether a KafkaConnector of `api_version` lists its offsets into a ConfigMap on request
    (`spec.listOffsets`): `kafka.strimzi.io/v1` does; the older v1beta2 of a Strimzi before
    0.44 does not know the field, so it is not asked for there."""
    return api_version.endswith("/v1")


def offsets_config_map(connector: str) -> str:
    """The ConfigMap Strimzi lists a connector's offsets into."""
    return f"{connector}-offsets"


def source_observation(
    source: Source,
    generation: int,
    *,
    first_sight: bool = False,
    problems: Sequence[Problem] = (),
    unreachable: str | None = None,
    connector: ConnectorState | None = None,
    slot: SlotReading | None = None,
    interrupted: str | None = None,
    snapshotting: str | None = None,
) -> Observation:
    """What a Source's conditions say of it. A problem only its user can fix (a table missing,
    a right not granted, a Secret absent) makes it Stalled; a database or Connect that does not
    answer, a connector being created, starting or failed (restarted with back-off) is work
    under way (Reconciling); paused as the spec asks is Ready with reason Paused (changes wait in
    the slot). A slot keeping more WAL than `spec.walWarning` adds DataLossRisk=True; a snapshot
    found interrupted (`interrupted` says what to do) adds SnapshotInterrupted=True; a new
    revision taking its snapshot beside the serving one (`snapshotting`) is work under way."""
    work: list[Work] = []
    if unreachable:
        work.append(Work(DATABASE_UNREACHABLE, unreachable))
    elif connector is None:
        work.append(Work("Starting", "The connector is being created."))
    elif connector.failed:
        why = connector.reason or "no reason given"
        work.append(Work(CONNECTOR_FAILED, f"The connector failed ({why}); it is restarted "
                                           "with back-off."))  # fmt: skip
    elif not source.spec.paused and not connector.running:
        detail = f" ({connector.reason})" if connector.reason else ""
        work.append(Work("Starting", f"The connector is {connector.state}{detail}."))
    if snapshotting:
        work.append(Work(SNAPSHOTTING, snapshotting))
    extras = []
    warning = wal_warning(source, slot) if slot is not None else None
    if warning is not None:
        extras.append(ExtraCondition(DATA_LOSS_RISK, "True", DATA_LOSS_RISK, warning))
    if interrupted is not None:
        extras.append(
            ExtraCondition(SNAPSHOT_INTERRUPTED, "True", SNAPSHOT_INTERRUPTED, interrupted)
        )
    if source.spec.paused:
        ready = (PAUSED, "Paused by spec.paused; changes wait in the replication slot.")
    else:
        tables = ", ".join(t.name for t in source.spec.tables)
        ready = ("Capturing", f"The connector reads the replication slot of {tables}.")
    return Observation(
        generation,
        first_sight=first_sight,
        problems=tuple(problems),
        work=tuple(work),
        extras=tuple(extras),
        ready_reason=ready[0],
        ready_message=ready[1],
    )
