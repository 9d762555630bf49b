"""The JVM operators of views over tables (`runner/jvm/`) on real Spark, compiled as the runners
get them (`jvm_operators.operators_jar`): batches of records in files, one streaming query over
them, its checkpoint (and so the operator's state) kept from batch to batch.

- The rows by key (`LatestRows`): a key's records of one batch are applied in partition and
  offset order, whatever order they come in; a deletion, or a row that stops matching the WHERE
  condition, leaves the key without a row; a batch that leaves a key's row as it was writes
  nothing for it. Weighted, a change is the old row taken back and the new one added; else the
  new row, or the old one flagged deleted.
- The groups (`Groups`): exact sums of doubles that give back exactly what they took, averages of
  decimals rounded half up to their scale, extremes and distinct counts that give way when a
  value leaves, a group deleted when its last row leaves (a global group kept at 0).
- The rows of a join by identity (`NetRows`): weights add up in any order; two versions at once
  fail the query, naming the row.
- Two tables joined (`JoinTables`): random batches of inserts, updates (some moving a row to
  another join key) and deletes of both tables; after each batch the changes written so far add
  up to exactly the join of the tables as they are.
- A stream joined with a table (`JoinRows`): each event once, with the rows its key has at its
  time, a table's change first at the same instant; a later change writes no event again."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BooleanType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from distributary.jvm_operators import operators_jar, runner_jars
from distributary.plan.applications.runner_spec import ROCKSDB_PROVIDER
from distributary.runner.joined_tables import ROWS
from distributary.runner.joined_tables import SIDE as JOIN_SIDE
from distributary.runner.table_joins import SIDE as EVENT_SIDE
from distributary.runner.tables import (
    TIMESTAMP,
    WEIGHT,
    groups,
    jvm_operator,
    latest_rows,
    net_rows,
)
from distributary.table_joins import STREAM_ROW, TABLE_ROW
from distributary.table_queries import DELETE, KEY, MATCH, OFFSET, PARTITION, Aggregate, TableQuery

INPUT = StructType(
    [
        StructField(KEY, StringType()),
        StructField(DELETE, BooleanType()),
        StructField(PARTITION, IntegerType()),
        StructField(OFFSET, LongType()),
        StructField("city", StringType()),
        StructField("balance", DecimalType(10, 2)),
        StructField(MATCH, BooleanType()),
    ]
)
STATE = StructType([INPUT["city"], INPUT["balance"]])
ONE = Decimal("1.50")  # every row's balance
# pyspark's own sockets (a batch's rows sent to this process) are closed when it collects them.
pytestmark = pytest.mark.filterwarnings(
    "ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning"
)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    assert operators_jar() is not None, "built in the cache: pyspark's jars do not hold it"
    folder = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("latest-rows")
        .config("spark.jars", ",".join(str(j) for j in runner_jars(quiet=True)))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config("spark.sql.warehouse.dir", str(folder / "warehouse"))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def record(key: str, offset: int, city: str | None, **flags: Any) -> dict[str, Any]:
    return {
        KEY: key,
        DELETE: flags.get("deleted", False),
        PARTITION: flags.get("partition", 0),
        OFFSET: offset,
        "city": city,
        "balance": "1.50" if city else None,
        MATCH: flags.get("match", True),
    }


def batches(
    spark: SparkSession, folder: Path, weighted: bool, rounds: list[list[dict[str, Any]]]
) -> list[list[tuple[Any, ...]]]:
    """What each round of records wrote through `LatestRows`, sorted."""
    mode = "Append" if weighted else "Update"
    return run_rounds(
        spark,
        folder,
        INPUT,
        rounds,
        lambda pre: latest_rows(pre, ["city", "balance"], STATE, weighted, mode),
        mode,
    )


def run_rounds(
    spark: SparkSession,
    folder: Path,
    schema: StructType,
    rounds: list[list[dict[str, Any]]],
    operator: Callable[[DataFrame], DataFrame],
    mode: str = "Append",
) -> list[list[tuple[Any, ...]]]:
    """What each round of records (of `schema`) wrote through `operator`, sorted: one query over
    the files, run once per round (availableNow) with the same checkpoint."""
    source, found = folder / "in", []
    source.mkdir()
    for number, records in enumerate(rounds):
        (source / f"{number:03}.json").write_text("".join(json.dumps(r) + "\n" for r in records))
        rows = operator(spark.readStream.schema(schema).json(str(source)))
        written: list[tuple[Any, ...]] = []

        def keep(frame: DataFrame, _batch: int, into: list[tuple[Any, ...]] = written) -> None:
            into.extend(plain(r) for r in frame.collect())

        query = (
            rows.writeStream.foreachBatch(keep)
            .outputMode(mode.lower())
            .option("checkpointLocation", str(folder / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        if query.exception() is not None:
            raise AssertionError(str(query.exception()))
        found.append(sorted(written, key=repr))
    return found


def plain(row: Any) -> Any:
    """A collected row as tuples all the way down."""
    if isinstance(row, tuple):  # a Row is a tuple
        return tuple(plain(v) for v in row)
    return row


def test_a_keys_records_apply_in_partition_and_offset_order_and_deletes_take_back(
    spark: SparkSession, tmp_path: Path
) -> None:
    found = batches(
        spark,
        tmp_path,
        weighted=True,
        rounds=[
            # out of order: offset 7 is the last, so a's row is Oslo; b deleted in the end.
            [
                record("a", 7, "Oslo"),
                record("a", 5, "Lima"),
                record("a", 6, None, deleted=True),
                record("b", 1, "Kobe"),
                record("b", 2, None, deleted=True),
            ],
            # a moves; c's row does not match; b comes back.
            [record("a", 8, "Rome"), record("c", 1, "Kiev", match=False), record("b", 3, "Kobe")],
            # a's row written again as it is: nothing changes, nothing is written.
            [record("a", 9, "Rome")],
            # a deleted by a tombstone (no columns): its row taken back.
            [record("a", 10, None, deleted=True)],
        ],
    )
    assert found == [
        [("Oslo", ONE, 1)],
        sorted([("Oslo", ONE, -1), ("Rome", ONE, 1), ("Kobe", ONE, 1)], key=repr),
        [],
        [("Rome", ONE, -1)],
    ]


def test_unweighted_the_new_row_or_the_old_one_flagged_deleted(
    spark: SparkSession, tmp_path: Path
) -> None:
    found = batches(
        spark,
        tmp_path,
        weighted=False,
        rounds=[
            [record("a", 1, "Oslo"), record("b", 1, "Kobe", partition=1)],
            [record("a", 2, "Rome", match=False), record("b", 2, "Lima", partition=1)],
            [record("a", 3, "Rome", match=False)],
        ],
    )
    assert found == [
        sorted([("Oslo", ONE, False), ("Kobe", ONE, False)], key=repr),
        sorted([("Oslo", ONE, True), ("Lima", ONE, False)], key=repr),
        [],
    ]


CHANGES = StructType(
    [
        StructField("city", StringType()),
        StructField("x", DoubleType()),
        StructField("d", DecimalType(10, 2)),
        StructField("name", StringType()),
        StructField(WEIGHT, LongType()),
    ]
)
AGGREGATES = (
    Aggregate("a0", "sum", "x"),
    Aggregate("a1", "count", None),
    Aggregate("a2", "avg", "d"),
    Aggregate("a3", "min", "name"),
    Aggregate("a4", "max", "name"),
    Aggregate("a5", "count_distinct", "name"),
)
RESULTS = {
    "a0": DoubleType(),
    "a1": LongType(),
    "a2": DecimalType(14, 6),
    "a3": StringType(),
    "a4": StringType(),
    "a5": LongType(),
}


def grouped(query: TableQuery) -> Callable[[DataFrame], DataFrame]:
    output = StructType(
        [
            *(CHANGES[g] for g in query.groups),
            *(StructField(a.column, RESULTS[a.column]) for a in query.aggregates),
            StructField("gone", BooleanType()),
        ]
    )
    return lambda changes: groups(changes, query, RESULTS, output, "Update")


def change(city: str, x: float | None, d: str, name: str, weight: int) -> dict[str, Any]:
    return {"city": city, "x": x, "d": d, "name": name, WEIGHT: weight}


def test_groups_are_exact_and_give_back_exactly_what_leaves_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    oslo = [(0.1, "Kobe"), (0.2, "Lima"), (1e16, "Oslo"), (0.3, "Oslo")]
    # AVG of 0.01 and 31 zeros is 0.0003125: half up to the scale of 6, not half even.
    rome = [change("Rome", None, "0.01", "Rome", 1)]
    rome += [change("Rome", None, "0.00", "Rome", 1) for _ in range(31)]
    leaving = [(1e16, "Oslo"), (0.1, "Kobe")]
    found = run_rounds(
        spark,
        tmp_path,
        CHANGES,
        [
            [*(change("Oslo", x, "1.00", n, 1) for x, n in oslo), *rome],
            [
                *(change("Oslo", x, "1.00", n, -1) for x, n in leaving),
                *({**r, WEIGHT: -1} for r in rome),
            ],
        ],
        grouped(TableQuery("t", "", groups=("city",), aggregates=AGGREGATES)),
        "Update",
    )
    exact = float(sum(Fraction(x) for x, _ in oslo))
    assert found[0] == sorted(
        [
            ("Oslo", exact, 4, Decimal("1.000000"), "Kobe", "Oslo", 3, False),
            ("Rome", None, 32, Decimal("0.000313"), "Rome", "Rome", 1, False),
        ],
        key=repr,
    )
    # The sum as if 1e16 had never been added (in doubles, 0.2 + 0.3 would be lost in it); the
    # least and the distinct values give way to those left (one "Oslo" of two is gone).
    left = float(Fraction(0.2) + Fraction(0.3))
    assert left != (0.1 + 0.2 + 1e16 + 0.3) - 1e16 - 0.1
    assert found[1] == sorted(
        [
            ("Oslo", left, 2, Decimal("1.000000"), "Lima", "Oslo", 2, False),
            ("Rome", None, None, None, None, None, None, True),
        ],
        key=repr,
    )


def test_a_global_group_stays_at_zero_when_its_last_row_leaves(
    spark: SparkSession, tmp_path: Path
) -> None:
    query = TableQuery("t", "", aggregates=AGGREGATES[:3], global_group=True)
    found = run_rounds(
        spark,
        tmp_path,
        CHANGES,
        [[change("Oslo", 2.5, "1.50", "a", 1)], [change("Oslo", 2.5, "1.50", "a", -1)]],
        grouped(query),
        "Update",
    )
    assert found == [[(2.5, 1, Decimal("1.500000"), False)], [(None, 0, None, False)]]


NET = StructType(
    [
        StructField(KEY, StringType()),
        StructField("city", StringType()),
        StructField(DELETE, BooleanType()),
        StructField(MATCH, BooleanType()),
    ]
)
CITY = StructType([StructField("city", StringType())])


def net(key: str, city: str, taken_back: bool = False, match: bool = True) -> dict[str, Any]:
    return {KEY: key, "city": city, DELETE: taken_back, MATCH: match}


def test_net_rows_add_weights_in_any_order(spark: SparkSession, tmp_path: Path) -> None:
    found = run_rounds(
        spark,
        tmp_path,
        NET,
        [
            [net("k1", "Oslo"), net("k2", "Kobe", match=False)],
            [net("k1", "Oslo", taken_back=True), net("k1", "Lima")],  # in no order
            [net("k1", "Lima", taken_back=True)],
            [net("k2", "Rome"), net("k2", "Rome", taken_back=True)],
        ],
        lambda changes: net_rows(changes, ["city"], CITY, "Update"),
        "Update",
    )
    assert found == [[("Oslo", False)], [("Lima", False)], [("Lima", True)], []]


def test_net_rows_refuse_two_versions_of_a_row_at_once(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(StreamingQueryException, match="the join's row 'k1' has 2 versions at once"):
        run_rounds(
            spark,
            tmp_path,
            NET,
            [[net("k1", "Oslo")], [net("k1", "Rome")]],
            lambda changes: net_rows(changes, ["city"], CITY, "Update"),
            "Update",
        )


ORDERS = StructType([StructField("customer", StringType()), StructField("amount", StringType())])
CUSTOMERS = StructType([StructField("id", StringType()), StructField("city", StringType())])
SIDES = StructType(
    [
        StructField("_dtry_j0", StringType()),
        StructField(JOIN_SIDE, IntegerType()),
        *(
            StructField(ROWS[n], StructType([StructField(KEY, StringType()), *s.fields]))
            for n, s in enumerate((ORDERS, CUSTOMERS))
        ),
        StructField(WEIGHT, LongType()),
    ]
)
PAIRS = StructType(
    [
        StructField(KEY, StringType()),
        StructField(DELETE, BooleanType()),
        StructField(PARTITION, IntegerType()),
        StructField(OFFSET, LongType()),
        *ORDERS.fields,
        *CUSTOMERS.fields,
    ]
)


def joined(left: bool, lookup: bool) -> Callable[[DataFrame], DataFrame]:
    return lambda changes: jvm_operator(changes, "JoinTables",
        changes._jdf, ["_dtry_j0"], left, lookup, ORDERS.json(), CUSTOMERS.json(), JOIN_SIDE,
        list(ROWS), WEIGHT, PAIRS.json(),
    )  # fmt: skip


def side_change(side: int, key: str, values: tuple[Any, ...], weight: int) -> dict[str, Any]:
    names = (ORDERS if side == 0 else CUSTOMERS).fieldNames()
    row = {KEY: key, **dict(zip(names, values, strict=True))}
    return {"_dtry_j0": values[0], JOIN_SIDE: side, ROWS[side]: row, WEIGHT: weight}


def expected_join(
    orders: dict[str, tuple], customers: dict[str, tuple], left: bool, lookup: bool
) -> Counter:
    found: Counter = Counter()
    for order_key, order in orders.items():
        partners = [
            (k, c) for k, c in customers.items() if order[0] is not None and c[0] == order[0]
        ]
        for customer_key, customer in partners:
            identity = order_key if lookup else f"{order_key}\x00{customer_key}"
            found[(identity, (*order, *customer))] += 1
        if left and not partners:
            found[(order_key if lookup else f"{order_key}\x00", (*order, None, None))] += 1
    return found


@pytest.mark.parametrize(("left", "lookup"), [(False, False), (True, True)])
def test_two_tables_joined_write_changes_that_add_up_to_the_join_after_every_batch(
    spark: SparkSession, tmp_path: Path, left: bool, lookup: bool
) -> None:
    rng = random.Random(7)
    tables: list[dict[str, tuple]] = [{}, {}]
    rounds, joins = [], []
    for _batch in range(8):
        records: list[dict[str, Any]] = []
        touched: set[tuple[int, str]] = set()
        for _ in range(rng.randint(3, 12)):
            side = rng.randint(0, 1)
            key = f"{side}-{rng.randint(1, 8)}"
            if side == 1 and lookup:  # customers keyed by their id: an order meets one at most
                key = rng.choice(["c1", "c2", "c3", "c4"])
            if (side, key) in touched:
                continue  # LatestRows writes a record key's net change once per batch
            touched.add((side, key))
            old = tables[side].get(key)
            if rng.random() < 0.2:
                new = None
            elif side == 0:
                new = (rng.choice(["c1", "c2", "c3", None]), str(rng.randint(1, 50)))
            else:
                new = (key if lookup else rng.choice(["c1", "c2", "c3", "c4"]), rng.choice("ABC"))
            if old == new:
                continue
            for values, weight in ((old, -1), (new, 1)):
                if values is not None:
                    records.append(side_change(side, key, values, weight))
            if new is None:
                tables[side].pop(key, None)
            else:
                tables[side][key] = new
        rng.shuffle(records)  # a key's changes come in no order
        rounds.append(records)
        joins.append(expected_join(tables[0], tables[1], left, lookup))
    found = run_rounds(spark, tmp_path, SIDES, rounds, joined(left, lookup))
    written: Counter = Counter()
    for number, rows in enumerate(found):
        for identity, taken_back, _p, _o, *values in rows:
            written[(identity, tuple(values))] += -1 if taken_back else 1
        assert +written == joins[number], f"after batch {number}"
        assert all(n >= 0 for n in written.values()), f"after batch {number}"


EVENT = StructType([StructField("order", StringType()), StructField("customer", StringType())])
EVENTS = StructType(
    [
        StructField("_dtry_j0", StringType()),
        StructField(EVENT_SIDE, IntegerType()),
        StructField(TIMESTAMP, TimestampType()),
        StructField(PARTITION, IntegerType()),
        StructField(OFFSET, LongType()),
        StructField(STREAM_ROW, EVENT),
        StructField(
            TABLE_ROW,
            StructType(
                [StructField(KEY, StringType()), StructField(DELETE, BooleanType()), *CUSTOMERS]
            ),
        ),
    ]
)


def event(second: int, offset: int, order: str, customer: str | None) -> dict[str, Any]:
    return {
        "_dtry_j0": customer,
        EVENT_SIDE: 1,
        TIMESTAMP: f"2026-01-01T00:00:{second:02}Z",
        PARTITION: 0,
        OFFSET: offset,
        STREAM_ROW: {"order": order, "customer": customer},
    }


def row_change(second: int, offset: int, id_: str, city: str | None) -> dict[str, Any]:
    return {
        "_dtry_j0": id_,
        EVENT_SIDE: 0,
        TIMESTAMP: f"2026-01-01T00:00:{second:02}Z",
        PARTITION: 1,
        OFFSET: offset,
        TABLE_ROW: {KEY: id_, DELETE: city is None, "id": id_, "city": city},
    }


def rows_of_events(both: DataFrame) -> DataFrame:
    output = StructType([StructField(STREAM_ROW, EVENT), StructField(TABLE_ROW, CUSTOMERS)])
    return jvm_operator(both, "JoinRows",
        both._jdf, ["_dtry_j0"], True, CUSTOMERS.json(), EVENT_SIDE, TIMESTAMP, PARTITION,
        OFFSET, STREAM_ROW, TABLE_ROW, output.json(),
    )  # fmt: skip


def test_a_stream_joined_with_a_table_writes_each_event_once_with_the_row_of_its_time(
    spark: SparkSession, tmp_path: Path
) -> None:
    found = run_rounds(
        spark,
        tmp_path,
        EVENTS,
        [
            [  # in no order: applied by time, a table's change first at the same instant
                event(8, 3, "o3", "c1"),
                row_change(7, 1, "c1", None),
                event(5, 2, "o2", "c1"),
                row_change(5, 0, "c1", "Oslo"),
                event(3, 1, "o1", "c1"),
                event(4, 4, "o4", None),  # a null key meets nothing
            ],
            [row_change(9, 2, "c1", "Lima"), event(10, 5, "o5", "c1")],
            [row_change(11, 3, "c1", "Kobe")],  # no event is written again
        ],
        rows_of_events,
    )
    assert found == [
        sorted(
            [
                (("o1", "c1"), None),
                (("o2", "c1"), ("c1", "Oslo")),
                (("o3", "c1"), None),
                (("o4", None), None),
            ],
            key=repr,
        ),
        [(("o5", "c1"), ("c1", "Lima"))],
        [],
    ]
