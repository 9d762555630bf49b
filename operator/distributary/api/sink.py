"""The `Sink` kind: a serving store kept equal to a log, and fed from nothing else.

A Sink reads one Log and keeps a PostgreSQL table equal to it: in `upsert` mode a row per key (the
latest record of the key; a tombstone deletes the row), in `append` mode a row per record. The
records of each batch and the offsets they end at are written in one database transaction, so the
table is exactly what the log implies even across crashes and replays.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from distributary.api.common import (
    GROUP_VERSION,
    ApiModel,
    ColumnName,
    Conditions,
    KubeName,
    ObjectMeta,
    StatusModel,
    cel,
    validations,
)
from distributary.api.source import TABLE_PATTERN, PostgresConnection


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


class SinkSpec(ApiModel):
    """The log a store is derived from, and the store."""

    log: KubeName = Field(
        description="The Log it reads, in the same namespace (a view's output: the revision "
        "that serves)."
    )
    postgres: PostgresTable = Field(description="The PostgreSQL table it keeps.")


class SinkStatus(StatusModel):
    """The Sink as last observed."""

    conditions: Conditions
    observed_generation: int | None = Field(default=None, description="The generation observed.")
    topic: str | None = Field(default=None, description="The topic it reads.")
    position: dict[str, int] = Field(
        default_factory=dict,
        description="Next offset to apply, per partition, as committed with the rows.",
    )
    lag: int | None = Field(default=None, description="Records not yet in the table.")


class Sink(ApiModel):
    """A serving store kept equal to a log."""

    api_version: Literal["distributary.dev/v1alpha1"] = Field(default=GROUP_VERSION)
    kind: Literal["Sink"] = "Sink"
    metadata: ObjectMeta
    spec: SinkSpec
    status: SinkStatus | None = None
