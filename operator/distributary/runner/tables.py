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
   aggregation of the weighted changes (`summed`), exact in those types. Otherwise `Groups`,
   keyed by the group: a count of rows; per aggregate, a count and an exact sum (a fraction:
   doubles add up without rounding until written), and for MIN, MAX and COUNT(DISTINCT) the count
   of each value, so a deleted value gives way to the next one. Each group a batch touched is
   written with its aggregates, or deleted when no row is left in it (a query without GROUP BY
   keeps its one group, with a count of 0).
5. The post-projection: the query's SELECT list over the groups, and HAVING as the tombstone flag.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import ROUND_HALF_UP, Context, Decimal
from fractions import Fraction
from typing import Any

from py4j.java_gateway import JavaPackage
from pyspark.errors.exceptions.captured import capture_sql_exception
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as fn
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegralType,
    LongType,
    StringType,
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
    Aggregate,
    TableQuery,
    table_query,
)

WEIGHT = "_dtry_w"
TIMESTAMP = "_dtry_timestamp"  # a record's Kafka timestamp (`table_joins` orders by it)
_VALUES = ("min", "max", "count_distinct")  # kept as counts of each value
_PRECISION = 100  # digits of a decimal quotient before it is rounded to its scale (38 at most)


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
        output = StructType([*state.fields, StructField(DELETED, BooleanType())])
        kept = [name for name in names if name.lower() != DELETED]
        if weighted:
            rows_out = pre.groupBy(KEY).transformWithState(
                NetRows(values, state), output, mode, "None"
            )
        else:
            rows_out = latest_rows(pre, values, state, weighted=False, mode=mode)
        return rows_out.toDF(*kept, DELETED)
    if weighted:
        weight = fn.when(fn.col(DELETE), fn.lit(-1)).otherwise(fn.lit(1)).cast(LongType())
        changes = pre.where(fn.col(MATCH)).select(*values, weight.alias(WEIGHT))
    else:
        changes = latest_rows(pre, values, state, weighted=True, mode="Append")
    result = aggregate_types(session, state, query)
    groups = StructType(
        [
            *(f for f in state.fields if f.name in query.groups),
            *(StructField(a.column, result[a.column]) for a in query.aggregates),
            StructField(GONE, BooleanType()),
        ]
    )
    if summable(query, state):
        grouped = summed(changes, query, result)
    else:
        processor = Groups(query, state, result)
        grouped = changes.groupBy(*query.groups).transformWithState(processor, groups, mode, "None")
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
    """The rows by record key (`runner/jvm/LatestRows.java`, a JVM operator): per key of `pre`'s
    `KEY`, the row it has (its `values`, of types `state`, while it matches the WHERE condition),
    and what a batch changed of it. Weighted: the old row taken back (`WEIGHT` -1) and the new one
    added (+1); else the new row, or the old one with `DELETED` set when none is left."""
    session = pre.sparkSession
    last = StructField(WEIGHT, LongType()) if weighted else StructField(DELETED, BooleanType())
    output = StructType([*state.fields, last])
    operator = session._jvm.dev.distributary.tables.LatestRows  # type: ignore[union-attr]
    if isinstance(operator, JavaPackage):  # py4j's answer for a class it cannot find
        raise RuntimeError(
            f"Distributary's JVM operators are not among Spark's jars ({JAR} in spark.jars or in "
            "Spark's jars folder): a view over a table needs them; on this machine, install a "
            "JDK (javac) so that the runner's jar is built, or use the job image"
        )
    # Spark's errors as pyspark raises them (an AnalysisException, ...), not py4j's.
    rows = capture_sql_exception(operator.apply)(
        pre._jdf, KEY, list(values), DELETE, MATCH, PARTITION, OFFSET,
        state.json(), output.json(), weighted, mode,
    )  # fmt: skip
    return DataFrame(rows, session)


class NetRows(StatefulProcessor):
    """Per output row's identity: the row it has, from weighted changes (a row added, or taken
    back when `DELETE` is set) rather than records; in any order, as weights add up."""

    def __init__(self, values: Sequence[str], state: StructType) -> None:
        self.values, self.schema = list(values), state

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.row = handle.getValueState("row", self.schema)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:  # noqa: N802, N803 (Spark's names)
        stored = self.row.get() if self.row.exists() else None
        old = tuple(stored) if stored is not None else None
        new = self.after(key, old, rows)
        if new == old:
            return
        if new is None:
            self.row.clear()
        else:
            self.row.update(new)
        names = [*self.values, DELETED]
        yield from (Row(**dict(zip(names, r, strict=True))) for r in changes(old, new))

    def after(self, key: Any, old: tuple[Any, ...] | None, rows: Iterator[Row]) -> Any:
        """The row after a batch's weighted changes `rows`."""
        counts: Counter[tuple[Any, ...]] = Counter({old: 1} if old is not None else {})
        for row in rows:
            if row[MATCH]:
                counts[tuple(row[v] for v in self.values)] += -1 if row[DELETE] else 1
        present = [row for row, count in counts.items() if count > 0]
        if len(present) > 1 or any(count > 1 for count in counts.values()):
            raise RuntimeError(
                f"the join's row {key!r} has {sum(c for c in counts.values() if c > 0)} versions "
                "at once; the view's state is not what its input implies: rebuild the view"
            )
        return present[0] if present else None

    def close(self) -> None:
        """Nothing to release."""


