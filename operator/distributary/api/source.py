"""The `Source` kind: a database's changes as logs (change data capture).

A Source names a PostgreSQL database and some of its tables. Each table becomes a `Log` the Source
creates and owns: compacted, keyed by the table's primary key, its schema the table's columns,
each row a flat JSON record and each deleted row a tombstone. The changes are captured by
Debezium's PostgreSQL connector (`pgoutput`, a replication slot and a publication of the Source's
own) on Kafka Connect, so the application writes to its database alone and nothing is written twice.

The spec says where the database is and what to capture, never where Connect runs: the same Source
runs on a Connect worker of `distributary run` and under the operator.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from distributary.api.common import (
    GROUP_VERSION,
    HANDLED_SPEC,
    ApiModel,
    ColumnName,
    Conditions,
    KubeName,
    ObjectMeta,
    StatusModel,
    cel,
    validations,
)
from distributary.api.log import BYTES_PATTERN, Retention, quantity_bytes
from distributary.api.names import shown, topic_problem

# `schema.table` as PostgreSQL names it unquoted: lower-case letters, digits and underscores.
TABLE_PATTERN = r"^[a-z_][a-z0-9_$]{0,62}\.[a-z_][a-z0-9_$]{0,62}$"
HOST_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]{1,253}$"
# A PostgreSQL identifier (slot, publication) has at most 63 bytes.
PG_IDENTIFIER = 63
DEFAULT_WAL_WARNING = "1Gi"


class SecretKey(ApiModel):
    """A key of a Secret in the Source's namespace. Under `distributary run`, the file
    `<secrets folder>/<name>/<key>`, as Kubernetes mounts a Secret."""

    name: KubeName = Field(description="The Secret's name.")
    key: Annotated[str, StringConstraints(pattern=SECRET_KEY_PATTERN)] = Field(
        default="password", description="The key in the Secret."
    )


class PostgresConnection(ApiModel):
    """Where the database is and who Distributary is there."""

    host: Annotated[str, StringConstraints(pattern=HOST_PATTERN)] = Field(
        description="The database server's host name or address."
    )
    port: Annotated[int, Field(ge=1, le=65535)] = Field(default=5432, description="Its port.")
    database: Annotated[str, StringConstraints(min_length=1, max_length=63)] = Field(
        description="The database holding the tables."
    )
    user: Annotated[str, StringConstraints(min_length=1, max_length=63)] = Field(
        description="A user with the REPLICATION attribute that owns the tables or may create "
        "a publication for them."
    )
    password_secret: SecretKey = Field(
        description="The user's password, from a Secret; never written in the spec."
    )
    ssl_mode: Literal["disable", "prefer", "require", "verify-ca", "verify-full"] = Field(
        default="prefer", description="libpq's sslmode for every connection to the database."
    )


class SourceTable(ApiModel):
    """A table whose rows become a Log."""

    name: Annotated[str, StringConstraints(pattern=TABLE_PATTERN)] = Field(
        description="The table as schema.table, e.g. public.orders."
    )
    log: KubeName | None = Field(
        default=None,
        description="The Log the Source creates for the table: <source>-<table> when unset "
        "(underscores become dashes). Immutable.",
        json_schema_extra=validations(cel("self == oldSelf", "tables[].log is immutable")),
    )
    record_schema: Annotated[str, StringConstraints(max_length=65536)] | None = Field(
        default=None,
        alias="schema",
        description="The Log's columns as Spark DDL. Derived from the table when unset; when "
        "set, checked against the table.",
    )
    key: list[ColumnName] | None = Field(
        default=None,
        max_length=32,
        description="The key columns; the table's primary key when unset (and it must be the "
        "primary key when set).",
    )
    partitions: Annotated[int, Field(ge=1, le=10000)] = Field(
        default=3, description="Partitions of the Log's topic. May be increased."
    )
    retention: Retention | None = Field(
        default=None,
        description="How long superseded rows are kept besides the latest of each key.",
    )
    deletion_policy: Literal["Retain", "Delete"] = Field(
        default="Retain",
        description="Retain (default) keeps the Log's topic when the Source is deleted; Delete "
        "removes it.",
    )

    @property
    def table(self) -> str:
        """The table's name without its schema."""
        return self.name.split(".", 1)[1]


class Snapshot(ApiModel):
    """What is read of the rows that exist when the Source starts."""

    mode: Literal["Initial", "NoData"] = Field(
        default="Initial",
        description="Initial: every existing row first, then the changes. NoData: only the "
        "changes made from the start on.",
    )
    epoch: Annotated[int, Field(ge=0, le=1_000_000)] = Field(
        default=0,
        description="Raise it to read every table again, as a new revision of the table Logs: a "
        "new connector (its own slot and publication) takes a fresh snapshot into a new topic "
        "per table beside the serving ones; once it has caught up with the serving connector "
        "the table Logs serve the new topics (views reading them reprocess, Sinks fill beside "
        "and switch), and the previous connector, slot and publication are dropped. The "
        "previous topics are kept. May only be raised.",
        json_schema_extra=validations(
            cel("self >= oldSelf", "snapshot.epoch may only be raised: raise it to re-snapshot")
        ),
    )


