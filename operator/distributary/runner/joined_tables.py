"""Two tables joined, run by Spark (`joined_tables` takes the query apart).

One streaming query, all of its state in the checkpoint:

1. Each table's records (`tables.table_rows`) through `LatestRows` (`tables.latest_rows`), keyed
   by the record key: a row's change as its old version taken back (weight -1) and its new one
   added (+1), so that a row that moves to another join key leaves the old one.
2. Both sides' changes in `JoinTables` (a JVM operator: `runner/jvm/JoinTables.java`), keyed by
   the join key: the rows of each side under that key, by record key. A batch's changes of a
   join key are applied, and the pairs they touch are compared before and after: a pair that no
   longer holds is written taken back, a new or changed pair added. Changes of the second table
   touch every row of the first under the key (and, for a LEFT JOIN, its row without a partner);
   changes of the first only its own rows. Weights add up in any order, so the batch's order
   within a key does not matter.
3. The pairs are the join's rows (`JOINED`): the view's query over them as over one table
   (`tables.table_result`, weighted: selected rows through `NetRows`, groups by their weights;
   both JVM operators).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as fn
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
    jvm_operator,
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
    changes = parts[0].unionByName(parts[1])
    return jvm_operator(changes, "JoinTables",
        changes._jdf, keys, join.left, join.lookup, schemas[0].json(), schemas[1].json(), SIDE,
        list(ROWS), WEIGHT, output.json(),
    )  # fmt: skip