def changes(old: tuple[Any, ...] | None, new: tuple[Any, ...] | None) -> list[tuple[Any, ...]]:
    """What a row's change from `old` to `new` writes: the new row, or the old one as a
    tombstone when none is left."""
    if new is not None:
        return [(*new, False)]
    return [(*old, True)] if old is not None else []


class Groups(StatefulProcessor):
    """Per group: its aggregates, kept exact as rows join and leave it (see the module)."""

    def __init__(self, query: TableQuery, state: StructType, result: dict[str, DataType]) -> None:
        self.query, self.result = query, result
        self.types = {f.name: f.dataType for f in state.fields}
        self.columns = [f.name for f in state.fields]

    def init(self, handle: StatefulProcessorHandle) -> None:
        fields = [StructField("rows", LongType())]
        for index in range(len(self.query.aggregates)):
            fields += [StructField(f"n{index}", LongType()), StructField(f"s{index}", StringType())]
        self.totals = handle.getValueState("totals", StructType(fields))
        self.values = {
            index: handle.getMapState(
                f"values{index}",
                StructType([StructField("v", self.types[str(a.argument)])]),
                StructType([StructField("c", LongType())]),
            )
            for index, a in enumerate(self.query.aggregates)
            if a.function in _VALUES
        }

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:  # noqa: N802, N803 (Spark's names)
        count = len(self.query.aggregates)
        totals = Totals.read(self.totals.get() if self.totals.exists() else None, count)
        for row in rows:
            weight = int(row[WEIGHT])
            totals.rows += weight
            for index, aggregate in enumerate(self.query.aggregates):
                value = row[aggregate.argument] if aggregate.argument else 1
                if value is None:
                    continue
                totals.add(index, aggregate, value, weight)
                if index in self.values:
                    _count_value(self.values[index], value, weight)
        gone = totals.rows <= 0 and not self.query.global_group
        if gone:
            self.totals.clear()
            for state in self.values.values():
                state.clear()
        else:
            self.totals.update(totals.written())
        results = [
            None if gone else self._result(index, aggregate, totals)
            for index, aggregate in enumerate(self.query.aggregates)
        ]
        names = [*self.query.groups, *(a.column for a in self.query.aggregates), GONE]
        yield Row(**dict(zip(names, [*key, *results, gone], strict=True)))

    def _result(self, index: int, aggregate: Aggregate, totals: Totals) -> Any:
        kind = self.result[aggregate.column]
        if aggregate.function == "count":
            return totals.counts[index]
        if aggregate.function in _VALUES:
            present = [k[0] for k, _ in self.values[index].iterator()]
            if aggregate.function == "count_distinct":
                return len(present)
            if not present:
                return None
            return min(present) if aggregate.function == "min" else max(present)
        if totals.counts[index] == 0:
            return None
        exact = totals.sums[index]
        return typed(exact if aggregate.function == "sum" else exact / totals.counts[index], kind)

    def close(self) -> None:
        """Nothing to release."""


def _count_value(state: Any, value: Any, weight: int) -> None:
    key = (value,)
    count = (state.getValue(key)[0] if state.containsKey(key) else 0) + weight
    if count > 0:
        state.updateValue(key, (count,))
    elif state.containsKey(key):
        state.removeKey(key)


class Totals:
    """A group's counts and exact sums, as its state holds them (sums as fraction text)."""

    def __init__(self, rows: int, counts: list[int], sums: list[Fraction]) -> None:
        self.rows, self.counts, self.sums = rows, counts, sums

    @classmethod
    def read(cls, stored: Any, aggregates: int) -> Totals:
        """From the state's row (None: a new group)."""
        if stored is None:
            return cls(0, [0] * aggregates, [Fraction(0)] * aggregates)
        counts = [int(stored[1 + 2 * i] or 0) for i in range(aggregates)]
        sums = [Fraction(stored[2 + 2 * i] or "0") for i in range(aggregates)]
        return cls(int(stored[0] or 0), counts, sums)

    def add(self, index: int, aggregate: Aggregate, value: Any, weight: int) -> None:
        """A row's non-null argument joins (weight 1) or leaves (-1) aggregate `index`."""
        self.counts[index] += weight
        if aggregate.function in ("sum", "avg"):
            self.sums[index] += weight * Fraction(value)

    def written(self) -> tuple[Any, ...]:
        """The state's row."""
        parts: list[Any] = [self.rows]
        for count, total in zip(self.counts, self.sums, strict=True):
            parts += [count, str(total)]
        return tuple(parts)


def typed(value: Fraction, kind: DataType) -> Any:
    """An exact value as a column of type `kind`: a double rounded once, a decimal to its scale
    (half up, as Spark rounds), an integer as is."""
    if isinstance(kind, DoubleType | FloatType):
        return float(value)
    if isinstance(kind, DecimalType):
        context = Context(prec=_PRECISION)
        exact = context.divide(Decimal(value.numerator), Decimal(value.denominator))
        return exact.quantize(Decimal(1).scaleb(-kind.scale), rounding=ROUND_HALF_UP)
    return int(value)
