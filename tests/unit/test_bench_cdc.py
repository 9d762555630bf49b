"""The pure parts of bench/cdc: its command line, percentiles, the rates it derives from the
moments it saw (arrivals in a Log, a table's rows over time) and the shape of its sections.

The benchmark is a folder run as a program (`python bench/cdc`), not a package, so its
`figures.py` is loaded by path; loading it runs nothing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

FIGURES = Path(__file__).resolve().parents[2] / "bench" / "cdc" / "figures.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_cdc_figures", FIGURES)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


figures = load()


def test_quick_picks_the_small_defaults_and_explicit_values_win() -> None:
    quick = figures.parse_args(["--quick"])
    assert (quick.rows, quick.snapshot_rows, quick.seconds, quick.warmup, quick.repeat) == (
        10_000, 5_000, 20.0, 3.0, 1,
    )  # fmt: skip
    full = figures.parse_args([])
    assert (full.rows, full.snapshot_rows, full.seconds, full.warmup, full.repeat) == (
        50_000, 20_000, 60.0, 5.0, 3,
    )  # fmt: skip
    assert figures.parse_args(["--quick", "--rows", "7"]).rows == 7
    assert full.rate == 1000.0
    assert full.batch == 1000


@pytest.mark.parametrize("argv", [["--rows", "0"], ["--rate", "0"], ["--warmup", "-1"]])
def test_nonsense_is_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        figures.parse_args(argv)


def test_percentiles_interpolate_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert figures.percentile(values, 50) == pytest.approx(50.5)
    assert figures.percentile(values, 99) == pytest.approx(99.01)
    assert figures.percentile([3.0], 99) == 3.0
    assert figures.percentile([], 50) is None
    shown = figures.delays([10.0, 20.0, 30.0])
    assert shown == {"count": 3, "p50_ms": 20.0, "p99_ms": 29.8, "max_ms": 30.0, "mean_ms": 20.0}


def test_a_span_does_not_count_its_first_batch_as_taking_no_time() -> None:
    # 100 rows at once at t=10, then 900 more until t=11: 900 rows in 1 s.
    moments = [10.0] * 100 + [10.0 + (i + 1) / 900 for i in range(900)]
    span = figures.span_rate(moments)
    assert span["rows"] == 1000
    assert span["rows_per_s"] == pytest.approx(900.0)
    assert figures.span_rate([])["rows_per_s"] is None


def test_a_counted_rate_runs_from_the_first_rows_seen_to_all() -> None:
    samples = [(0.0, 0), (1.0, 0), (2.0, 1000), (3.0, 6000), (4.0, 11_000), (5.0, 11_000)]
    counted = figures.counted_rate(samples, 11_000)
    assert counted == {"first_rows_at": 2.0, "done_at": 4.0, "rows_per_s": 5000.0}
    unfinished = figures.counted_rate(samples[:4], 11_000)
    assert unfinished["rows_per_s"] is None
    assert unfinished["done_at"] is None


def test_capture_is_rows_over_first_commit_to_last_row_in_the_log() -> None:
    commits = [100.0, 100.5, 101.0]
    arrivals = [100.2] * 10 + [103.0] * 5
    section = figures.capture_section(15, 3, 99.9, commits, arrivals)
    assert section["first_commit_to_last_row_s"] == 3.0
    assert section["rows_per_s"] == 5.0
    assert section["last_row_in_log_after_last_commit_s"] == 2.0
    assert section["first_row_in_log_after_first_commit_s"] == pytest.approx(0.2)
    assert section["status"] == "ok"
    missing = figures.capture_section(16, 3, 99.9, commits, arrivals)
    assert missing["status"] == "incomplete"
    assert missing["rows_per_s"] is None


def test_the_sink_section_keeps_the_best_of_each_and_their_ratio() -> None:
    def attempt(what: str, rate: float | None) -> dict[str, object]:
        samples = [(1.0, 100), (2.0, 100 + int(rate or 0))] if rate else [(1.0, 0)]
        return figures.attempt_section(what, 0.0, samples, 100 + int(rate or 0) if rate else 10)

    section = figures.sink_section(
        [attempt("sink", 800.0), attempt("sink", 900.0)], [attempt("plain", 1000.0)]
    )
    assert section["sink"]["rows_per_s"] == 900.0
    assert section["sink"]["samples_rows_per_s"] == [800.0, 900.0]
    assert section["plain"]["rows_per_s"] == 1000.0
    assert section["sink/plain"] == 0.9
    failed = figures.sink_section([attempt("sink", None)], [attempt("plain", 1000.0)])
    assert failed["sink"]["status"] == "incomplete"
    assert failed["sink/plain"] is None
    # Every row in one commit (a --smoke run): complete, without a rate.
    at_once = figures.attempt_section("sink", 0.0, [(1.0, 0), (1.5, 400)], 400)
    small = figures.sink_section([at_once], [attempt("plain", 1000.0)])
    assert small["sink"]["status"] == "ok"
    assert small["sink"]["rows_per_s"] is None
    assert small["sink/plain"] is None


def test_freshness_reports_the_table_and_the_log_delays() -> None:
    inserted = {"rows": 3, "transactions": 3, "achieved_rps": 1000.0}
    section = figures.freshness_section(1000.0, 5.0, 60.0, inserted, [5.0, 7.0], [1.0, 2.0], 2)
    assert section["p50_ms"] == 6.0
    assert section["max_ms"] == 7.0
    assert section["to_log"]["p50_ms"] == 1.5
    assert section["achieved_rps"] == 1000.0
    assert section["status"] == "ok"
    assert figures.freshness_section(1000.0, 5.0, 60.0, inserted, [5.0], [], 2)["status"] == (
        "incomplete"
    )
