"""A view over a table input, run by Spark and kept exact in the query's own state.

`table_queries` takes the query apart; here it runs, as one streaming query with the checkpoint
holding all of its state (so exactly-once output, restarts and a lost checkpoint behave as for
any stateful view):

1. The table's Kafka records, tombstones included: the key's text, whether the record deletes its
   row (a tombstone, or a captured delete's `__deleted` marker), the record's columns. Records
   that do not parse are counted for the dead-letter topic as a stream's are, and change nothing.
2. The pre-projection (`TableQuery.pre_sql`), per record: what the output needs of the row, and
   whether it matches the WHERE condition.
3. `LatestRows` (a JVM operator: `runner/jvm/LatestRows.java`), keyed by the record key: each
   key's current row, in its state. A batch's records of a key are applied in their partition's
   order; what is left is compared with the row the key had. Rows: the new row is written, or a
   tombstone when the row is gone or stopped matching. Groups: the old row's contribution is
   taken back (weight -1) and the new one added (+1).
4. The groups. COUNT, and SUM and AVG of integers and decimals: Spark's own streaming
   aggregation of the weighted changes (`summed`), exact in those types. Otherwise `Groups` (a
   JVM operator: `runner/jvm/Groups.java`), keyed by the group: a count of rows; per aggregate, a
   count and an exact sum (a decimal: doubles add up without rounding until written), and for
   MIN, MAX and COUNT(DISTINCT) the count of each value, so a deleted value gives way to the next
   one. Each group a batch touched is
   written with its aggregates, or deleted when no row is left in it (a query without GROUP BY
   keeps its one group, with a count of 0).
5. The post-projection: the query's SELECT list over the groups, and HAVING as the tombstone flag.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from py4j.java_gateway import JavaPackage
from pyspark.errors.exceptions.captured import capture_sql_exception
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as fn
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    IntegralType,
    LongType,
    StructField,
    StructType,
)

from distributary.jvm_operators import JAR
from distributary.plan.applications.runner_spec import RunnerInput, RunnerSpec
from distributary.plan.revisions.progress import CORRUPT_METRIC
from distributary.runner.query import (
    CORRUPT_COLUMN,
    is_corrupt,
    metric_name,
    parse_schema,
)
from distributary.table_queries import (
    DELETE,
    DELETED,
    GONE,
    GROUPS_VIEW,
    INTERNAL,
    KEY,
    MATCH,
    OFFSET,
    PARTITION,
    TABLE,
    TableQuery,
    table_query,
)

WEIGHT = "_dtry_w"
TIMESTAMP = "_dtry_timestamp"  # a record's Kafka timestamp (`table_joins` orders by it)


def single_table_view(
    session: SparkSession,
    spec: RunnerSpec,
    inputs: Sequence[RunnerInput],
    kafka: Callable[[RunnerInput], DataFrame],
) -> DataFrame:
    """The rows of a view over one table (`table_joins.table_view` picks it): `inputs` are the
    spec's as they start, `kafka` gives an input's Kafka rows."""
    assert spec.sql is not None
    assert spec.output is not None
    index, source = next((i, s) for i, s in enumerate(inputs) if s.read == TABLE)
    alias = source.alias or source.log
    schema = parse_schema(source)
    columns = StructType([f for f in schema.fields if f.name != CORRUPT_COLUMN])
    query = table_query(spec.sql, alias, source.key, spec.output.key or (), columns.fieldNames())
    rows = table_rows(kafka(source), source, index)
    names = output_names(session, spec.sql, {alias: columns})
    return table_result(session, query, rows, names, update=spec.output.mode == "upsert")


def table_rows(raw: DataFrame, source: RunnerInput, index: int) -> DataFrame:
    """A table input's Kafka rows as its rows: `INTERNAL` columns, the record's columns (null
    for a tombstone), and its `TIMESTAMP`."""
    schema = parse_schema(source)
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}
    text = fn.col("value").cast("string")
    rows = raw.select(
        fn.col("key").cast("string").alias(KEY),
        fn.from_json(text, schema, options).alias("record"),
        fn.col("value").isNull().alias("_tombstone"),
        fn.col("partition").alias(PARTITION),
        fn.col("offset").alias(OFFSET),
        fn.col("timestamp").alias(TIMESTAMP),
    )
    counted = rows.observe(
        metric_name(source, index),
        fn.sum(fn.when(is_corrupt(), 1).otherwise(0)).alias(CORRUPT_METRIC),
    )
    columns = [c for c in schema.fieldNames() if c != CORRUPT_COLUMN]
    deleted = fn.col("_tombstone")
    if DELETED in [c.lower() for c in columns]:
        marker = next(c for c in columns if c.lower() == DELETED)
        deleted = deleted | fn.coalesce(fn.col(f"record.`{marker}`").cast("boolean"), fn.lit(False))
    # A tombstone has no value: its key columns come from its key, so that a join on them
    # finds the row it deletes.
    keyed = {k.lower() for k in source.key or ()}
    key_schema = StructType([f for f in schema.fields if f.name.lower() in keyed])
    from_key = fn.from_json(fn.col(KEY), key_schema) if keyed else None

    def column(name: str) -> Column:
        value = fn.col(f"record.`{name}`")
        if from_key is not None and name.lower() in keyed:
            value = fn.coalesce(value, from_key.getField(name))
        return value.alias(name)

    return counted.where(~fn.coalesce(is_corrupt(), fn.lit(False))).select(
        KEY,
        deleted.alias(DELETE),
        PARTITION,
        OFFSET,
        *(column(c) for c in columns),
        TIMESTAMP,
    )


def table_result(
    session: SparkSession,
    query: TableQuery,
    rows: DataFrame,
    names: Sequence[str],
    update: bool,
    weighted: bool = False,
) -> DataFrame:
    """The view's output rows (with `__deleted` for tombstones) from the table's rows `rows`,
    registered under the query's table alias; `names` are the query's output column names.
    `weighted`: `rows` are changes already (`runner/joined_tables.py`: a row added, or taken
    back when `DELETE` is set), not a table's records."""
    rows.createOrReplaceTempView(query.table)
    pre = session.sql(query.pre_sql)
    values = [c for c in pre.columns if c not in (*INTERNAL, MATCH)]
    state = StructType([f for f in pre.schema.fields if f.name in values])
    mode = "Update" if update else "Append"
    if not query.grouping:  # a selected `__deleted` is left to the runner (`table_queries`)
        kept = [name for name in names if name.lower() != DELETED]
        if weighted:
            rows_out = net_rows(pre, values, state, mode)
        else:
            rows_out = latest_rows(pre, values, state, weighted=False, mode=mode)
        return rows_out.toDF(*kept, DELETED)
    if weighted:
        weight = fn.when(fn.col(DELETE), fn.lit(-1)).otherwise(fn.lit(1)).cast(LongType())
        changes = pre.where(fn.col(MATCH)).select(*values, weight.alias(WEIGHT))
    else:
        changes = latest_rows(pre, values, state, weighted=True, mode="Append")
    result = aggregate_types(session, state, query)
    schema = StructType(
        [
            *(state[g] for g in query.groups),
            *(StructField(a.column, result[a.column]) for a in query.aggregates),
            StructField(GONE, BooleanType()),
        ]
    )
    if summable(query, state):
        grouped = summed(changes, query, result)
    else:
        grouped = groups(changes, query, result, schema, mode)
    grouped.createOrReplaceTempView(GROUPS_VIEW)
    having = f"COALESCE(({query.having}), FALSE)" if query.having else "TRUE"
    gone = [GONE, f"NOT {having}"]
    items = []
    for text, name in zip(query.post, names, strict=True):
        if name.lower() == DELETED:  # the query's own deletion marker deletes its groups too
            gone.append(f"COALESCE(CAST(({text}) AS BOOLEAN), FALSE)")
        else:
            items.append(f"{text} AS `{name}`")
    deleted = f"({' OR '.join(gone)}) AS {DELETED}"
    return session.sql(f"SELECT {', '.join(items)}, {deleted} FROM {GROUPS_VIEW}")


