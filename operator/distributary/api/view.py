"""The `DerivedView` kind: one Spark SQL query over logs, whose output is itself a log.

A view owns its output as a child `Log`, so a derived feed looks no different to its readers from a
primary one. What determines the output (inputs, SQL, mode, key and the inputs' schemas) is hashed
into a revision; everything else (resources, trigger, upgrade settings) can change without
recomputing anything.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

from distributary.api.common import (
    GROUP_VERSION,
    HANDLED_SPEC,
    ApiModel,
    Change,
    ColumnName,
    Conditions,
    Duration,
    InputPosition,
    KubeName,
    ObjectMeta,
    PendingAction,
    Position,
    Progress,
    SparkApplicationRef,
    SparkSettings,
    SqlIdentifier,
    StatusModel,
    cel,
    duration_ms,
    validations,
)
from distributary.api.log import Retention
from distributary.api.names import (
    DEAD_LETTER_SUFFIX,
    MAX_OUTPUT_TOPIC,
    MAX_TOPIC_NAME,
    PROGRESS_TOPIC,
    PROJECT_TOPIC_PREFIX,
    reserved_topic,
    shown,
    topic_problem,
)


class Watermark(ApiModel):
    """The input's event time, and how late a record may arrive and still be counted."""

    column: SqlIdentifier = Field(
        description="A TIMESTAMP column of the input Log's schema that holds when each event "
        "happened."
    )
    delay: Duration = Field(
        description="How far behind the latest event time seen a record may be and still count "
        "(e.g. 30s, 10m): the watermark is the latest event time minus this. A window ends when "
        "the watermark passes it; records older than the watermark are dropped."
    )


class ViewInput(ApiModel):
    """A log the view reads, and the name it has in the SQL."""

    log: KubeName = Field(description="The name of a Log in the same namespace.")
    alias: SqlIdentifier = Field(description="The table name the SQL uses for this log.")
    starting_position: Position = Field(
        default_factory=Position,
        description="Where to start when there is no checkpoint and no committed offset.",
    )
    read: Literal["table", "changes"] | None = Field(
        default=None,
        description="How the view reads the Log: table (each record replaces its key's row, a "
        "tombstone deletes it; the query is kept exact over the current rows) or changes (every "
        "record is a new row, as a stream). Unset: table when the Log is compacted and keyed (a "
        "Source's table, an upsert view's output), changes otherwise.",
    )
    watermark: Watermark | None = Field(
        default=None,
        description="The input's event-time column and allowed lateness. An append view that "
        "aggregates needs one on the column it groups by window(...): each window is written "
        "once, when the watermark passes its end, and its state is dropped.",
    )


