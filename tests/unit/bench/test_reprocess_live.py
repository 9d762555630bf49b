"""The pure parts of `bench/reprocess --live`: its command line, and the arithmetic that turns
status samples, the runners' batches and the producer's marks into its figures.

`live_figures.py` imports `figures` by its plain name, as the benchmark does when it runs, so the
benchmark's folder is put on the path for the load.
"""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "reprocess"


def load() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_reprocess_live", BENCH / "live_figures.py"
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


live = load()
figures = sys.modules["figures"]
Sample, Batch = figures.Sample, figures.Batch


def test_live_defaults_are_the_full_run() -> None:
    args = figures.parse_args(["--live"])
    assert (args.records, args.rate, args.steady_records) == (1_000_000, 5000.0, None)
    assert (args.keep_up_seconds, args.after_cutover, args.timeout) == (10.0, 5.0, 1800.0)
    assert figures.parse_args([]).timeout == 600.0
    quick = figures.parse_args(["--live", "--quick"])
    assert (quick.records, quick.rate) == (100_000, 5000.0)
    assert not figures.parse_args([]).live


@pytest.mark.parametrize(
    "argv",
    [
        ["--live", "--steady-records", "10"],
        ["--live", "--rate", "0"],
        ["--live", "--records", "0"],
        ["--live", "--keep-up-seconds", "-1"],
        ["--live", "--after-cutover", "-1"],
    ],
)
def test_live_nonsense_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        figures.parse_args(argv)
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


def sample(at: float, **fields: object) -> object:
    return Sample(at=at, **fields)


def test_keeping_up_is_the_operators_test_with_the_rate_status_recorded() -> None:
    within = sample(0, lags={1: 10_000}, input_rates={1: 5000.0})
    over = sample(0, lags={1: 10_001}, input_rates={1: 5000.0})
    assert live.keeps_up(within, 1, 2.0)
    assert not live.keeps_up(over, 1, 2.0)
    assert not live.keeps_up(sample(0, lags={1: 0}), 1, 2.0)  # no rate measured yet
    assert not live.keeps_up(sample(0, input_rates={1: 5000.0}), 1, 2.0)  # no lag yet


def test_held_for_counts_the_latest_unbroken_run() -> None:
    ok = lambda s: s.serving == 1  # noqa: E731
    samples = [sample(0, serving=1), sample(1), sample(2, serving=1), sample(5, serving=1)]
    assert live.held_for(samples, ok) == 3.0
    assert live.held_for([*samples, sample(6)], ok) == 0.0
    assert live.held_for([], ok) == 0.0
    assert live.longest([*samples, sample(6), sample(7, serving=1)], ok) == 3.0


def test_caught_up_is_level_with_the_serving_revision() -> None:
    samples = [
        sample(9, committed={1: 100}),
        sample(10, committed={1: 100, 2: 0}),
        sample(11, committed={1: 120, 2: 110}),
        sample(12, committed={1: 130, 2: 131}),
    ]
    assert live.caught_up_with_serving(samples, 10.0) == 12.0
    assert live.committed_at(samples, 2, 12.0) == 131
    assert live.caught_up_with_serving(samples[:3], 10.0) is None


def test_arrivals_are_interpolated_between_the_producers_marks() -> None:
    marks = [(0.0, 0), (1.0, 5000), (2.0, 10_000), (3.0, 12_000)]
    assert live.appended_at(marks, 1.5) == 7500
    assert live.appended_at(marks, 4.0) is None
    assert live.arrival_rate(marks, 0.5, 2.5) == 4250.0
    assert live.arrival_rate(marks, None, 2.5) is None
    produced = live.produce_section(marks, 5000.0, 42)
    assert produced == {
        "target_rps": 5000.0, "records": 12_000, "seconds": 3.0, "achieved_rps": 4000.0,
        "slowest_second_rps": 2000.0, "max_behind_schedule_records": 42,
    }  # fmt: skip


