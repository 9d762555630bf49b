"""bench/tables' workload and figures: the table it writes says what the view must answer, an
output topic is read as a table, and its smallest form picks its own defaults."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from tests.unit.bench.test_smoke_args import load

FIGURES = load(
    "bench_tables_figures", Path(__file__).resolve().parents[3] / "bench" / "tables" / "figures.py"
)


def test_the_expected_table_counts_each_row_once_where_it_is_now() -> None:
    table = FIGURES.Table(groups=3, seed=1)
    for i in (1, 2, 3):
        table.row(i)
    moved = table.row(2)  # a second version: it leaves its first city
    expected = table.expected()
    assert sum(n for n, _ in expected.values()) == 3
    assert table.rows[2] == (moved["city"], Decimal(moved["balance"]))
    table.marker(0)
    table.marker(8)  # the same marker row, moved on: one row, in its newest city
    assert "~marker-0" not in table.expected()
    assert table.expected()["~marker-8"] == (1, Decimal(0))


def test_an_output_topic_is_read_as_a_table() -> None:
    records = [
        (b'{"city":"a"}', b'{"city":"a","accounts":2,"balance":1.50}'),
        (b'{"city":"b"}', b'{"city":"b","accounts":1,"balance":3}'),
        (b'{"city":"a"}', None),
    ]
    assert FIGURES.output_table(records) == {"b": (1, Decimal(3))}


def test_the_smoke_form_is_small_and_a_given_value_wins() -> None:
    args = FIGURES.parse_args(["--smoke"])
    assert (args.rows, args.groups, args.seconds, args.share) == (2_000, 20, 4.0, 0.05)
    assert FIGURES.parse_args(["--smoke", "--rows", "500"]).rows == 500
    full = FIGURES.parse_args([])
    assert (full.rows, full.groups, full.share) == (200_000, 1_000, 0.01)


def test_the_phases_medians_come_largest_first_and_a_missing_phase_counts_zero() -> None:
    batches = [
        {"batchPhasesMs": {"addBatch": 900, "walCommit": 40, "stateCommit": 100}},
        {"batchPhasesMs": {"addBatch": 700, "walCommit": 60}},
        {"batchPhasesMs": {"addBatch": 800, "walCommit": 50, "stateCommit": 300}},
    ]
    medians = FIGURES.phases_p50(batches)
    assert list(medians) == ["addBatch", "stateCommit", "walCommit"]
    assert medians == {"addBatch": 800, "stateCommit": 100, "walCommit": 50}