class ViewOutput(ApiModel):
    """The derived log: an event stream (append) or a table (upsert, in a compacted topic)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.mode != 'upsert' || (has(self.key) && size(self.key) > 0)",
                "output.key is required when output.mode is upsert: name the columns that identify "
                "a row",
                field_path=".key",
            ),
            cel(
                "self.mode != 'append' || !has(self.key) || size(self.key) == 0",
                "output.key is only read when output.mode is upsert: remove it or set mode: upsert",
                field_path=".key",
            ),
        )
    )

    log: KubeName | None = Field(
        default=None,
        description="The name of the child Log the view writes; the view's name when unset. "
        "Immutable.",
        json_schema_extra={
            "maxLength": MAX_OUTPUT_TOPIC,
            **validations(
                cel("self == oldSelf", "output.log is immutable"),
                cel(
                    f"self != '{PROGRESS_TOPIC}' && !(self.startsWith('{PROJECT_TOPIC_PREFIX}') "
                    f"&& self.endsWith('{DEAD_LETTER_SUFFIX}'))",
                    f"output.log may not be {PROGRESS_TOPIC} or distributary.<namespace>.<name>"
                    ".dlq: Distributary writes those topics itself; choose another name",
                ),
            ),
        },
    )
    mode: Literal["append", "upsert"] = Field(
        default="append",
        description="append: every result row is an event. upsert: rows are keyed by `key`, the "
        "latest per key wins, and the topic is compacted.",
    )
    key: list[ColumnName] | None = Field(
        default=None,
        max_length=32,
        description="With mode: upsert, the columns that identify a row.",
    )
    partitions: Annotated[int, Field(ge=1, le=10000)] | None = Field(
        default=None, description="Partitions of the output topic; the inputs' most when unset."
    )
    replicas: Annotated[int, Field(ge=1, le=32)] | None = Field(
        default=None, description="Replicas of the output topic; the broker's default when unset."
    )
    retention: Retention | None = Field(default=None, description="Retention of the output log.")
    delivery: Literal["ExactlyOnce", "AtLeastOnce"] = Field(
        default="ExactlyOnce",
        description="ExactlyOnce: each micro-batch's records, dead letters and position are "
        "written in one Kafka transaction, so a crash never leaves a duplicate or a gap for "
        "readers that read committed records (every reader Distributary runs does). AtLeastOnce: "
        "Spark's own Kafka sink; a batch replayed after a crash is written again. Changing it "
        "restarts the view in place.",
    )
    deletion_policy: Literal["Retain", "Delete"] = Field(
        default="Retain",
        description="What happens to the output topics when the view is deleted.",
    )

    @field_validator("log")
    @classmethod
    def _check_log(cls, log: str | None) -> str | None:
        reason = reserved_topic(log) if log is not None else None
        if reason is not None:
            raise ValueError(f"{log!r} {reason}: choose another name for the output log")
        return log

    @model_validator(mode="after")
    def _check_key(self) -> ViewOutput:
        if self.mode == "upsert" and not self.key:
            raise ValueError(
                "output.key is required when output.mode is upsert: name the columns that "
                "identify a row"
            )
        if self.mode == "append" and self.key:
            raise ValueError(
                "output.key is only read when output.mode is upsert: remove it or set mode: upsert"
            )
        return self


DEAD_LETTER_RETENTION = "7d"
# A retention shorter than this would delete dead letters before anyone could read them.
_UNDER_A_MINUTE = r"^0*([0-9]{1,4}|[1-5][0-9]{4})ms$|^0*[1-5]?[0-9]s$|^0+(m|h|d|w)$"


class DeadLetters(ApiModel):
    """The view's dead-letter topic: where the input records that do not parse are kept."""

    retention: Duration = Field(
        default=DEAD_LETTER_RETENTION,
        description="How long dead letters are kept (e.g. 12h, 7d, 4w; at least 1m). The "
        "dead-letter topic is always `cleanup.policy=delete` with this `retention.ms`, whatever "
        "the output's mode: dead letters may have no key, which a compacted topic refuses.",
        json_schema_extra=validations(
            cel(
                f"!self.matches('{_UNDER_A_MINUTE}')",
                "deadLetters.retention is at least 1m: dead letters kept for less are deleted "
                "before anyone can read them",
            )
        ),
    )

    @field_validator("retention")
    @classmethod
    def _at_least_a_minute(cls, value: str) -> str:
        if duration_ms(value) < 60_000:
            raise ValueError(
                f"{value!r} is less than a minute: dead letters would be deleted before anyone "
                f"could read them; give 1m or more (the default is {DEAD_LETTER_RETENTION})"
            )
        return value

    def topic_configs(self) -> dict[str, str]:
        """The dead-letter topic's Kafka configs: never compacted, kept `retention` long."""
        return {"cleanup.policy": "delete", "retention.ms": str(duration_ms(self.retention))}


class Upgrade(ApiModel):
    """What happens when a change alters the view's output."""

    strategy: Literal["Reprocess", "InPlace", "Auto"] = Field(
        default="Reprocess",
        description="Reprocess: run the new revision from the start of the logs beside the old one "
        "and switch readers when it has caught up. InPlace: restart from the checkpoint (only for "
        "changes Spark's checkpoint accepts). Auto: InPlace when allowed, else Reprocess.",
    )
    allow_partial_history: bool = Field(
        default=False,
        description="Reprocess even when retention has removed part of an input's history.",
    )
    cutover_max_lag: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="A new revision has caught up when it is behind by at most this many "
        "records more than its inputs receive in one cutoverWindow, or in two of its own "
        "micro-batches when those take longer (on idle inputs: this many).",
    )
    cutover_window: Duration = Field(
        default="10s", description="...and has stayed so for this long."
    )
    retire_after: Duration = Field(
        default="1h", description="How long the old revision's topic is kept after cutover."
    )


REQUEST_ID_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class RewindRequest(ApiModel):
    """A request to move a consumer's position: carried out once per `requestId`."""

    request_id: Annotated[
        str, StringConstraints(min_length=1, max_length=40, pattern=REQUEST_ID_PATTERN)
    ] = Field(
        description="Names this request; a new id asks for a new rewind (e.g. a date or a ticket)."
    )
    to: Position = Field(description="Where it reads from next.")


class Rewind(RewindRequest):
    """A request to move the view's serving revision: carried out once per `requestId`."""

    inputs: list[SqlIdentifier] = Field(
        default_factory=list,
        max_length=16,
        description="The aliases of the inputs to rewind; empty: every input.",
    )


class RewoundPartition(StatusModel):
    """One partition a rewind moved."""

    topic: str = Field(description="The input topic.")
    partition: int = Field(description="The partition.")
    from_offset: int | None = Field(default=None, description="The position before.")
    to_offset: int = Field(description="The position after.")


