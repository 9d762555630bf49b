"""The dead-letter topic: records of an offset range that do not match their log's schema.

The streaming query only counts unparseable records (see `query.py`); this module fetches them
again, with a batch read of exactly the range the count came from, and appends each to the view's
dead-letter topic unchanged (same key, same value) with headers that say where it came from and
what is wrong with it, naming the field where one field is at fault. It runs on the rare batches
that had such records, and for ranges a crashed run processed without checking.
"""

from __future__ import annotations

import json

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as fn
from pyspark.sql.types import StructField, StructType

from distributary.kafka.connection import spark_options
from distributary.plan.applications.runner_spec import RunnerInput, RunnerSpec, kafka_source_options
from distributary.plan.revisions.positions import Offsets
from distributary.runner.query import CORRUPT_COLUMN, is_corrupt, parse_schema, parsed

WRITER_HEADER = {"DerivedView": "distributary.view", "StreamJob": "distributary.job"}


def _range_options(
    spec: RunnerSpec, source: RunnerInput, start: Offsets, end: Offsets
) -> dict[str, str]:
    ends = end.get(source.topic, {})
    options = {
        k: v
        for k, v in kafka_source_options(spec, source).items()
        if k in ("kafka.bootstrap.servers", "failOnDataLoss", "kafka.isolation.level")
        or (not start and k.startswith("starting"))
    }
    options.update(spark_options(spec.kafka_security))
    options["assign"] = json.dumps({source.topic: sorted(ends)})
    if start:
        # A partition the committed position does not name was read from its beginning.
        begins = start.get(source.topic, {})
        options["startingOffsets"] = json.dumps(
            {source.topic: {str(p): begins.get(p, -2) for p in sorted(ends)}}
        )
    elif options.get("startingOffsets") not in (None, "earliest", "latest"):
        # The query's own starting offsets may name partitions outside this range.
        named = json.loads(options["startingOffsets"]).get(source.topic, {})
        options["startingOffsets"] = json.dumps(
            {source.topic: {str(p): named.get(str(p), -2) for p in sorted(ends)}}
        )
    options["endingOffsets"] = json.dumps(
        {source.topic: {str(p): o for p, o in sorted(ends.items())}}
    )
    return options


def _field_at_fault(source: RunnerInput) -> Column:
    """The first field whose value does not have its declared type, or null."""
    checks = []
    text = fn.col("_text")
    for field in parse_schema(source).fields:
        if field.name == CORRUPT_COLUMN:
            continue
        alone = StructType(
            [field, StructField(CORRUPT_COLUMN, parse_schema(source)[CORRUPT_COLUMN].dataType)]
        )
        options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}
        bad = fn.from_json(text, alone, options)[CORRUPT_COLUMN].isNotNull()
        checks.append(
            fn.when(
                bad,
                fn.lit(f"field {field.name}: not a valid {field.dataType.simpleString().upper()}"),
            )
        )
    return fn.coalesce(*checks) if checks else fn.lit(None).cast("string")


def _error(source: RunnerInput) -> Column:
    text = fn.col("_text")
    return (
        fn.when(fn.expr("try_parse_json(_text)").isNull(), fn.lit("not valid JSON"))
        .when(~fn.ltrim(text).startswith("{"), fn.lit("not a JSON object"))
        .otherwise(fn.coalesce(_field_at_fault(source), fn.lit("does not match the log's schema")))
    )


def _header(key: str, value: Column) -> Column:
    return fn.struct(fn.lit(key).alias("key"), value.cast("string").cast("binary").alias("value"))


def dead_letter_frame(raw: DataFrame, spec: RunnerSpec, source: RunnerInput) -> DataFrame:
    """The unparseable records of `raw` as dead-letter records: original key and value, with
    headers naming the error, the source position and the view's (or job's) revision."""
    bad = parsed(raw, source, "key", "value", "topic", "partition", "offset").where(is_corrupt())
    headers = fn.array(
        _header("distributary.error", fn.concat(fn.lit(f"{source.log}: "), _error(source))),
        _header("distributary.source.topic", fn.col("topic")),
        _header("distributary.source.partition", fn.col("partition")),
        _header("distributary.source.offset", fn.col("offset")),
        # Who could not parse it: `distributary.view`, or for a StreamJob `distributary.job`.
        _header(WRITER_HEADER[spec.kind], fn.lit(f"{spec.namespace}/{spec.name}")),
        _header("distributary.revision", fn.lit(str(spec.revision))),
    )
    return bad.select("key", "value", headers.alias("headers"))


def dead_letter_frames(
    session: SparkSession, spec: RunnerSpec, start: Offsets, end: Offsets
) -> list[DataFrame]:
    """The dead letters of each input between `start` and `end` (a batch read of the range); an
    empty `start` means from the query's starting position."""
    frames = []
    for source in spec.inputs:
        if not end.get(source.topic):
            continue
        reader = session.read.format("kafka")
        for key, value in _range_options(spec, source, start, end).items():
            reader = reader.option(key, value)
        frames.append(dead_letter_frame(reader.load(), spec, source))
    return frames


def send_dead_letters(session: SparkSession, spec: RunnerSpec, start: Offsets, end: Offsets) -> int:
    """Append the unparseable records between `start` and `end` to the dead-letter topic with
    Spark's Kafka sink (at least once) and return how many there were."""
    sent = 0
    for frame in dead_letter_frames(session, spec, start, end):
        letters = frame.persist()
        try:
            count = letters.count()
            if count:
                writer = letters.write.format("kafka").option("topic", spec.dead_letter_topic)
                if spec.bootstrap_servers:
                    writer = writer.option("kafka.bootstrap.servers", spec.bootstrap_servers)
                for key, value in spark_options(spec.kafka_security).items():
                    writer = writer.option(key, value)
                writer.save()
            sent += count
        finally:
            letters.unpersist()
    return sent
