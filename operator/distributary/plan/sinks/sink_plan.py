"""A Sink's table and statements, from its Log's schema: what to create, what to add when the Log
gains columns, what to refuse, and the SQL of a batch. Pure: `sinks.postgres` runs it.

The records of a batch and the offsets they end at are written in one transaction, with the
offsets in the table `distributary_sink_offsets` of the target's schema: the rows and the
position can never disagree, so a replay skips what was applied and a crash loses nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from distributary.api.common import duration_ms
from distributary.api.names import label_value
from distributary.api.sink import Sink
from distributary.plan.access.kafka_connection import PASSWORD_VARIABLE, KafkaSecurity
from distributary.plan.access.kafka_secrets import (
    KAFKA_CA_MOUNT,
    KAFKA_CLIENT_MOUNT,
    KafkaSecretMounts,
    for_pods,
)
from distributary.sql import parse_ddl

OFFSETS_TABLE = "distributary_sink_offsets"
# The start of the metadata of a Sink's group's commit when its process refused its store: the
# refusal reaches the operator through Kafka, wherever the process runs.
REFUSED_METADATA = "refused: "
DELETED_COLUMN = "__deleted"

_SCALARS = {
    "TINYINT": "smallint",
    "SMALLINT": "smallint",
    "INT": "integer",
    "INTEGER": "integer",
    "BIGINT": "bigint",
    "LONG": "bigint",
    "FLOAT": "real",
    "REAL": "real",
    "DOUBLE": "double precision",
    "BOOLEAN": "boolean",
    "STRING": "text",
    "BINARY": "bytea",
    "DATE": "date",
    "TIMESTAMP": "timestamp with time zone",
    "TIMESTAMP_NTZ": "timestamp without time zone",
}
_DECIMAL = re.compile(r"^DECIMAL\((\d+),\s*(\d+)\)$")


def pg_type(spark: str) -> str:
    """The PostgreSQL type of a column of the Spark type `spark`: nested types as jsonb."""
    text = spark.upper().strip()
    decimal = _DECIMAL.match(text)
    if decimal:
        return f"numeric({decimal.group(1)},{decimal.group(2)})"
    if text.startswith(("ARRAY", "STRUCT", "MAP")):
        return "jsonb"
    if text.startswith("VARCHAR") or text.startswith("CHAR"):
        return "text"
    return _SCALARS.get(text, "text")


def quoted(name: str) -> str:
    """A PostgreSQL identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


def table_name(table: str) -> str:
    """`schema.table`, quoted."""
    schema, name = table.split(".", 1)
    return f"{quoted(schema)}.{quoted(name)}"


class SinkRun(BaseModel):
    """What a Sink's process needs: the topic, the table and how to reach both. Holds no
    secret: the password is read from `password_file`, the Kafka password from the environment
    or its own file, as for every Distributary client."""

    name: str = Field(description="namespace/name of the Sink.")
    group: str = Field(description="The consumer group its position is mirrored to.")
    bootstrap_servers: str
    kafka_security: KafkaSecurity | None = None
    topic: str
    columns: list[tuple[str, str]] = Field(description="The Log's columns: (name, Spark type).")
    key: list[str] = Field(default_factory=list)
    mode: str = "upsert"
    store: str = "postgres"  # or redis
    table: str = ""
    host: str
    port: int
    database: str = ""
    user: str = ""
    ssl_mode: str = "prefer"
    password_file: str | None = None
    redis_database: int = 0
    key_prefix: str = ""
    ttl_seconds: int | None = None


def sink_group(namespace: str, name: str) -> str:
    """The consumer group a Sink mirrors its position to, for Kafka's own tools."""
    return f"distributary.{namespace}.{name}.sink"


def sink_run(
    sink: Sink,
    columns: str,
    key: Sequence[str],
    topic: str,
    bootstrap_servers: str,
    password_file: str | None,
    kafka_security: KafkaSecurity | None = None,
) -> SinkRun:
    """The process spec of `sink` reading `topic`, whose records have `columns` (Spark DDL) and
    are keyed by `key`. Raises SqlError when the columns do not parse."""
    target, cache = sink.spec.postgres, sink.spec.redis
    parsed = [c for c in parse_ddl(columns) if c.name.lower() != DELETED_COLUMN]
    namespace, name = sink.metadata.namespace, sink.metadata.name
    if target is None:
        assert cache is not None
        return SinkRun(
            name=f"{namespace}/{name}",
            group=sink_group(namespace, name),
            bootstrap_servers=bootstrap_servers,
            kafka_security=kafka_security,
            topic=topic,
            columns=[(c.name, c.type) for c in parsed],
            key=list(key),
            store="redis",
            host=cache.host,
            port=cache.port,
            redis_database=cache.database,
            password_file=password_file,
            key_prefix=cache.key_prefix,
            ttl_seconds=duration_ms(cache.ttl) // 1000 if cache.ttl else None,
        )
    return SinkRun(
        name=f"{namespace}/{name}",
        group=sink_group(namespace, name),
        bootstrap_servers=bootstrap_servers,
        kafka_security=kafka_security,
        topic=topic,
        columns=[(c.name, c.type) for c in parsed],
        key=list(target.key or key) if target.mode == "upsert" else [],
        mode=target.mode,
        table=target.table,
        host=target.host,
        port=target.port,
        database=target.database,
        user=target.user,
        ssl_mode=target.ssl_mode,
        password_file=password_file,
    )


