"""Each benchmark's `--smoke` picks its smallest form for what was not given, and says so
(`quick`); a value given on the command line still wins. tests/integration/test_benchmarks_run.py
runs each of them."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[3] / "bench"


def load(name: str, path: Path) -> ModuleType:
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    loader.exec_module(module)
    return module


def test_dataplane_smoke() -> None:
    dataplane = load("bench_dataplane_smoke", BENCH / "dataplane")
    args = dataplane.parse_args(["--smoke"])
    assert (args.records, args.rate, args.warmup, args.seconds, args.repeat) == (
        500, 200.0, 1.0, 2.0, 1,
    )  # fmt: skip
    assert args.quick
    assert dataplane.parse_args(["--smoke", "--records", "7"]).records == 7
    full = dataplane.parse_args([])
    assert (full.rate, full.warmup, full.repeat, full.smoke) == (5000.0, 5.0, None, False)


def test_controlplane_smoke() -> None:
    figures = load("bench_controlplane_figures_smoke", BENCH / "controlplane" / "figures.py")
    args = figures.parse_args(["--smoke"])
    assert (args.logs, args.views, args.settle, args.quick) == (5, 2, 1.0, True)
    assert figures.parse_args(["--smoke", "--views", "0"]).views == 0
    assert figures.parse_args([]).logs == 1000


def test_reprocess_smoke() -> None:
    figures = load("bench_reprocess_figures_smoke", BENCH / "reprocess" / "figures.py")
    args = figures.parse_args(["--smoke"])
    assert (args.records, args.steady_records, args.quick) == (1000, 300, True)


def test_cdc_smoke() -> None:
    figures = load("bench_cdc_figures_smoke", BENCH / "cdc" / "figures.py")
    args = figures.parse_args(["--smoke"])
    assert (args.rows, args.snapshot_rows, args.batch, args.rate) == (300, 100, 100, 50.0)
    assert (args.seconds, args.warmup, args.repeat) == (2.0, 1.0, 1)
    full = figures.parse_args([])
    assert (full.batch, full.rate) == (1000, 1000.0)


def test_chaos_smoke() -> None:
    chaos = load("bench_chaos_smoke", BENCH / "chaos")
    args = chaos.parse_args(["--smoke"])
    assert (args.seed, args.minutes, args.rate) == (1313, 0.0, 5.0)
    full = chaos.parse_args([])
    assert (full.seed, full.minutes, full.rate) == (None, 10.0, 10.0)