class SourceSpec(ApiModel):
    """A PostgreSQL database and the tables whose changes become logs."""

    postgres: PostgresConnection = Field(description="The database.")
    tables: list[SourceTable] = Field(
        min_length=1,
        max_length=64,
        description="The tables to capture, each into a Log; each table once.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    snapshot: Snapshot = Field(default_factory=Snapshot, description="The first read.")
    paused: bool = Field(
        default=False,
        description="Stop reading changes (the database keeps them in the slot's WAL until "
        "resumed: watch the retained WAL).",
    )
    wal_warning: Annotated[str, StringConstraints(max_length=24, pattern=BYTES_PATTERN)] = Field(
        default=DEFAULT_WAL_WARNING,
        description="Warn (DataLossRisk) when the replication slot keeps more WAL than this on "
        "the database server, e.g. 1Gi.",
    )

    @field_validator("wal_warning")
    @classmethod
    def _check_wal_warning(cls, value: str) -> str:
        quantity_bytes(value)
        return value

    @model_validator(mode="after")
    def _check_tables(self) -> SourceSpec:
        seen: set[str] = set()
        for index, table in enumerate(self.tables):
            if table.name in seen:
                raise ValueError(f"tables[{index}].name: {table.name!r} is listed twice: list "
                                 "each table once")  # fmt: skip
            seen.add(table.name)
        return self


class TableStatus(StatusModel):
    """A captured table as last observed."""

    name: str = Field(description="The table, schema.table.")
    log: str = Field(description="Its Log.")
    topic: str | None = Field(default=None, description="The Log's topic.")
    columns: str | None = Field(default=None, description="The table's columns as Spark DDL.")
    key: list[str] = Field(default_factory=list, description="Its key columns.")


class SlotStatus(StatusModel):
    """The Source's replication slot on the database server."""

    name: str = Field(description="The slot's name.")
    active: bool | None = Field(default=None, description="Whether a connector reads it now.")
    retained_wal_bytes: int | None = Field(
        default=None, description="WAL the server keeps for the slot, in bytes."
    )
    lag_bytes: int | None = Field(
        default=None, description="WAL written since the position the connector confirmed."
    )
    lag_seconds: float | None = Field(
        default=None, description="Age of the oldest change not yet confirmed, in seconds."
    )


class SourceRevision(StatusModel):
    """One revision of the table Logs: a connector, its slot and publication, a topic per table."""

    revision: int = Field(description="The revision: 1, then one more for each new snapshot.")
    epoch: int = Field(default=0, description="The spec.snapshot.epoch it was taken for.")
    phase: str = Field(description="Serving, CatchingUp (snapshot beside), Retiring or Retired.")
    connector: str = Field(description="Its Kafka Connect connector.")
    slot: str = Field(description="Its replication slot and publication.")
    topics: dict[str, str] = Field(default_factory=dict, description="Each table's topic.")
    snapshot_done: bool | None = Field(
        default=None, description="Whether its snapshot has been read whole."
    )
    snapshot: str | None = Field(
        default=None,
        description="Clean (taken at its slot's starting point), Interrupted (taken again after a "
        "crash, later than that: changes made in between may be missing, so it is replaced by a "
        "new revision) or Unchecked (it streamed before the two could be compared).",
    )
    position: str | None = Field(
        default=None, description="The last WAL position (LSN) whose changes it wrote whole."
    )
    started_at: str | None = Field(default=None, description="When it started.")
    caught_up_at: str | None = Field(default=None, description="When it began serving.")


class SourceStatus(StatusModel):
    """The Source as last observed."""

    conditions: Conditions
    observed_generation: int | None = Field(default=None, description="The generation observed.")
    handled_spec: str | None = Field(default=None, description=HANDLED_SPEC)
    connector: str | None = Field(default=None, description="The Kafka Connect connector.")
    connector_state: str | None = Field(
        default=None, description="RUNNING, PAUSED, FAILED, UNASSIGNED (Connect's word)."
    )
    tables: list[TableStatus] = Field(default_factory=list, description="Each table's Log.")
    serving_revision: int | None = Field(
        default=None, description="The revision whose topics the table Logs serve."
    )
    revisions: list[SourceRevision] = Field(
        default_factory=list, description="The revisions that run or ran (a re-snapshot's)."
    )
    slot: SlotStatus | None = Field(default=None, description="The replication slot.")
    publication: str | None = Field(default=None, description="The publication.")


class Source(ApiModel):
    """A database's changes as logs: each table a compacted, keyed Log."""

    api_version: Literal["distributary.dev/v1alpha1"] = Field(default=GROUP_VERSION)
    kind: Literal["Source"] = "Source"
    metadata: ObjectMeta
    spec: SourceSpec
    status: SourceStatus | None = None

    def table_log(self, table: SourceTable) -> str:
        """The name of the Log a table becomes."""
        return table.log or f"{self.metadata.name}-{table.table.replace('_', '-')}"

    @model_validator(mode="after")
    def _check_logs(self) -> Source:
        for index, table in enumerate(self.spec.tables):
            name = self.table_log(table)
            problem = topic_problem(name)
            if problem is not None:
                field = f"spec.tables[{index}].log"
                raise ValueError(
                    f"{field}: {shown(name)} names the table's Log and topic, and {problem}: set "
                    f"{field} to a shorter name"
                )
        return self

    @property
    def identifier(self) -> str:
        """The name of its slot and publication: PostgreSQL identifiers, unique per Source."""
        return self.revision_identifier(1)

    def revision_identifier(self, revision: int) -> str:
        """The slot and publication of a revision of the table Logs: the Source's identifier,
        with `_r<N>` from revision 2 on; at most 63 bytes, unique per Source and revision."""
        raw = f"distributary_{self.metadata.namespace}_{self.metadata.name}"
        suffix = f"_r{revision}" if revision > 1 else ""
        text = re.sub(r"[^a-z0-9_]", "_", raw.lower())
        if len(text) + len(suffix) <= PG_IDENTIFIER:
            return text + suffix
        digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
        return f"{text[: PG_IDENTIFIER - 9 - len(suffix)]}_{digest}{suffix}"
