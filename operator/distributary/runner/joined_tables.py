"""Two tables joined, run by Spark (`joined_tables` takes the query apart).

One streaming query, all of its state in the checkpoint:

1. Each table's records (`tables.table_rows`) through `LatestRows` (`tables.latest_rows`), keyed
   by the record key: a row's change as its old version taken back (weight -1) and its new one
   added (+1), so that a row that moves to another join key leaves the old one.
2. Both sides' changes in `JoinTables`, keyed by the join key: the rows of each side under that
   key, by record key. A batch's changes of a join key are applied, and the pairs they touch are
   compared before and after: a pair that no longer holds is written taken back, a new or changed
   pair added. Changes of the second table touch every row of the first under the key (and, for
   a LEFT JOIN, its row without a partner); changes of the first only its own rows. Weights add
   up in any order, so the batch's order within a key does not matter.
3. The pairs are the join's rows (`JOINED`): the view's query over them as over one table
   (`tables.table_result`, weighted: selected rows through `NetRows`, groups by their weights).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as fn
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from distributary.joined_tables import JoinedTables, flat, joined_tables
from distributary.plan.applications.runner_spec import RunnerInput, RunnerSpec
from distributary.runner.query import CORRUPT_COLUMN, parse_schema
from distributary.runner.tables import (
    WEIGHT,
    latest_rows,
    output_names,
    table_result,
    table_rows,
)
from distributary.table_queries import DELETE, KEY, MATCH, OFFSET, PARTITION

SIDE = "_dtry_side"  # 0: the first table's change, 1: the second's
ROWS = ("_dtry_r0", "_dtry_r1")  # each side's row (its record key and columns), null for the other


def joined_tables_view(
    session: SparkSession,
    spec: RunnerSpec,
    tables: Sequence[tuple[int, RunnerInput]],
    kafka: Callable[[RunnerInput], DataFrame],
) -> DataFrame:
    """The rows of a view over a join of two tables (`tables`: their index among the spec's
    inputs and the input as it starts); `kafka` gives an input's Kafka rows."""
    assert spec.sql is not None
    assert spec.output is not None
    by_alias = {_alias(source): (index, source) for index, source in tables}
    schemas = {alias: _columns(source) for alias, (_, source) in by_alias.items()}
    join = joined_tables(
        spec.sql,
        list(by_alias),
        {alias: schema.fieldNames() for alias, schema in schemas.items()},
        {alias: source.key or () for alias, (_, source) in by_alias.items()},
        spec.output.key or (),
    )
    sides = []
    for alias in (join.first, join.second):
        index, source = by_alias[alias]
        sides.append(_changes(table_rows(kafka(source), source, index), schemas[alias]))
    pairs = _pairs(join, sides, [schemas[join.first], schemas[join.second]])
    names = output_names(session, spec.sql, schemas)
    return table_result(
        session, join.query, pairs, names, update=spec.output.mode == "upsert", weighted=True
    )


def _alias(source: RunnerInput) -> str:
    return source.alias or source.log


def _columns(source: RunnerInput) -> StructType:
    return StructType([f for f in parse_schema(source).fields if f.name != CORRUPT_COLUMN])


def _changes(rows: DataFrame, columns: StructType) -> DataFrame:
    """A table's records as weighted changes of its rows (record key and columns)."""
    values = [KEY, *columns.fieldNames()]
    state = StructType([rows.schema[KEY], *columns.fields])
    marked = rows.withColumn(MATCH, fn.lit(True))
    return latest_rows(marked, values, state, weighted=True, mode="Append")


def _pairs(
    join: JoinedTables, sides: Sequence[DataFrame], schemas: Sequence[StructType]
) -> DataFrame:
    """Both sides' changes, keyed by the join key, through `JoinTables`: the join's rows."""
    keys = [f"_dtry_j{i}" for i in range(len(join.first_keys))]
    structs = [StructType([StructField(KEY, StringType()), *s.fields]) for s in schemas]
    parts = []
    texts_of = (join.first_keys, join.second_keys)
    for number, (changes, texts) in enumerate(zip(sides, texts_of, strict=True)):
        own = fn.struct(KEY, *(fn.col(f"`{c}`") for c in schemas[number].fieldNames()))
        rows = [
            own.alias(ROWS[n]) if n == number else fn.lit(None).cast(structs[n]).alias(ROWS[n])
            for n in (0, 1)
        ]
        parts.append(
            changes.select(
                *(fn.expr(text).alias(k) for text, k in zip(texts, keys, strict=True)),
                fn.lit(number).alias(SIDE),
                *rows,
                WEIGHT,
            )
        )
    columns = [
        StructField(flat(alias, f.name), f.dataType)
        for alias, schema in zip((join.first, join.second), schemas, strict=True)
        for f in schema.fields
    ]
    output = StructType(
        [
            StructField(KEY, StringType()),
            StructField(DELETE, BooleanType()),
            StructField(PARTITION, IntegerType()),
            StructField(OFFSET, LongType()),
            *columns,
        ]
    )
    processor = JoinTables(join.left, join.lookup, schemas, output.fieldNames())
    return (
        parts[0]
        .unionByName(parts[1])
        .groupBy(*keys)
        .transformWithState(processor, output, "Append", "None")
    )