def summable(query: TableQuery, state: StructType) -> bool:
    """Whether Spark's own streaming aggregation keeps the groups exact: COUNT, and SUM and AVG
    of integers and decimals (their sums of weighted values are exact; a double's are not)."""
    types = {f.name: f.dataType for f in state.fields}
    return all(
        a.function == "count"
        or (
            a.function in ("sum", "avg")
            and isinstance(types[str(a.argument)], IntegralType | DecimalType)
        )
        for a in query.aggregates
    )


def summed(changes: DataFrame, query: TableQuery, result: Mapping[str, DataType]) -> DataFrame:
    """The groups by Spark's streaming aggregation (update mode) over the weighted changes: per
    group the weights' sum (its rows), and per aggregate the weights of its non-null arguments
    and the sum of each argument times its weight; each changed group's aggregates from those,
    typed and rounded as Spark's own COUNT, SUM and AVG are. A group left without rows stays in
    Spark's state (at zero), and its row is deleted from the output."""
    weight = fn.col(WEIGHT)
    sums = [fn.sum(weight).alias("_dtry_rows")]
    for index, a in enumerate(query.aggregates):
        if a.argument is None:
            continue
        present = fn.col(f"`{a.argument}`").isNotNull()
        sums.append(fn.sum(fn.when(present, weight).otherwise(0)).alias(f"_dtry_n{index}"))
        if a.function != "count":
            sums.append(fn.sum(fn.col(f"`{a.argument}`") * weight).alias(f"_dtry_s{index}"))
    totals = changes.groupBy(*query.groups).agg(*sums)
    columns = [fn.col(g) for g in query.groups]
    for index, a in enumerate(query.aggregates):
        kind = result[a.column]
        if a.argument is None:
            value = fn.col("_dtry_rows")
        elif a.function == "count":
            value = fn.col(f"_dtry_n{index}")
        else:
            count, total = fn.col(f"_dtry_n{index}"), fn.col(f"_dtry_s{index}")
            value = total if a.function == "sum" else _average(total, count, kind)
            value = fn.when(count > 0, value.cast(kind))
        columns.append(value.cast(kind).alias(a.column))
    gone = fn.lit(False) if query.global_group else fn.col("_dtry_rows") <= 0
    return totals.select(*columns, gone.alias(GONE))


