"""The runner spec: the contract between the planners and the Spark-side runner.

Everything the runner needs to read its inputs, run the SQL and write its output is decided here,
where it can be unit-tested, so the runner (`python -m distributary.runner --spec FILE`) stays a
thin loop. Names derived from a view or job (consumer group, checkpoint, dead-letter topic) are
functions of the namespace, the name and the revision only, so every component computes them alike
and a restarted operator finds what it started.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from distributary.api.common import Position, SparkSettings, duration_ms
from distributary.api.log import Log
from distributary.api.names import (
    DEAD_LETTER_SUFFIX,
    MAX_GROUP_ID,
    MAX_TOPIC_NAME,
    PROJECT_TOPIC_PREFIX,
    REVISION_SUFFIX_ROOM,
    progress_topic_in_force,
    shortened,
)
from distributary.api.view import DerivedView, Watermark
from distributary.plan.access.kafka_connection import SPARK_REDACTION, KafkaSecurity
from distributary.plan.revisions.classify import stateful_parts
from distributary.table_queries import CHANGES, TABLE, input_read

SPEC_JSON_ARG = "--spec-json"  # the runner's argument for the spec inline, as JSON
SPEC_FILE_ARG = "--spec"  # ...and for the spec in a file
FOLLOW_ARG = "--follow"  # ...and to read that file again whenever it changes
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHECKPOINT_FILES = "spark.sql.streaming.checkpointFileManagerClass"
# Checkpoint files on a local disk or a volume (file://): made by Java, no process per file
# (`runner/jvm/LocalCheckpointFiles.java`, among the JVM operators) ...
LOCAL_CHECKPOINT_FILES = "dev.distributary.checkpoints.LocalCheckpointFiles"
# ... or, where a runner's JVM lacks the operators' jar, through Hadoop's FileSystem API.
SPARK_LOCAL_CHECKPOINT_FILES = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


class _Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StartingPosition(_Contract):
    """Where a reader starts without a checkpoint: earliest, latest, the first record at or after
    `timestamp_ms`, or explicit `offsets` per partition (partitions not named start earliest)."""

    kind: Literal["earliest", "latest", "timestamp", "offsets"] = "earliest"
    timestamp_ms: int | None = None
    offsets: dict[int, int] | None = None


class EventTime(_Contract):
    """An input's watermark: its event-time column and how late a record may be, in ms."""

    column: str
    delay_ms: int


class RunnerInput(_Contract):
    """One log the runner reads. `alias` is the SQL table name (None for a job's inputs)."""

    alias: str | None
    log: str
    topic: str
    partitions: int
    schema_ddl: str | None
    format: Literal["json"] = "json"
    starting_position: StartingPosition = StartingPosition()
    watermark: EventTime | None = None
    read: Literal["changes", "table"] = "changes"  # `table_queries.input_read`
    key: tuple[str, ...] | None = None  # a table's key columns, when its Log declares them

    @model_serializer(mode="wrap")
    def _without_unset_watermark(self, handler: SerializerFunctionWrapHandler) -> Any:
        # An input without a watermark, read as a stream, is written as before there were
        # watermarks and tables, so the runner spec (a SparkApplication's argument) of such a
        # view does not change.
        data = handler(self)
        if isinstance(data, dict):
            if self.watermark is None:
                data.pop("watermark", None)
            if self.read == "changes":
                data.pop("read", None)
                data.pop("key", None)
        return data


class RunnerOutput(_Contract):
    """The log the runner writes: an event stream (append) or a keyed table (upsert)."""

    log: str
    topic: str
    mode: Literal["append", "upsert"]
    key: tuple[str, ...] | None = None
    partitions: int
    delivery: Literal["ExactlyOnce", "AtLeastOnce"] = "ExactlyOnce"


