"""One view revision as a Spark streaming query: Kafka in, parse, SQL, Kafka out.

Records that do not parse must reach the dead-letter topic without slowing the records that do.
The query therefore reads each input once: a Kafka source, `from_json` in PERMISSIVE mode with a
corrupt-record column, and `observe` counting the corrupt rows of each micro-batch. Only parsed
rows reach the SQL, and the output goes to Kafka through Spark's own sink. The (rare) corrupt rows
are fetched again afterwards from the batch's offset range by `dead_letters.py`, so the common
case is a single pass, as fast as a hand-written query.

Each revision runs in its own Spark session (`newSession`): its aliases are temporary views there,
so two views may use the same alias in one application, and its SQL settings (shuffle partitions)
are its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from py4j.java_gateway import JavaPackage
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as fn
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter
from pyspark.sql.types import StructType

from distributary.graph import DELETED_COLUMN
from distributary.kafka.connection import spark_options
from distributary.plan.applications.runner_spec import (
    CHECKPOINT_FILES,
    LOCAL_CHECKPOINT_FILES,
    SPARK_LOCAL_CHECKPOINT_FILES,
    SQL_SETTING,
    RunnerInput,
    RunnerSpec,
    kafka_source_options,
)
from distributary.plan.revisions.progress import CORRUPT_METRIC

CORRUPT_COLUMN = "_distributary_corrupt"
_UNIT = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours"}


def revision_session(spark: SparkSession, spec: RunnerSpec) -> SparkSession:
    """A session of its own for `spec`, with the spec's runtime SQL settings."""
    session = spark.newSession()
    for key, value in spec.spark_conf.items():
        if key == CHECKPOINT_FILES:
            value = checkpoint_files(spark, value)
        if key.startswith(SQL_SETTING):
            session.conf.set(key, value)
    return session


def checkpoint_files(spark: SparkSession, manager: str) -> str:
    """The checkpoint file manager the revision gets: Distributary's local one only where this
    JVM has it (the operators' jar in spark.jars or in Spark's jars); Spark's FileSystem-based
    one otherwise, which writes the same files, starting a process for each."""
    if manager != LOCAL_CHECKPOINT_FILES:
        return manager
    found = spark._jvm.dev.distributary.checkpoints.LocalCheckpointFiles  # type: ignore[union-attr]
    return SPARK_LOCAL_CHECKPOINT_FILES if isinstance(found, JavaPackage) else manager


def parse_schema(source: RunnerInput) -> StructType:
    """The input's declared schema plus the corrupt-record column."""
    if not source.schema_ddl:
        raise ValueError(
            f"input {source.alias or source.log} (log {source.log}) has no schema, so its records "
            "cannot be parsed: declare spec.schema on the Log"
        )
    schema = StructType.fromDDL(f"{source.schema_ddl}, `{CORRUPT_COLUMN}` STRING")
    assert isinstance(schema, StructType)
    return schema


def parsed(raw: DataFrame, source: RunnerInput, *keep: str) -> DataFrame:
    """Kafka rows with their value parsed as `record` (and as text, `_text`), with the columns
    `keep` of the Kafka row; tombstones (null values) are skipped, not errors."""
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}
    text = fn.col("value").cast("string")
    return raw.where(fn.col("value").isNotNull()).select(
        fn.from_json(text, parse_schema(source), options).alias("record"),
        text.alias("_text"),
        *keep,
    )


def metric_name(source: RunnerInput, index: int) -> str:
    """The observed metric of one input, e.g. `dead_letters_0_views`."""
    label = re.sub(r"[^A-Za-z0-9_]", "_", source.alias or source.log)
    return f"{CORRUPT_METRIC}_{index}_{label}"


def is_corrupt() -> Column:
    """True for a parsed row whose value did not match the schema."""
    return fn.col(f"record.{CORRUPT_COLUMN}").isNotNull()


def input_frame(
    session: SparkSession, spec: RunnerSpec, source: RunnerInput, index: int
) -> DataFrame:
    """One input as the SQL sees it: parsed rows only, with the corrupt ones counted, and its
    watermark when it declares one."""
    return input_rows(kafka_rows(session, spec, source), source, index)


