"""The rows by key of a view over a table (`runner/jvm/LatestRows.java`) on real Spark, compiled
as the runners get it (`jvm_operators.operators_jar`): batches of records in files, one streaming
query over them, its checkpoint kept from batch to batch.

A key's records of one batch are applied in partition and offset order, whatever order they come
in; a deletion, or a row that stops matching the WHERE condition, leaves the key without a row; a
batch that leaves a key's row as it was writes nothing for it. Weighted, a change is the old row
taken back and the new one added; else the new row, or the old one flagged deleted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BooleanType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from distributary.jvm_operators import operators_jar, runner_jars
from distributary.plan.applications.runner_spec import ROCKSDB_PROVIDER
from distributary.runner.tables import latest_rows
from distributary.table_queries import DELETE, KEY, MATCH, OFFSET, PARTITION

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
    """What each round of records wrote, sorted: one query over the files, run once per round
    (availableNow) with the same checkpoint."""
    source, found = folder / "in", []
    source.mkdir()
    for number, records in enumerate(rounds):
        (source / f"{number:03}.json").write_text("".join(json.dumps(r) + "\n" for r in records))
        pre = spark.readStream.schema(INPUT).json(str(source))
        mode = "Append" if weighted else "Update"
        rows = latest_rows(pre, ["city", "balance"], STATE, weighted, mode)
        written: list[tuple[Any, ...]] = []

        def keep(frame: DataFrame, _batch: int, into: list[tuple[Any, ...]] = written) -> None:
            into.extend(tuple(r) for r in frame.collect())

        query = (
            rows.writeStream.foreachBatch(keep)
            .outputMode(mode.lower())
            .option("checkpointLocation", str(folder / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        found.append(sorted(written, key=repr))
    return found


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
