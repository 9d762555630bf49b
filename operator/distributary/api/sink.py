"""The `Sink` kind: a serving store kept equal to a log, and fed from nothing else.

A Sink reads one Log and keeps a PostgreSQL table equal to it (in `upsert` mode a row per key,
the latest record of the key, deleted by a tombstone; in `append` mode a row per record), or a
Redis cache (a key per record key, its latest record as JSON, optionally expiring). The records
of each batch and the offsets they end at are written in one transaction of the store, so the
store is exactly what the log implies even across crashes and replays.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from distributary.api.common import (
    GROUP_VERSION,
    HANDLED_SPEC,
    ApiModel,
    ColumnName,
    Conditions,
    Duration,
    KubeName,
    ObjectMeta,
    SparkApplicationRef,
    StatusModel,
    cel,
    validations,
)
from distributary.api.source import HOST_PATTERN, TABLE_PATTERN, PostgresConnection, SecretKey


class PostgresTable(PostgresConnection):
    """A PostgreSQL table, and how the log's records become its rows."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.mode != 'append' || !has(self.key)",
                "postgres.key is only read in upsert mode: remove it or set mode: upsert",
                field_path=".key",
            ),
        )
    )

    table: Annotated[str, StringConstraints(pattern=TABLE_PATTERN)] = Field(
        description="The table as schema.table; created from the Log's schema when missing, "
        "and given the Log's new columns as they come.",
        json_schema_extra=validations(cel("self == oldSelf", "postgres.table is immutable")),
    )
    mode: Literal["upsert", "append"] = Field(
        default="upsert",
        description="upsert: a row per key, the latest record of the key, deleted by a "
        "tombstone. append: a row per record.",
    )
    key: list[ColumnName] | None = Field(
        default=None,
        max_length=32,
        description="The table's primary key in upsert mode: the Log's key (the default).",
    )

    @model_validator(mode="after")
    def _check_key(self) -> PostgresTable:
        if self.mode == "append" and self.key is not None:
            raise ValueError(
                "postgres.key: is only read in upsert mode: remove it or set mode: upsert"
            )
        return self


class RedisCache(ApiModel):
    """A Redis database, and how the log's records become its keys."""

    host: Annotated[str, StringConstraints(pattern=HOST_PATTERN)] = Field(
        description="The Redis server's host name or address."
    )
    port: Annotated[int, Field(ge=1, le=65535)] = Field(default=6379, description="Its port.")
    database: Annotated[int, Field(ge=0, le=1024)] = Field(
        default=0, description="The database number."
    )
    password_secret: SecretKey | None = Field(
        default=None, description="The password (AUTH), from a Secret; none when unset."
    )
    key_prefix: Annotated[str, StringConstraints(max_length=256)] = Field(
        default="",
        description="Each record key becomes the Redis key <keyPrefix><key values joined by ':'>, "
        "e.g. account:42.",
    )
    ttl: Duration | None = Field(
        default=None,
        description="Keys expire this long after their last write (a cache); never when unset.",
    )


class SinkSpec(ApiModel):
    """The log a store is derived from, and the store: a PostgreSQL table or a Redis cache."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.postgres) != has(self.redis)",
                "give one store: postgres or redis",
            ),
        )
    )

    log: KubeName = Field(
        description="The Log it reads, in the same namespace (a view's output: the revision "
        "that serves)."
    )
    postgres: PostgresTable | None = Field(
        default=None, description="The PostgreSQL table it keeps."
    )
    redis: RedisCache | None = Field(
        default=None, description="The Redis keys it keeps: the latest record of each key."
    )

    @model_validator(mode="after")
    def _check_store(self) -> SinkSpec:
        if (self.postgres is None) == (self.redis is None):
            raise ValueError("give one store: postgres or redis")
        return self


class SinkStatus(StatusModel):
    """The Sink as last observed."""

    conditions: Conditions
    observed_generation: int | None = Field(default=None, description="The generation observed.")
    handled_spec: str | None = Field(default=None, description=HANDLED_SPEC)
    topic: str | None = Field(default=None, description="The topic it reads.")
    position: dict[str, int] = Field(
        default_factory=dict,
        description="Next offset to apply, per partition, as committed with the rows.",
    )
    lag: int | None = Field(default=None, description="Records not yet in the table.")
    process: SparkApplicationRef | None = Field(
        default=None,
        description="The Sink's process (a Deployment, or a process on the operator's machine) "
        "and its restart history.",
    )


class Sink(ApiModel):
    """A serving store kept equal to a log."""

    api_version: Literal["distributary.dev/v1alpha1"] = Field(default=GROUP_VERSION)
    kind: Literal["Sink"] = "Sink"
    metadata: ObjectMeta
    spec: SinkSpec
    status: SinkStatus | None = None