class RewindStatus(StatusModel):
    """The last rewind, recorded before it is carried out and marked Done after."""

    request_id: str = Field(description="The request carried out.")
    revision: int = Field(description="The revision rewound.")
    phase: Literal["Pending", "Done"] = Field(description="Pending while it is carried out.")
    offsets: list[RewoundPartition] = Field(
        default_factory=list, description="Old and new position per partition."
    )
    completed_at: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}, description="When it was done."
    )
    rebuilt_as: int | None = Field(
        default=None,
        description="The revision that rebuilds the view from the start of its inputs instead: "
        "a view that keeps state is not moved, since it would go on from empty state.",
    )
    verified: Literal["Held", "Undone"] | None = Field(
        default=None,
        description="Held once the revision's next run reported that it started from exactly "
        "the moved offsets; Undone when it started elsewhere (the group moved again before it "
        "began: the rewind did not take effect, request it again).",
    )


class ViewSpec(ApiModel):
    """A Spark SQL query over logs, and the log it writes."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.inputs.all(i, self.inputs.exists_one(j, "
                "j.alias.lowerAscii() == i.alias.lowerAscii()))",
                "each input needs its own alias",
                field_path=".inputs",
            ),
            cel(
                "!has(self.rewind) || !has(self.rewind.inputs) || "
                "self.rewind.inputs.all(a, self.inputs.exists(i, i.alias == a))",
                "rewind.inputs names the aliases of inputs",
                field_path=".rewind",
            ),
        )
    )

    inputs: list[ViewInput] = Field(
        min_length=1, max_length=16, description="The logs the SQL reads, each under an alias."
    )
    sql: Annotated[str, StringConstraints(min_length=1, max_length=65536)] = Field(
        description="One Spark SQL query over the inputs' aliases."
    )
    output: ViewOutput = Field(default_factory=ViewOutput, description="The derived log.")
    upgrade: Upgrade = Field(
        default_factory=Upgrade, description="How output-changing edits are rolled out."
    )
    spark: SparkSettings = Field(
        default_factory=SparkSettings, description="How the Spark application runs."
    )
    dead_letters: DeadLetters = Field(
        default_factory=DeadLetters,
        description="The dead-letter topic `distributary.<namespace>.<name>.dlq`, where input "
        "records that do not parse go (shared by the view's revisions).",
    )
    rewind: Rewind | None = Field(
        default=None,
        description="Move the serving revision's position (a new requestId each time): the "
        "operator stops it, sets its consumer group's offsets and starts it again on a fresh "
        "checkpoint from there.",
    )
    suspend: bool = Field(
        default=False,
        description="Stop the view's Spark application, keeping its position, checkpoint, "
        "topics and output (true), or start it again where it stopped (false). Nothing is "
        "recomputed either way; edits made meanwhile are carried out on resume.",
    )

    @model_validator(mode="after")
    def _check_aliases(self) -> ViewSpec:
        seen: set[str] = set()
        for item in self.inputs:
            if item.alias.lower() in seen:
                raise ValueError(
                    f"inputs: alias {item.alias!r} is used twice; give each input its own alias"
                )
            seen.add(item.alias.lower())
        if self.rewind is not None:
            unknown = sorted(set(self.rewind.inputs) - {i.alias for i in self.inputs})
            if unknown:
                raise ValueError(
                    f"rewind.inputs: {unknown[0]!r} is not an input alias; name one of "
                    f"{', '.join(i.alias for i in self.inputs)} (or none: every input)"
                )
        return self


class RevisionInput(StatusModel):
    """An input as a revision reads it."""

    log: str = Field(description="The input log's name.")
    alias: str | None = Field(default=None, description="Its alias in the SQL.")
    topic: str = Field(description="The topic the revision reads.")


class InputMark(StatusModel):
    """How many records a revision's inputs held at a moment: where its input rate is measured
    from."""

    at: str = Field(json_schema_extra={"format": "date-time"}, description="When (RFC 3339).")
    records: int = Field(description="The sum of its inputs' end offsets then.")


class Revision(StatusModel):
    """One revision of the view: a run of the query from its inputs' start into its own topic."""

    revision: int = Field(description="The revision number, from 1.")
    spec_hash: str = Field(description="Hash of what determines the output.")
    topic: str = Field(default="", description="The topic this revision writes.")
    consumer_group: str | None = Field(default=None, description="Its consumer group.")
    phase: Literal["Pending", "CatchingUp", "Serving", "Retiring", "Retired", "Failed"] = Field(
        description="Pending, CatchingUp, Serving, Retiring, Retired or Failed."
    )
    lag: int | None = Field(
        default=None, description="Records its inputs hold that it has not read."
    )
    inputs: list[RevisionInput] = Field(
        default_factory=list, max_length=16, description="What the revision reads."
    )
    progress_percent: float | None = Field(default=None, description="Share of the inputs read.")
    progress_message: str | None = Field(default=None, description="Progress for people.")
    records_read: int | None = Field(
        default=None, description="Records read so far while reprocessing."
    )
    records_total: int | None = Field(
        default=None, description="Records its inputs hold, while reprocessing."
    )
    checkpoint: str | None = Field(
        default=None, description="The checkpoint's folder under the revision's, after a rewind."
    )
    reason: Literal["CheckpointLost", "Rewind"] | None = Field(
        default=None,
        description="Why it started with the definition of the revision before it: that one "
        "keeps state its checkpoint lost (CheckpointLost) or was asked to rewind (Rewind), so "
        "this one rebuilds the state from the start of the inputs.",
    )
    checkpoint_lost: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When its runner found its checkpoint gone after its group had read "
        "records; a view that keeps state does not resume on empty state, so it runs no more.",
    )
    input_rate: float | None = Field(
        default=None,
        description="Records per second its inputs grow by, over the last ten seconds or more.",
    )
    input_mark: InputMark | None = Field(
        default=None, description="Where the input rate is measured from."
    )
    batch_seconds: float | None = Field(
        default=None,
        description="How long its last micro-batch that read everything its inputs held took, "
        "as its runner reported it: a reader that keeps up is behind by up to two such "
        "batches' worth of input.",
    )
    dead_letters: int | None = Field(
        default=None,
        description="Input records it could not parse and sent to the dead-letter topic, over "
        "its whole run (its runner's count, which survives restarts).",
    )
    caught_up_since: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="Since when a catching-up revision's lag has stayed under the threshold.",
    )
    serving_since: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When it began to serve after catching up.",
    )
    retire_at: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When a retiring revision's topic is let go.",
    )
    topic_deleted: bool | None = Field(
        default=None, description="Whether its topic was deleted on retirement."
    )
    group_deleted: bool | None = Field(
        default=None,
        description="Whether its consumer group was deleted once it retired (a retired "
        "revision never runs again, so its position is of no use).",
    )
    started_at: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}, description="When it started."
    )
    caught_up_at: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}, description="When it caught up."
    )
    retired_at: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When it stopped serving.",
    )


