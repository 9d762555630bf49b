"""The pure parts of bench/dataplane: its command line, its records and its arithmetic.

The script has no .py suffix (it is run as `bench/dataplane`), so it is loaded by path; loading it
runs nothing, since the benchmark starts only under `__main__`.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "dataplane"


def load() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("bench_dataplane", str(SCRIPT))
    spec = importlib.util.spec_from_loader("bench_dataplane", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    loader.exec_module(module)
    return module


dataplane = load()


def test_defaults_are_the_full_run() -> None:
    args = dataplane.parse_args([])
    assert (args.records, args.rate, args.seconds, args.warmup) == (1_000_000, 5000.0, 30.0, 5.0)
    assert args.trigger == "500ms"
    assert not args.quick


def test_quick_is_small_unless_told_otherwise() -> None:
    quick = dataplane.parse_args(["--quick"])
    assert (quick.records, quick.seconds) == (50_000, 10.0)
    told = dataplane.parse_args(["--quick", "--records", "7", "--seconds", "3"])
    assert (told.records, told.seconds) == (7, 3.0)


@pytest.mark.parametrize(
    "argv",
    [
        ["--records", "0"],
        ["--rate", "0"],
        ["--seconds", "-1"],
        ["--warmup", "-1"],
        ["--trigger", "AvailableNow"],
        ["--trigger", "soon"],
    ],
)
def test_nonsense_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        dataplane.parse_args(argv)
    assert exited.value.code == 2
    assert "--" in capsys.readouterr().err


def test_records_are_json_of_about_200_bytes_with_their_id() -> None:
    for i in (0, 1, 49_999, 999_999, 10**12):
        value = dataplane.record_value(i)
        assert 180 <= len(value) <= 220, len(value)
        record = json.loads(value)
        assert record["id"] == i
        assert record["duration_ms"] == dataplane.duration_ms(i)


def test_the_filter_keeps_four_records_in_five() -> None:
    kept = dataplane.expected_outputs(range(10_000))
    assert kept == 8_000
    assert dataplane.expected_outputs(range(3)) == sum(
        dataplane.duration_ms(i) >= 2000 for i in range(3)
    )


def test_percentiles_interpolate_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert dataplane.percentile(values, 50) == pytest.approx(50.5)
    assert dataplane.percentile(values, 99) == pytest.approx(99.01)
    assert dataplane.percentile(list(reversed(values)), 0) == 1.0
    assert dataplane.percentile([7.0], 99) == 7.0
    assert dataplane.percentile([], 50) is None


def test_ratios_need_both_figures() -> None:
    assert dataplane.ratio(95.0, 100.0) == 0.95
    assert dataplane.ratio(1.0, 3.0) == 0.333
    assert dataplane.ratio(None, 100.0) is None
    assert dataplane.ratio(5.0, 0.0) is None
    assert dataplane.per_second(1000, 4.0) == 250.0
    assert dataplane.per_second(1000, None) is None


def test_query_time_spans_the_batches_that_read_data() -> None:
    batches = [
        {"timestamp": "2025-01-01T00:00:00.000Z", "numInputRows": 10, "batchDuration": 1500},
        {"timestamp": "2025-01-01T00:00:02.000Z", "numInputRows": 5, "batchDuration": 500},
        {"timestamp": "2025-01-01T00:00:09.000Z", "numInputRows": 0, "batchDuration": 90},
    ]
    assert dataplane.query_seconds(batches) == 2.5
    runner_style = [{"timestamp": 1_000, "numInputRows": 3, "batchDurationMs": 250}]
    assert dataplane.query_seconds(runner_style) == 0.25
    assert dataplane.query_seconds([]) is None