def kafka_rows(session: SparkSession, spec: RunnerSpec, source: RunnerInput) -> DataFrame:
    """An input's records as Spark's Kafka source gives them."""
    reader = session.readStream.format("kafka")
    options = {**kafka_source_options(spec, source), **spark_options(spec.kafka_security)}
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def input_rows(raw: DataFrame, source: RunnerInput, index: int) -> DataFrame:
    """What `input_frame` makes of an input's Kafka rows `raw` (any frame with Kafka's columns:
    `analysis.py` gives it an empty stream, to have Spark check a query as the runner runs it)."""
    rows = parsed(raw, source)
    counted = rows.observe(
        metric_name(source, index),
        fn.sum(fn.when(is_corrupt(), 1).otherwise(0)).alias(CORRUPT_METRIC),
    )
    columns = [c for c in parse_schema(source).fieldNames() if c != CORRUPT_COLUMN]
    frame = counted.where(~is_corrupt()).select(*(fn.col(f"record.`{c}`") for c in columns))
    if source.watermark is None:
        return frame
    # Aggregations and joins over this input drop records older than the watermark and the
    # state of windows it has passed; in append mode a window is written once, then.
    return frame.withWatermark(source.watermark.column, f"{source.watermark.delay_ms} milliseconds")


def output_frame(result: DataFrame, spec: RunnerSpec) -> DataFrame:
    """The SQL's rows as Kafka records: a JSON key of the key columns, the row as a JSON value;
    an upsert row marked deleted becomes a tombstone."""
    assert spec.output is not None
    fields = [c for c in result.columns if c != DELETED_COLUMN]
    value = fn.to_json(fn.struct(*(fn.col(f"`{c}`") for c in fields)))
    if spec.output.mode == "upsert" and DELETED_COLUMN in result.columns:
        deleted = fn.coalesce(fn.col(DELETED_COLUMN).cast("boolean"), fn.lit(False))
        value = fn.when(deleted, fn.lit(None).cast("string")).otherwise(value)
    key = (
        fn.to_json(fn.struct(*(fn.col(f"`{k}`") for k in spec.output.key)))
        if spec.output.key
        else fn.lit(None).cast("string")
    )
    return result.select(key.alias("key"), value.alias("value"))


def output_mode(spec: RunnerSpec) -> str:
    """Spark's output mode of a view: `update` for an upsert view (each changed row of a table),
    `append` for an event stream."""
    return "update" if spec.output is not None and spec.output.mode == "upsert" else "append"


def trigger(writer: DataStreamWriter, value: str) -> DataStreamWriter:
    """Apply a spec trigger: `AvailableNow`, or an interval such as `500ms` or `5s`."""
    if value == "AvailableNow":
        return writer.trigger(availableNow=True)
    match = re.fullmatch(r"(\d+)(ms|s|m|h)", value)
    if match is None:
        raise ValueError(f"trigger {value!r} is not AvailableNow or an interval such as 5s")
    return writer.trigger(processingTime=f"{match.group(1)} {_UNIT[match.group(2)]}")


def start_query(
    session: SparkSession,
    spec: RunnerSpec,
    starting: Mapping[str, RunnerInput] | None = None,
    sink: Callable[[DataFrame, int], None] | None = None,
    result: DataFrame | None = None,
) -> StreamingQuery:
    """Start the streaming query of `spec`; `starting` replaces inputs (by alias) whose starting
    position the runner decided (a fresh checkpoint starts from the group's committed offsets).
    With `sink`, each micro-batch goes to it (`foreachBatch`: the exactly-once output) instead
    of Spark's Kafka sink. `result` is the view's rows when the caller made them (a view over a
    table: `table_joins.table_view`); else the SQL runs over the inputs as streams."""
    if spec.output is None or spec.sql is None:
        raise ValueError(f"{spec.kind} {spec.namespace}/{spec.name}: the spec has no SQL or output")
    if result is None:
        for index, source in enumerate(spec.inputs):
            chosen = (starting or {}).get(source.alias or source.log, source)
            input_frame(session, spec, chosen, index).createOrReplaceTempView(
                source.alias or source.log
            )
        result = session.sql(spec.sql)
    records = output_frame(result, spec)
    writer = (
        records.writeStream.queryName(f"{spec.namespace}.{spec.name}.r{spec.revision}")
        .option("checkpointLocation", spec.checkpoint_location)
        .outputMode(output_mode(spec))
    )
    if sink is not None:
        writer = writer.foreachBatch(sink)
    else:
        writer = writer.format("kafka").option("topic", spec.output.topic)
        if spec.bootstrap_servers:
            writer = writer.option("kafka.bootstrap.servers", spec.bootstrap_servers)
        for key, value in spark_options(spec.kafka_security).items():
            writer = writer.option(key, value)
    return trigger(writer, spec.trigger).start()