def create_table(run: SinkRun) -> str:
    """The table as the Log's columns make it, keyed as the Log is in upsert mode."""
    columns = [f"{quoted(n)} {pg_type(t)}" for n, t in run.columns]
    if run.mode == "upsert" and run.key:
        columns.append(f"PRIMARY KEY ({', '.join(quoted(k) for k in run.key)})")
    return f"CREATE TABLE IF NOT EXISTS {table_name(run.table)} ({', '.join(columns)})"


def create_offsets(run: SinkRun) -> str:
    """The table of every Sink's position in the target's schema."""
    schema = run.table.split(".", 1)[0]
    return (
        f"CREATE TABLE IF NOT EXISTS {quoted(schema)}.{OFFSETS_TABLE} (sink text NOT NULL, "
        "topic text NOT NULL, partition integer NOT NULL, next_offset bigint NOT NULL, "
        "PRIMARY KEY (sink, topic, partition))"
    )


@dataclass(frozen=True)
class Migration:
    """What to do to a table that exists: columns to add, or why it cannot be used."""

    add: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


def migration(run: SinkRun, existing: Mapping[str, str], primary_key: Sequence[str]) -> Migration:
    """Columns the Log has and the table lacks are added; a column whose type differs, a key
    that is not the Log's, or a column the table requires that the Log lacks is refused (the
    Sink stops rather than write rows wrongly)."""
    problems: list[str] = []
    add: list[str] = []
    have = {n.lower(): t for n, t in existing.items()}
    for name, spark in run.columns:
        wanted = pg_type(spark)
        found = have.get(name.lower())
        if found is None:
            add.append(f"ALTER TABLE {table_name(run.table)} ADD COLUMN {quoted(name)} {wanted}")
        elif found != wanted:
            problems.append(
                f"column {name!r} of {run.table} is {found}, but the Log's {spark} needs "
                f"{wanted}: alter the column, or write to a new table"
            )
    if run.mode == "upsert" and [k.lower() for k in primary_key] != [k.lower() for k in run.key]:
        problems.append(
            f"{run.table}'s primary key is {list(primary_key)}, but the Log is keyed by "
            f"{run.key}: give the table that primary key, or write to a new table"
        )
    return Migration(tuple(add), tuple(problems))


def upsert(run: SinkRun) -> str:
    """One row's INSERT, replacing the row of its key in upsert mode."""
    names = [n for n, _ in run.columns]
    values = ", ".join(f"%s::{pg_type(t)}" for _, t in run.columns)
    insert = (
        f"INSERT INTO {table_name(run.table)} ({', '.join(quoted(n) for n in names)}) "
        f"VALUES ({values})"
    )
    if run.mode != "upsert" or not run.key:
        return insert
    keys = {k.lower() for k in run.key}
    others = [n for n in names if n.lower() not in keys]
    conflict = ", ".join(quoted(k) for k in run.key)
    if not others:
        return f"{insert} ON CONFLICT ({conflict}) DO NOTHING"
    updates = ", ".join(f"{quoted(n)} = EXCLUDED.{quoted(n)}" for n in others)
    return f"{insert} ON CONFLICT ({conflict}) DO UPDATE SET {updates}"


def delete(run: SinkRun) -> str:
    """The DELETE of a key's row (a tombstone, or a record marked `__deleted`)."""
    types = {n.lower(): t for n, t in run.columns}
    where = " AND ".join(
        f"{quoted(k)} = %s::{pg_type(types.get(k.lower(), 'STRING'))}" for k in run.key
    )
    return f"DELETE FROM {table_name(run.table)} WHERE {where}"


def revision_label(topic: str) -> str:
    """A short name for the revision a topic holds: `r2` for a view's `<log>.r2`, else a digest
    of the topic (a Log whose topic was renamed)."""
    found = re.search(r"\.r(\d+)$", topic)
    if found:
        return f"r{found.group(1)}"
    return "t" + hashlib.sha256(topic.encode()).hexdigest()[:8]


def beside_table(table: str, topic: str) -> str:
    """`schema.table__<revision>`: where a Sink fills the table of a new revision of its Log
    (`topic`) beside the one readers read, until it switches them; also the name the previous
    revision's table keeps afterwards. At most 63 characters, as PostgreSQL names are."""
    schema, name = table.split(".", 1)
    suffix = f"__{revision_label(topic)}"
    return f"{schema}.{name[: 63 - len(suffix)]}{suffix}"


