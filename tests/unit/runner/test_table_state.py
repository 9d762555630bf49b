"""What a view over a table keeps per group (`runner/tables.py`), without Spark: a row's change
turned into what it writes, and exact sums that give back exactly what they took (the rows by
key, a JVM operator: `tests/integration/test_latest_rows.py`)."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from pyspark.sql.types import DecimalType, DoubleType, LongType

from distributary.runner.tables import Totals, changes, typed
from distributary.table_queries import Aggregate


def test_a_selected_row_is_written_or_left_as_a_tombstone() -> None:
    assert changes(("Kobe",), ("Oslo",)) == [("Oslo", False)]
    assert changes(("Kobe",), None) == [("Kobe", True)]
    assert changes(None, None) == []


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