Rows = dict[str, tuple[Any, ...]]  # a side's rows under one join key, by record key


class JoinTables(StatefulProcessor):
    """Per join key: each side's rows, and the changes of the pairs they make (see the module)."""

    def __init__(
        self, left: bool, lookup: bool, schemas: Sequence[StructType], names: Sequence[str]
    ):
        self.left, self.lookup, self.schemas, self.names = left, lookup, list(schemas), list(names)
        self.columns = [s.fieldNames() for s in schemas]

    def init(self, handle: StatefulProcessorHandle) -> None:
        key = StructType([StructField("k", StringType())])
        self.sides = [
            handle.getMapState(f"side{n}", key, schema) for n, schema in enumerate(self.schemas)
        ]

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:  # noqa: N802, N803 (Spark's names)
        keyed = all(part is not None for part in key)  # SQL: a null key equals nothing
        changes: list[list[tuple[str, tuple[Any, ...], int]]] = [[], []]
        for row in rows:
            side = int(row[SIDE])
            values = row[ROWS[side]]
            changes[side].append(
                (values[KEY], tuple(values[c] for c in self.columns[side]), int(row[WEIGHT]))
            )
        touched = {k for k, _, _ in changes[0]}
        if changes[1]:
            touched |= set(self._rows(0))
        before = (self._some(0, touched), self._rows(1))
        for side, side_changes in enumerate(changes):
            self._apply(side, side_changes)
        after = (self._some(0, touched), self._rows(1) if changes[1] else before[1])
        width = len(self.columns[1])
        old = pairs(before[0], before[1], keyed, self.left, self.lookup, width)
        new = pairs(after[0], after[1], keyed, self.left, self.lookup, width)
        for identity, values in old.items():
            if new.get(identity) != values:
                yield self._row(identity, True, values)
        for identity, values in new.items():
            if old.get(identity) != values:
                yield self._row(identity, False, values)

    def _rows(self, side: int) -> Rows:
        return {k[0]: tuple(v) for k, v in self.sides[side].iterator()}

    def _some(self, side: int, keys: set[str]) -> Rows:
        state = self.sides[side]
        found: Rows = {}
        for key in keys:
            if state.containsKey((key,)):
                found[key] = tuple(state.getValue((key,)) or ())
        return found

    def _apply(self, side: int, changes: list[tuple[str, tuple[Any, ...], int]]) -> None:
        """A batch's changes of one side: the rows taken back, then the rows added (a record
        key's old and new version come in one batch, in no order)."""
        state = self.sides[side]
        for key, _, weight in changes:
            if weight < 0 and state.containsKey((key,)):
                state.removeKey((key,))
        for key, values, weight in changes:
            if weight > 0:
                state.updateValue((key,), values)

    def _row(self, identity: str, taken_back: bool, values: tuple[Any, ...]) -> Row:
        return Row(**dict(zip(self.names, (identity, taken_back, 0, 0, *values), strict=True)))

    def close(self) -> None:
        """Nothing to release."""


def pairs(first: Rows, second: Rows, keyed: bool, left: bool, lookup: bool, width: int) -> Rows:
    """The join's rows from the rows of each side under one join key, by identity: the first's
    record key and the second's, joined by a NUL; the first's alone for a `lookup`, where a row
    of the first meets at most one row of the second, so that a row that changes partner (or
    loses it, in a LEFT JOIN) keeps its identity, and its output row is replaced, not deleted
    and written again in no order."""
    found: Rows = {}
    for first_key, first_values in first.items():
        partners = second.items() if keyed else ()
        for second_key, second_values in partners:
            identity = first_key if lookup else f"{first_key}\x00{second_key}"
            found[identity] = (*first_values, *second_values)
        if left and not partners:
            identity = first_key if lookup else f"{first_key}\x00"
            found[identity] = (*first_values, *([None] * width))
    return found