class RunnerSpec(_Contract):
    """Everything the Spark-side runner needs for one revision of a view (or a job's facts)."""

    version: Literal[1] = 1
    kind: Literal["DerivedView", "StreamJob"]
    namespace: str
    name: str
    revision: int
    spec_hash: str
    inputs: tuple[RunnerInput, ...]
    sql: str | None = None
    output: RunnerOutput | None = None
    dead_letter_topic: str
    consumer_group: str
    checkpoint_location: str
    trigger: str = "5s"
    max_offsets_per_trigger: int | None = None
    stateful: bool = False  # its checkpoint holds state: no resuming without it
    fail_on_data_loss: bool = True
    bootstrap_servers: str | None = None
    kafka_security: KafkaSecurity | None = None  # references to secrets, never a secret
    spark_conf: dict[str, str] = {}
    # The installation's progress topic (`api.names.use_progress_topic`); None: none.
    progress_topic: str | None = Field(default_factory=progress_topic_in_force)
    planned_hash: str | None = None  # set by a runtime that changed the spec (`as_run_by`)

    @model_serializer(mode="wrap")
    def _without_plaintext_security(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A spec for a plaintext Kafka is written as before there was a connection model, so
        # the SparkApplications of running views do not change when the operator is upgraded.
        data = handler(self)
        if self.kafka_security is None and isinstance(data, dict):
            data.pop("kafka_security", None)
        if self.planned_hash is None and isinstance(data, dict):
            data.pop("planned_hash", None)  # likewise: only a runtime's own copy has one
        return data


# Records an exactly-once view reads per micro-batch at most, unless its spec says otherwise: the
# batch's output is collected on the driver and written in one transaction.
EXACTLY_ONCE_BATCH = 250_000


RUNNER_SPEC_HASH = "runnerSpecHash"  # the progress record's field of `reported_hash`


def runner_spec_hash(spec: RunnerSpec) -> str:
    """Hash of a runner spec as the planner made it, so that a runner's report about one spec
    of a revision (Spark refused its query) is told from a report about another."""
    data = spec.model_copy(update={"planned_hash": None}).model_dump(mode="json")
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def as_run_by(runtime_copy: RunnerSpec, planned: RunnerSpec) -> RunnerSpec:
    """`runtime_copy`, the spec `planned` with what a runtime adds for its machine (local
    Spark's master, jars and settings), marked with the planned spec's hash: the one its
    runner reports (`reported_hash`), which the reconcile compares with the plan's."""
    return runtime_copy.model_copy(update={"planned_hash": runner_spec_hash(planned)})


def reported_hash(spec: RunnerSpec) -> str:
    """The hash a runner running `spec` reports: the planned spec's (`as_run_by`), or its own
    when it runs the spec as planned (a SparkApplication's)."""
    return spec.planned_hash or runner_spec_hash(spec)


SQL_SETTING = "spark.sql."  # a prefix of the settings a revision's own Spark session sets


def session_settings(specs: Sequence[RunnerSpec]) -> dict[str, str]:
    """The Spark settings of a runner process running `specs`: each spec's `spark_conf`, the
    first to name a key winning, and the redaction of secrets from Spark's logs and UI."""
    chosen: dict[str, str] = {}
    for spec in specs:
        for key, value in spec.spark_conf.items():
            chosen.setdefault(key, value)
    chosen.setdefault("spark.redaction.regex", SPARK_REDACTION)
    return chosen


def process_settings(specs: Sequence[RunnerSpec]) -> dict[str, Any]:
    """What the revisions of one runner process share: its Spark settings (but the SQL ones,
    which each revision's own session sets: `runner.query.revision_session`), the Kafka it
    reaches and how, and the progress topic. A revision joins a running process (the local
    runtime's `--follow`) only when these stay the same; otherwise the process starts again."""

    def first(values: Iterator[Any]) -> Any:
        return next((v for v in values if v), None)

    security = first(s.kafka_security for s in specs)
    spark = session_settings(specs)
    return {
        "spark": {k: v for k, v in spark.items() if not k.startswith(SQL_SETTING)},
        "bootstrap": first(s.bootstrap_servers for s in specs),
        "security": security.model_dump(mode="json") if security is not None else None,
        "progress": first(s.progress_topic for s in specs),
    }


RUNNER_GENERATION = "runnerGeneration"  # the progress record's field: which start of a revision


@dataclass(frozen=True)
class FollowedSpecs:
    """The specs file a following runner process reads again whenever it changes: each
    revision's spec with the generation it was (re)started at, and the file's own generation,
    which the process acknowledges once it runs what the file says (`applied_file`)."""

    generation: int
    revisions: tuple[tuple[int, RunnerSpec], ...]  # (since, spec)

    def to_json(self) -> str:
        return json.dumps(
            {
                "generation": self.generation,
                "revisions": [
                    {"since": since, "spec": spec.model_dump(mode="json")}
                    for since, spec in self.revisions
                ],
            },
            indent=1,
        )

    @classmethod
    def parse(cls, decoded: Any) -> FollowedSpecs:
        """The file's content: this shape, or a list of specs or one spec (generation 0)."""
        if isinstance(decoded, dict) and "revisions" in decoded:
            return cls(
                int(decoded.get("generation") or 0),
                tuple(
                    (int(item.get("since") or 0), RunnerSpec.model_validate(item["spec"]))
                    for item in decoded["revisions"]
                ),
            )
        items = decoded if isinstance(decoded, list) else [decoded]
        return cls(0, tuple((0, RunnerSpec.model_validate(item)) for item in items))


def applied_file(spec_file: Path) -> Path:
    """Where a following runner process acknowledges the generation of `spec_file` it runs."""
    return spec_file.with_name(spec_file.stem + ".applied.json")


def consumer_group(namespace: str, name: str, revision: int) -> str:
    """The consumer group a revision's position is mirrored into: one per view or job revision
    (also the revision's transactional id). A long name is shortened before `.r<revision>`, so
    every revision of one view or job shares the part before it."""
    base = shortened(f"distributary.{namespace}.{name}", MAX_GROUP_ID - REVISION_SUFFIX_ROOM)
    return f"{base}.r{revision}"


def dead_letter_topic(namespace: str, name: str) -> str:
    """The topic that receives records a view or job could not parse (shared by its revisions)."""
    text = f"{PROJECT_TOPIC_PREFIX}{namespace}.{name}"
    return shortened(text, MAX_TOPIC_NAME, keep=DEAD_LETTER_SUFFIX)


def checkpoint_location(
    root: str, namespace: str, name: str, revision: int, uid: str | None = None
) -> str:
    """Where a revision checkpoints: a fresh location per revision, so a reprocess never resumes
    the old revision's state; under the resource's uid when it has one (in a cluster), so a
    view deleted and created again never resumes the old one's checkpoint."""
    # A cluster's uid (a UUID); not `distributary run`'s stand-in, which names the view only.
    incarnation = f"/{uid}" if uid and re.fullmatch(r"[A-Za-z0-9][-A-Za-z0-9]*", uid) else ""
    return f"{root.rstrip('/')}/{namespace}/{name}{incarnation}/r{revision}"


def starting_position(position: Position) -> StartingPosition:
    """The runner's form of a spec's starting position (timestamps become epoch milliseconds)."""
    if position.from_ == "Timestamp" and position.timestamp is not None:
        try:
            instant = datetime.fromisoformat(position.timestamp.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"startingPosition.timestamp {position.timestamp!r} is not an "
                "RFC 3339 instant; write e.g. 2024-05-01T00:00:00Z"
            ) from None
        if instant.tzinfo is None:
            instant = instant.replace(tzinfo=UTC)
        return StartingPosition(kind="timestamp", timestamp_ms=int(instant.timestamp() * 1000))
    if position.from_ == "Offsets" and position.offsets is not None:
        offsets = {int(partition): offset for partition, offset in position.offsets.items()}
        return StartingPosition(kind="offsets", offsets=dict(sorted(offsets.items())))
    return StartingPosition(kind="latest" if position.from_ == "Latest" else "earliest")


def on_local_files(location: str) -> bool:
    """Whether a checkpoint location is a path of the driver's own file system (file:// or no
    scheme: a volume in a cluster, a folder of `distributary run`)."""
    scheme = location.split("://", 1)[0] if "://" in location else ""
    return scheme in ("", "file")


def default_spark_conf(
    shuffle_partitions: int, checkpoint_location: str | None = None
) -> dict[str, str]:
    """Spark settings for a small, long-running streaming query; a user's sparkConf wins."""
    conf = {
        # One shuffle partition per input partition rather than Spark's 200: 200 mostly empty
        # tasks per micro-batch dominate a small stream's latency, and a stateful query writes the
        # number into its checkpoint, where it can never change afterwards.
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        # Aggregation and join state in RocksDB, off the JVM heap: an upsert view's table of keys
        # grows on local disk instead of into garbage-collection pauses. The checkpoint records
        # the provider, so it has to be right from a revision's first batch.
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        # Each commit uploads the state that changed, not a full snapshot of it.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Timestamps parse and print in UTC whatever the pod's or laptop's zone, so a view's
        # output does not depend on where it ran.
        "spark.sql.session.timeZone": "UTC",
        # Input rate, processing rate and latency of each query in Spark's metrics system.
        "spark.sql.streaming.metricsEnabled": "true",
    }
    if checkpoint_location is not None and on_local_files(checkpoint_location):
        # Spark's default writes checkpoint files through Hadoop's FileContext, whose rename on
        # a local file system starts a `readlink` process for every file, and whose local file
        # system starts a `chmod` for every file made and for its checksum file (Hadoop without
        # its native library, as in pyspark): dozens a second, a quarter of a small view's CPU
        # (docs/performance.md). Ours makes them in Java and renames them through the
        # FileSystem API; a local rename is atomic, and two writers of one revision are fenced
        # by its Kafka transactions. A runner whose JVM lacks the class takes Spark's
        # FileSystem-based manager instead (`runner.query.checkpoint_files`).
        conf[CHECKPOINT_FILES] = LOCAL_CHECKPOINT_FILES
    return conf


def merged_conf(
    shuffle_partitions: int, settings: SparkSettings, checkpoint_location: str | None = None
) -> dict[str, str]:
    conf = default_spark_conf(shuffle_partitions, checkpoint_location)
    conf.update(settings.spark_conf)
    return dict(sorted(conf.items()))


def reading_topic(log: Log) -> str:
    # A view's output log points readers at its serving revision's topic through its status.
    if log.status is not None and log.status.topic_name:
        return log.status.topic_name
    return log.topic


def log_partitions(log: Log) -> int:
    if log.status is not None and log.status.partitions:
        return log.status.partitions
    return log.spec.partitions


def runner_input(
    alias: str | None,
    log: Log,
    position: StartingPosition,
    watermark: EventTime | None = None,
    read: str = CHANGES,
) -> RunnerInput:
    table = read == TABLE
    return RunnerInput(
        alias=alias,
        log=log.metadata.name,
        topic=reading_topic(log),
        partitions=log_partitions(log),
        schema_ddl=log.spec.record_schema,
        format=log.spec.format,
        starting_position=position,
        watermark=watermark,
        read=TABLE if table else CHANGES,
        key=tuple(log.spec.key) if table and log.spec.key else None,
    )


def event_time(watermark: Watermark | None) -> EventTime | None:
    """The runner's form of an input's watermark (the delay in milliseconds)."""
    if watermark is None:
        return None
    return EventTime(column=watermark.column, delay_ms=duration_ms(watermark.delay))


def view_runner_spec(
    view: DerivedView,
    inputs: Mapping[str, Log],
    output: Log,
    *,
    revision: int,
    spec_hash: str,
    output_topic: str,
    checkpoint_root: str,
    bootstrap_servers: str | None = None,
    starting_positions: Mapping[str, StartingPosition] | None = None,
    kafka_security: KafkaSecurity | None = None,
) -> RunnerSpec:
    """The runner spec of one revision of `view`. `inputs` maps each alias to its Log;
    `starting_positions` overrides a spec's position per alias (e.g. a group's committed offsets
    when a fresh checkpoint is made)."""
    meta, spec = view.metadata, view.spec
    sources = []
    for item in spec.inputs:
        log = inputs.get(item.alias)
        if log is None:
            raise ValueError(
                f"DerivedView/{meta.namespace}/{meta.name}: spec.inputs: no Log given for alias "
                f"{item.alias!r} (log {item.log!r}); create the Log or fix the input's log name"
            )
        position = (starting_positions or {}).get(item.alias) or starting_position(
            item.starting_position
        )
        read = input_read(item.read, log.spec.compaction)
        sources.append(runner_input(item.alias, log, position, event_time(item.watermark), read))
    sink = RunnerOutput(
        log=output.metadata.name,
        topic=output_topic,
        mode=spec.output.mode,
        key=tuple(spec.output.key) if spec.output.key else None,
        partitions=output.spec.partitions,
        delivery=spec.output.delivery,
    )
    shuffle = max([s.partitions for s in sources] + [sink.partitions])
    checkpoint = checkpoint_location(checkpoint_root, meta.namespace, meta.name, revision, meta.uid)
    return RunnerSpec(
        kind="DerivedView",
        namespace=meta.namespace,
        name=meta.name,
        revision=revision,
        spec_hash=spec_hash,
        inputs=tuple(sources),
        sql=spec.sql,
        output=sink,
        dead_letter_topic=dead_letter_topic(meta.namespace, meta.name),
        consumer_group=consumer_group(meta.namespace, meta.name, revision),
        checkpoint_location=checkpoint,
        trigger=spec.spark.trigger,
        max_offsets_per_trigger=spec.spark.max_offsets_per_trigger,
        # A table's rows are kept in the checkpoint: a view over one always keeps state.
        stateful=keeps_state(spec.sql) or any(s.read == TABLE for s in sources),
        fail_on_data_loss=not spec.upgrade.allow_partial_history,
        bootstrap_servers=bootstrap_servers,
        kafka_security=_secured(kafka_security),
        spark_conf=merged_conf(shuffle, spec.spark, checkpoint),
    )


def _secured(security: KafkaSecurity | None) -> KafkaSecurity | None:
    """None for plaintext: a spec names a connection model only when there is one to name."""
    return None if security is None or security.protocol == "PLAINTEXT" else security


def keeps_state(sql: str) -> bool:
    """Whether a view's query keeps state in its checkpoint (aggregation, deduplication, joins,
    ...); a query that does not parse is taken to keep some."""
    try:
        return not stateful_parts(sql).stateless
    except ValueError:
        return True


def kafka_source_options(spec: RunnerSpec, source: RunnerInput) -> dict[str, str]:
    """The options of Spark's Kafka source for one input of `spec`."""
    options = {"subscribe": source.topic}
    if spec.bootstrap_servers:
        options["kafka.bootstrap.servers"] = spec.bootstrap_servers
    options.update(starting_options(source))
    # Fail rather than skip when records to read were deleted by retention: a derived log with a
    # silent gap is worse than a stopped view. A view that allows partial history accepts gaps.
    options["failOnDataLoss"] = "true" if spec.fail_on_data_loss else "false"
    # Records of transactions not (yet) committed, or aborted, are never read: an upstream
    # view's output is only what its committed batches wrote.
    options["kafka.isolation.level"] = "read_committed"
    batch = spec.max_offsets_per_trigger
    if batch is None and spec.output is not None and spec.output.delivery == "ExactlyOnce":
        # An exactly-once batch passes through the driver in one transaction: bounded.
        batch = EXACTLY_ONCE_BATCH
    if batch is not None:
        # Bounds a catching-up revision's batches so each one commits, and reports progress, soon.
        options["maxOffsetsPerTrigger"] = str(batch)
    # Spark's own consumers commit nothing; naming them after the mirrored group lets broker-side
    # tools tell who they are (instead of spark-kafka-source-<uuid>).
    options["groupIdPrefix"] = f"{spec.consumer_group}.spark"
    return options


def starting_options(source: RunnerInput) -> dict[str, str]:
    """Spark's Kafka source options for where `source` starts without a checkpoint."""
    start = source.starting_position
    if start.kind == "timestamp" and start.timestamp_ms is not None:
        # A timestamp after the last record starts at the end instead of failing the query.
        return {
            "startingTimestamp": str(start.timestamp_ms),
            "startingOffsetsByTimestampStrategy": "latest",
        }
    if start.kind == "offsets" and start.offsets is not None:
        # Spark wants every partition named; -2 is its marker for "earliest".
        offsets = {str(p): start.offsets.get(p, -2) for p in range(source.partitions)}
        return {"startingOffsets": json.dumps({source.topic: offsets}, separators=(",", ":"))}
    return {"startingOffsets": "latest" if start.kind == "latest" else "earliest"}