def test_lag_account_reads_status_and_the_groups() -> None:
    samples = [
        sample(0, lags={2: 20_000}, input_rates={2: 4000.0}, committed={2: 0}, ends=20_000),
        sample(1, lags={2: 6000}, input_rates={2: 4000.0}, committed={2: 19_000}, ends=25_000),
        sample(2, lags={2: 7000}, input_rates={2: 4000.0}, committed={2: 27_000}, ends=30_000),
        sample(3, lags={2: 9000}, input_rates={2: 4000.0}, committed={2: 30_000}, ends=35_000),
    ]
    account = live.lag_account(samples, 2, 2.0, 0.0, None)
    assert account == {
        "samples": 4, "status_lag_median": 8000, "status_lag_max": 20_000,
        "input_rate_median": 4000.0, "threshold_median": 8000, "keeping_up_share": 0.5,
        "longest_keeping_up_s": 1.0, "group_lag_median": 5500, "group_lag_max": 20_000,
        "input_growth_rps": 5000.0,
    }  # fmt: skip
    assert live.lag_account(samples, 2, 2.0, 1.5, 2.5)["samples"] == 1


def test_the_catchup_is_compared_over_its_own_span() -> None:
    samples = [
        sample(100, committed={1: 50_000}),
        sample(108, committed={1: 90_000, 2: 60_000}),
        sample(111, committed={1: 105_000, 2: 106_000}, serving=1),
        sample(114, serving=2, log_topic="bench-filter.r2", committed={1: 120_000, 2: 121_000}),
    ]
    r2 = [Batch(104.0, 3.0, 60_000), Batch(107.0, 3.0, 45_000), Batch(111.5, 0.5, 2500)]
    r1 = [Batch(99.0, 1.0, 5000), Batch(104.0, 1.0, 5000), Batch(106.0, 1.0, 10_000)]
    marks = [(100.0, 0), (110.0, 50_000)]
    section = live.catchup_section(100.0, samples, r1, r2, marks)
    assert section["spark"] == {"batches": 2, "rows": 105_000, "query_s": 6.0, "rate_rps": 17500.0}
    assert section["serving_spark"]["rows"] == 15_000  # r1's batches started in 104 .. 110
    assert section["arrival_rate_rps"] == 5000.0
    assert section["catchup_to_serving"] == 3.5
    assert section["catchup_to_arrival"] == 3.5
    assert section["records_read"] == 106_000
    assert section["wall_rate_rps"] == round(106_000 / 7, 1)
    timeline = live.live_timeline(samples, 100.0, 100.5, 104.0)
    assert timeline == {
        "runner_started_s": 0.5, "revision_in_status_s": None, "first_batch_s": 4.0,
        "caught_up_s": 11.0, "keeping_up_in_status_s": None, "serving_s": 14.0,
        "log_moved_s": 14.0, "cutover_after_caught_up_s": 3.0,
    }  # fmt: skip
    headline = live.summary({"spark": {"rate_rps": 5000.0}}, {"timeline": timeline,
                                                               "catchup": section})  # fmt: skip
    assert headline["time_to_cutover_s"] == 14.0
    assert headline["catchup_to_steady"] == 3.5
    assert headline["serving_alone_rate_rps"] == 5000.0


def test_the_output_is_compared_as_multisets() -> None:
    row = {"id": 1, "user_id": "u1", "url": "x", "country": "DE", "duration_ms": 10}
    assert live.row_key(row) == live.row_key({**row, "ignored": True})
    assert live.row_key(row) != live.row_key({**row, "duration_ms": 11})
    one, two = live.row_key(row), live.row_key({**row, "id": 2})
    assert live.compare(Counter([one, two]), Counter([two, one]))["exact"]
    found = live.compare(Counter([one, two]), Counter([one, one]))
    assert found == {
        "exact": False, "output_records": 2, "expected_output_records": 2, "missing": 1,
        "unexpected": 1,
    }  # fmt: skip
