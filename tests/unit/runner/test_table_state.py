"""What a view over a table keeps per key and per group (`runner/tables.py`), without Spark: a
key's records applied in partition order, a change turned into what it writes, and exact sums
that give back exactly what they took."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

from pyspark.sql.types import DecimalType, DoubleType, LongType

from distributary.runner.tables import Totals, changes, latest, typed
from distributary.table_queries import DELETE, MATCH, OFFSET, PARTITION, Aggregate


def record(offset: int, city: str | None, deleted: bool = False, match: bool = True) -> Any:
    return {PARTITION: 0, OFFSET: offset, DELETE: deleted, MATCH: match, "city": city}


def test_a_keys_records_of_a_batch_are_applied_in_offset_order() -> None:
    rows = iter([record(7, "Oslo"), record(5, "Lima"), record(6, None, deleted=True)])
    assert latest(("Kobe",), rows, ["city"]) == ("Oslo",)


def test_the_last_record_decides_delete_or_not_matching_means_no_row() -> None:
    assert latest(("Kobe",), iter([record(1, "Oslo"), record(2, None, True)]), ["city"]) is None
    assert latest(None, iter([record(1, "Oslo", match=False)]), ["city"]) is None
    assert latest(None, iter([]), ["city"]) is None


def test_a_change_takes_the_old_row_back_and_adds_the_new_one() -> None:
    assert changes(("Kobe",), ("Oslo",), weighted=True) == [("Kobe", -1), ("Oslo", 1)]
    assert changes(None, ("Oslo",), weighted=True) == [("Oslo", 1)]
    assert changes(("Kobe",), None, weighted=True) == [("Kobe", -1)]


def test_a_selected_row_is_written_or_left_as_a_tombstone() -> None:
    assert changes(("Kobe",), ("Oslo",), weighted=False) == [("Oslo", False)]
    assert changes(("Kobe",), None, weighted=False) == [("Kobe", True)]
    assert changes(None, None, weighted=False) == []


def test_sums_of_doubles_give_back_exactly_what_they_took() -> None:
    total = Aggregate("_dtry_a0", "sum", "_dtry_x0")
    totals = Totals.read(None, 1)
    for value in (0.1, 0.2, 1e16, 0.3):
        totals.add(0, total, value, 1)
    for value in (1e16, 0.2):
        totals.add(0, total, value, -1)
    again = Totals.read(totals.written(), 1)
    assert typed(again.sums[0], DoubleType()) == 0.1 + 0.3  # as if 1e16 had never been added
    assert again.counts == [2]


def test_decimals_round_half_up_to_their_scale_and_integers_stay_whole() -> None:
    assert typed(Fraction(1, 8), DecimalType(14, 2)) == Decimal("0.13")
    assert typed(Fraction(-1, 8), DecimalType(14, 2)) == Decimal("-0.13")
    assert typed(Fraction(12345678901234567890, 1), LongType()) == 12345678901234567890