def _average(total: Column, count: Column, kind: DataType) -> Column:
    """AVG as Spark computes it: a decimal's sum over the count as a DECIMAL(20,0), cast to the
    average's type (rounded half up); an integer's as doubles."""
    if isinstance(kind, DecimalType):
        return total / count.cast(DecimalType(20, 0))
    return total.cast(DoubleType()) / count.cast(DoubleType())


def output_names(session: SparkSession, sql: str, schemas: Mapping[str, StructType]) -> list[str]:
    """The query's output column names as Spark names them, from the query over empty tables of
    the inputs' columns (`schemas`, by alias)."""
    spark = session.newSession()
    for alias, schema in schemas.items():
        spark.createDataFrame([], schema).createOrReplaceTempView(alias)
    return spark.sql(sql).columns


def aggregate_types(
    session: SparkSession, state: StructType, query: TableQuery
) -> dict[str, DataType]:
    """Each aggregate's result type as Spark gives it (SUM of an INT is a BIGINT, AVG of a
    DECIMAL(10,2) a DECIMAL(14,6), ...)."""
    frame = session.newSession().createDataFrame([], state)
    calls = []
    for aggregate in query.aggregates:
        argument = fn.col(aggregate.argument) if aggregate.argument else fn.lit(1)
        call = {
            "count": fn.count,
            "count_distinct": fn.count_distinct,
            "sum": fn.sum,
            "avg": fn.avg,
            "min": fn.min,
            "max": fn.max,
        }[aggregate.function](argument)
        calls.append(call.alias(aggregate.column))
    fields = frame.groupBy(*query.groups).agg(*calls).schema.fields
    return {f.name: f.dataType for f in fields if f.name not in query.groups}


def latest_rows(
    pre: DataFrame, values: Sequence[str], state: StructType, weighted: bool, mode: str
) -> DataFrame:
    """The rows by record key (`runner/jvm/LatestRows.java`): per key of `pre`'s `KEY`, the row
    it has (its `values`, of types `state`, while it matches the WHERE condition), and what a
    batch changed of it. Weighted: the old row taken back (`WEIGHT` -1) and the new one added
    (+1); else the new row, or the old one with `DELETED` set when none is left."""
    last = StructField(WEIGHT, LongType()) if weighted else StructField(DELETED, BooleanType())
    output = StructType([*state.fields, last])
    return jvm_operator(pre, "LatestRows",
        pre._jdf, KEY, list(values), DELETE, MATCH, PARTITION, OFFSET,
        state.json(), output.json(), weighted, mode,
    )  # fmt: skip


def net_rows(changes: DataFrame, values: Sequence[str], state: StructType, mode: str) -> DataFrame:
    """The rows by identity (`KEY`) from weighted changes (`runner/jvm/NetRows.java`): each
    changed row, or the old one with `DELETED` set when none is left."""
    output = StructType([*state.fields, StructField(DELETED, BooleanType())])
    return jvm_operator(changes, "NetRows",
        changes._jdf, KEY, list(values), DELETE, MATCH, state.json(), output.json(), mode,
    )  # fmt: skip


def groups(
    changes: DataFrame,
    query: TableQuery,
    result: Mapping[str, DataType],
    output: StructType,
    mode: str,
) -> DataFrame:
    """The groups of weighted changes, kept exact (`runner/jvm/Groups.java`; see the module)."""
    aggregates = query.aggregates
    return jvm_operator(changes, "Groups",
        changes._jdf, list(query.groups), query.global_group, [a.function for a in aggregates],
        [a.argument or "" for a in aggregates], [result[a.column].json() for a in aggregates],
        WEIGHT, output.json(), mode,
    )  # fmt: skip


def jvm_operator(frame: DataFrame, name: str, *arguments: Any) -> DataFrame:
    """The rows of JVM operator `name` (`runner/jvm/`, in package `dev.distributary.tables`)
    applied with `arguments`, in `frame`'s session."""
    session = frame.sparkSession
    operator = getattr(session._jvm.dev.distributary.tables, name)  # type: ignore[union-attr]
    if isinstance(operator, JavaPackage):  # py4j's answer for a class it cannot find
        raise RuntimeError(
            f"Distributary's JVM operators are not among Spark's jars ({JAR} in spark.jars or in "
            "Spark's jars folder): a view over a table needs them; on this machine, install a "
            "JDK (javac) so that the runner's jar is built, or use the job image"
        )
    # Spark's errors as pyspark raises them (an AnalysisException, ...), not py4j's.
    return DataFrame(capture_sql_exception(operator.apply)(*arguments), session)