def switch_statements(run: SinkRun, beside: str, retired: str | None) -> list[str]:
    """The statements of one transaction that switch readers of `run.table` to the table filled
    beside it: the table readers read keeps its rows under `retired` (when it exists), the
    filled one takes its name."""
    name = run.table.split(".", 1)[1]
    statements = []
    if retired is not None:
        statements.append(
            f"ALTER TABLE {table_name(run.table)} RENAME TO {quoted(retired.split('.', 1)[1])}"
        )
    statements.append(f"ALTER TABLE {table_name(beside)} RENAME TO {quoted(name)}")
    return statements


SINK_LABEL = "distributary.dev/sink"
SPEC_MOUNT = "/etc/distributary/sink"
STORE_SECRET_MOUNT = "/etc/distributary/store"
IMAGE_PYTHON = "/opt/distributary/venv/bin/python"  # the job image's (spark_images/Dockerfile)
SPEC_HASH_ANNOTATION = "distributary.dev/spec-hash"


def sink_workload_name(name: str) -> str:
    """The Deployment and ConfigMap of Sink `name` (at most 63 characters, as a label allows)."""
    text = f"distributary-sink-{name}"
    if len(text) <= 63:
        return text
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{text[:54]}-{digest}"


def sink_manifests(
    run: SinkRun,
    *,
    namespace: str,
    name: str,
    image: str,
    owner: Mapping[str, Any],
    password: tuple[str, str] | None,
    kafka: KafkaSecretMounts | None = None,
) -> list[dict[str, Any]]:
    """A Sink's process in a cluster: a ConfigMap holding its spec and a Deployment of one
    replica (strategy Recreate: one writer at a time; the store's lock keeps it so anyway)
    running `python -m distributary.sinks` from the job image, the store's password mounted
    from its Secret (`password`: name and key) and Kafka's credentials as the operator's own
    (`kafka`). The pod holds no token of the API server and runs unprivileged; when the process
    fails, the end of its output is the container's termination message. Both are children of
    the Sink."""
    workload = sink_workload_name(name)
    secret_file = f"{STORE_SECRET_MOUNT}/{password[1]}" if password else None
    security = run.kafka_security
    if security is not None and kafka is not None:
        security = for_pods(security, kafka)
    pod_run = run.model_copy(update={"password_file": secret_file, "kafka_security": security})
    spec_json = pod_run.model_dump_json(indent=1)
    labels = {"app.kubernetes.io/managed-by": "distributary", SINK_LABEL: label_value(name)}
    metadata = {"name": workload, "namespace": namespace, "labels": labels,
                "ownerReferences": [dict(owner)]}  # fmt: skip
    volumes: list[dict[str, Any]] = [{"name": "spec", "configMap": {"name": workload}}]
    mounts: list[dict[str, Any]] = [{"name": "spec", "mountPath": SPEC_MOUNT, "readOnly": True}]
    env: list[dict[str, Any]] = []
    if password is not None:
        volumes.append({"name": "store", "secret": {"secretName": password[0],
                        "items": [{"key": password[1], "path": password[1]}]}})  # fmt: skip
        mounts.append({"name": "store", "mountPath": STORE_SECRET_MOUNT, "readOnly": True})
    if kafka is not None:
        kafka_volumes = (
            ("kafka-ca", kafka.ca_secret, KAFKA_CA_MOUNT),
            ("kafka-client", kafka.client_secret, KAFKA_CLIENT_MOUNT),
        )
        for volume, secret, path in kafka_volumes:
            if secret:
                volumes.append({"name": volume, "secret": {"secretName": secret}})
                mounts.append({"name": volume, "mountPath": path, "readOnly": True})
        if kafka.password_secret:
            env.append({"name": PASSWORD_VARIABLE, "valueFrom": {"secretKeyRef": {
                "name": kafka.password_secret, "key": kafka.password_key}}})  # fmt: skip
    container: dict[str, Any] = {
        "name": "sink",
        "image": image,
        "command": [IMAGE_PYTHON, "-m", "distributary.sinks", "--spec", f"{SPEC_MOUNT}/spec.json"],
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"memory": "512Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if env:
        container["env"] = env
    digest = hashlib.sha256(spec_json.encode()).hexdigest()[:16]
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": {"spec.json": spec_json},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata,
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": {SINK_LABEL: label_value(name)}},
                "template": {
                    "metadata": {
                        "labels": labels,
                        "annotations": {SPEC_HASH_ANNOTATION: digest},
                    },
                    "spec": {
                        "automountServiceAccountToken": False,
                        "securityContext": {
                            "runAsNonRoot": True,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [container],
                        "volumes": volumes,
                    },
                },
            },
        },
    ]