class ViewStatus(StatusModel):
    """The view as last observed."""

    conditions: Conditions
    observed_generation: int | None = Field(default=None, description="The generation observed.")
    handled_spec: str | None = Field(default=None, description=HANDLED_SPEC)
    serving_revision: int | None = Field(default=None, description="The revision readers follow.")
    revisions: list[Revision] = Field(
        default_factory=list, description="Current and past revisions."
    )
    output_topic: str | None = Field(default=None, description="The serving revision's topic.")
    inputs: list[InputPosition] = Field(
        default_factory=list, description="The serving revision's position per input."
    )
    lag: int | None = Field(default=None, description="The serving revision's total lag.")
    dead_letters: int | None = Field(
        default=None, description="The serving revision's dead letters (see revisions[])."
    )
    last_progress: Progress | None = Field(default=None, description="The last micro-batch.")
    spark_application: SparkApplicationRef | None = Field(
        default=None, description="The Spark application."
    )
    last_change: Change | None = Field(
        default=None, description="How the last edit was classified."
    )
    last_rewind: RewindStatus | None = Field(default=None, description="The last rewind.")
    pending_action: PendingAction | None = Field(
        default=None, description="What the operator is doing now."
    )


class DerivedView(ApiModel):
    """A log computed continuously from logs by one Spark SQL query."""

    api_version: Literal["distributary.dev/v1alpha1"] = Field(default=GROUP_VERSION)
    kind: Literal["DerivedView"] = "DerivedView"
    metadata: ObjectMeta
    spec: ViewSpec
    status: ViewStatus | None = None

    @property
    def output_log(self) -> str:
        """The name of the child Log this view writes."""
        return self.spec.output.log or self.metadata.name

    @model_validator(mode="after")
    def _check_output_topic(self) -> DerivedView:
        # The output log's name is its topic, and each revision writes `<topic>.r<revision>`.
        name = self.output_log
        field = "spec.output.log" if self.spec.output.log else "metadata.name"
        problem = topic_problem(name, MAX_OUTPUT_TOPIC)
        if problem is None:
            return self
        fix = (
            f"shorten spec.output.log to at most {MAX_OUTPUT_TOPIC} characters"
            if self.spec.output.log
            else f"set spec.output.log to a name of at most {MAX_OUTPUT_TOPIC} characters"
        )
        raise ValueError(
            f"{field}: {shown(name)} names the view's output log and topic, whose revisions "
            f"write <topic>.r<revision> (at most {MAX_TOPIC_NAME} characters), and {problem}: "
            f"{fix} that names no internal topic"
        )
