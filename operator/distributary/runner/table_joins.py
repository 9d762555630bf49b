"""A stream joined with a table, run by Spark (`table_joins` takes the query apart).

Both inputs are read in one streaming query and meet in `JoinRows` (a JVM operator:
`runner/jvm/JoinRows.java`), keyed by the join key: a table record puts its row under its record
key (or removes it, for a delete), an event is written with the rows its key has then (a LEFT
JOIN writes it alone when there is none). A batch's records
of a key are applied in time order (Kafka's timestamp), a table's change before an event of the
same instant, then in offset order. The rows are in the checkpoint's state, so an event is joined
and written exactly once, and a change of the table never writes an earlier event again.

Also the entry of every view that reads a table (`table_view`): a table read alone goes to
`runner/tables.py`, two tables joined to `runner/joined_tables.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as fn
from pyspark.sql.types import StructField, StructType
from sqlglot import exp

from distributary.plan.applications.runner_spec import RunnerInput, RunnerSpec
from distributary.plan.revisions.progress import CORRUPT_METRIC
from distributary.runner.joined_tables import joined_tables_view
from distributary.runner.query import (
    CORRUPT_COLUMN,
    is_corrupt,
    kafka_rows,
    metric_name,
    parse_schema,
    parsed,
)
from distributary.runner.tables import (
    TIMESTAMP,
    jvm_operator,
    output_names,
    single_table_view,
    table_rows,
)
from distributary.sql import parse_query
from distributary.table_joins import STREAM_ROW, TABLE_ROW, TableJoin, stream_table_join
from distributary.table_queries import DELETE, KEY, OFFSET, PARTITION, TABLE

SIDE = "_dtry_side"  # 0: a table's record, 1: an event (a table's change goes first)
JOINED = "_dtry_joined"


def reads_table(spec: RunnerSpec) -> bool:
    """Whether the view reads a table (the graph lets a view read one, alone or with a stream)."""
    return any(source.read == TABLE for source in spec.inputs)


def table_view(
    session: SparkSession,
    spec: RunnerSpec,
    starting: Mapping[str, RunnerInput] | None = None,
    raw: Callable[[RunnerInput], DataFrame] | None = None,
) -> DataFrame:
    """The rows of a view that reads a table, as `output_frame` writes them: a query over the
    table alone, or a stream joined with it. `starting` replaces inputs as in `start_query`;
    `raw` gives an input's Kafka rows (by default its topic's)."""
    assert spec.sql is not None
    inputs = [(starting or {}).get(s.alias or s.log, s) for s in spec.inputs]
    kafka = raw or (lambda source: kafka_rows(session, spec, source))
    read = {t.name.lower() for t in parse_query(spec.sql).find_all(exp.Table)}
    streams = [
        (i, s) for i, s in enumerate(inputs) if s.read != TABLE and _alias(s).lower() in read
    ]
    if not streams:
        tables = [
            (i, s) for i, s in enumerate(inputs) if s.read == TABLE and _alias(s).lower() in read
        ]
        if len(tables) == 2:
            return joined_tables_view(session, spec, tables, kafka)
        return single_table_view(session, spec, inputs, kafka)
    index, table = next((i, s) for i, s in enumerate(inputs) if s.read == TABLE)
    ((stream_index, stream),) = streams
    schemas = {_alias(s): _columns(s) for s in (stream, table)}
    join = stream_table_join(
        spec.sql,
        _alias(stream),
        _alias(table),
        {alias: schema.fieldNames() for alias, schema in schemas.items()},
        table.key,
    )
    events = _events(kafka(stream), stream, stream_index)
    rows = table_rows(kafka(table), table, index)
    joined = _joined(join, events, rows, schemas[_alias(stream)], schemas[_alias(table)])
    joined.createOrReplaceTempView(JOINED)
    names = output_names(session, spec.sql, schemas)
    items = ", ".join(f"{text} AS `{name}`" for text, name in zip(join.items, names, strict=True))
    where = f" WHERE {join.where}" if join.where else ""
    return session.sql(f"SELECT {items} FROM {JOINED}{where}")


def _alias(source: RunnerInput) -> str:
    return source.alias or source.log


def _columns(source: RunnerInput) -> StructType:
    return StructType([f for f in parse_schema(source).fields if f.name != CORRUPT_COLUMN])


def _events(raw: DataFrame, source: RunnerInput, index: int) -> DataFrame:
    """A stream's events: parsed rows, corrupt ones counted for the dead-letter topic."""
    rows = parsed(raw, source, "timestamp", "partition", "offset").observe(
        metric_name(source, index),
        fn.sum(fn.when(is_corrupt(), 1).otherwise(0)).alias(CORRUPT_METRIC),
    )
    columns = [c for c in parse_schema(source).fieldNames() if c != CORRUPT_COLUMN]
    return rows.where(~is_corrupt()).select(
        fn.col("timestamp").alias(TIMESTAMP),
        fn.col("partition").alias(PARTITION),
        fn.col("offset").alias(OFFSET),
        *(fn.col(f"record.`{c}`").alias(c) for c in columns),
    )


def _joined(
    join: TableJoin,
    events: DataFrame,
    rows: DataFrame,
    stream_schema: StructType,
    table_schema: StructType,
) -> DataFrame:
    """Events and table records, keyed by the join key, through `JoinRows`."""
    keys = [f"_dtry_j{i}" for i in range(len(join.stream_keys))]
    table_struct = StructType(
        [
            rows.schema[KEY],
            rows.schema[DELETE],
            *(rows.schema[c] for c in table_schema.fieldNames()),
        ]
    )
    place = (fn.col(TIMESTAMP), fn.col(PARTITION), fn.col(OFFSET))
    stream_side = events.select(
        *(fn.expr(text).alias(k) for text, k in zip(join.stream_keys, keys, strict=True)),
        fn.lit(1).alias(SIDE),
        *place,
        fn.struct(*(fn.col(f"`{c}`") for c in stream_schema.fieldNames())).alias(STREAM_ROW),
        fn.lit(None).cast(table_struct).alias(TABLE_ROW),
    )
    table_side = rows.select(
        *(fn.col(f"`{c}`").alias(k) for c, k in zip(join.table_keys, keys, strict=True)),
        fn.lit(0).alias(SIDE),
        *place,
        fn.lit(None).cast(stream_schema).alias(STREAM_ROW),
        fn.struct(KEY, DELETE, *(fn.col(f"`{c}`") for c in table_schema.fieldNames())).alias(
            TABLE_ROW
        ),
    )
    output = StructType(
        [StructField(STREAM_ROW, stream_schema), StructField(TABLE_ROW, table_schema)]
    )
    both = stream_side.unionByName(table_side)
    return jvm_operator(both, "JoinRows",
        both._jdf, keys, join.left, table_schema.json(), SIDE, TIMESTAMP, PARTITION, OFFSET,
        STREAM_ROW, TABLE_ROW, output.json(),
    )  # fmt: skip
