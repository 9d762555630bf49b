"""The pure parts of bench/reprocess: its command line, the view it applies, and the arithmetic
that turns status samples and the runner's progress records into its figures.

The benchmark is a folder run as a program (`python bench/reprocess`), not a package, so its
`figures.py` is loaded by path; loading it runs nothing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from distributary.api import parse_resource
from distributary.api.log import Log
from distributary.api.view import DerivedView

FIGURES = Path(__file__).resolve().parents[3] / "bench" / "reprocess" / "figures.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_reprocess_figures", FIGURES)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


figures = load()
Sample, Batch = figures.Sample, figures.Batch


def test_defaults_are_the_full_run() -> None:
    args = figures.parse_args([])
    assert (args.records, args.steady_records) == (1_000_000, 300_000)
    assert (args.trigger, args.cutover_window, args.observe_interval) == ("500ms", "2s", 2.0)
    assert args.max_offsets_per_trigger is None
    assert not args.quick


def test_help_prints(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        figures.parse_args(["--help"])
    assert exited.value.code == 0
    assert "(default 30%)" in " ".join(capsys.readouterr().out.split())


def test_quick_is_small_unless_told_otherwise() -> None:
    quick = figures.parse_args(["--quick"])
    assert (quick.records, quick.steady_records) == (100_000, 30_000)
    told = figures.parse_args(["--quick", "--records", "10", "--steady-records", "4"])
    assert (told.records, told.steady_records) == (10, 4)


@pytest.mark.parametrize(
    "argv",
    [
        ["--records", "1"],
        ["--records", "10", "--steady-records", "10"],
        ["--steady-records", "0"],
        ["--observe-interval", "0.5"],
        ["--timeout", "0"],
        ["--trigger", "soon"],
        ["--cutover-window", "2 seconds"],
        ["--max-offsets-per-trigger", "0"],
    ],
)
def test_nonsense_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        figures.parse_args(argv)
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_the_two_sqls_differ_and_the_manifests_are_valid_resources() -> None:
    assert figures.SQL_BEFORE != figures.SQL_AFTER
    log = parse_resource(figures.log_manifest() | {"metadata": {"name": figures.LOG}})
    assert isinstance(log, Log)
    assert log.spec.partitions == figures.PARTITIONS
    view = parse_resource(figures.view_manifest(figures.SQL_AFTER, "500ms", "2s", 5000))
    assert isinstance(view, DerivedView)
    assert view.spec.sql == figures.SQL_AFTER
    assert view.spec.upgrade.cutover_window == "2s"
    assert view.spec.upgrade.cutover_max_lag == 0
    assert view.spec.spark.max_offsets_per_trigger == 5000
    unset = figures.view_manifest(figures.SQL_BEFORE, "500ms", "2s")
    assert "maxOffsetsPerTrigger" not in unset["spec"]["spark"]


def test_data_batches_keep_those_with_rows_once_each_in_order() -> None:
    progress = [
        {"batchId": 2, "timestamp": "2026-11-22T10:00:03.000Z", "numInputRows": 50,
         "batchDurationMs": 500},
        {"batchId": 0, "timestamp": "2026-11-22T10:00:00.000Z", "numInputRows": 0,
         "batchDurationMs": 100},
        {"batchId": 1, "timestamp": "2026-11-22T10:00:01.000Z", "numInputRows": 100,
         "batchDurationMs": 1000},
        {"batchId": 2, "timestamp": "2026-11-22T10:00:03.000Z", "numInputRows": 50,
         "batchDurationMs": 500},  # published twice
        {"state": "Running"},
    ]  # fmt: skip
    batches = figures.data_batches(progress)
    assert [(b.rows, b.seconds) for b in batches] == [(100, 1.0), (50, 0.5)]
    assert batches[1].start - batches[0].start == pytest.approx(2.0)


def test_spark_rate_counts_the_gaps_between_batches() -> None:
    batches = [Batch(100.0, 1.0, 1000), Batch(102.0, 1.0, 1000)]
    assert figures.spark_rate(batches) == {
        "batches": 2, "rows": 2000, "query_s": 3.0, "rate_rps": 666.7,
    }  # fmt: skip
    assert figures.spark_rate([])["rate_rps"] is None
    assert [b.start for b in figures.between(batches, 101.0)] == [102.0]
    assert [b.start for b in figures.between(batches, 0, 101.0)] == [100.0]


def timeline_samples() -> list[object]:
    return [
        Sample(at=99.0, serving=1, log_topic="bench-filter.r1", committed={1: 10}),
        Sample(at=101.0, serving=1, log_topic="bench-filter.r1", phases={1: "Serving",
               2: "CatchingUp"}, committed={1: 10, 2: 0}),
        Sample(at=110.0, serving=1, log_topic="bench-filter.r1", committed={1: 10, 2: 10}),
        Sample(at=111.0, serving=1, log_topic="bench-filter.r1", committed={1: 10, 2: 10},
               lag_zero=frozenset({2})),
        Sample(at=113.0, serving=2, log_topic="bench-filter.r1", committed={1: 10, 2: 10}),
        Sample(at=113.5, serving=2, log_topic="bench-filter.r2", committed={1: 10, 2: 10}),
    ]  # fmt: skip


def test_the_cutover_timeline_runs_from_the_sql_change() -> None:
    timeline = figures.cutover_timeline(timeline_samples(), 100.0, 10, first_batch=105.0)
    assert timeline == {
        "revision_in_status_s": 1.0,
        "first_batch_s": 5.0,
        "caught_up_s": 10.0,
        "lag_zero_in_status_s": 11.0,
        "serving_s": 13.0,
        "log_moved_s": 13.5,
        "cutover_after_caught_up_s": 3.5,
    }


def test_a_cutover_never_seen_is_none_not_a_guess() -> None:
    samples = timeline_samples()[:4]
    timeline = figures.cutover_timeline(samples, 100.0, 10, first_batch=None)
    assert timeline["log_moved_s"] is None
    assert timeline["first_batch_s"] is None
    assert timeline["caught_up_s"] == 10.0


def test_the_report_sections_and_the_headline() -> None:
    first = {"revision": 1, "records": 70, "produce_s": 0.1, "applied": 0.0,
             "runner_started": 0.5, "caught_up": 20.0}  # fmt: skip
    calm = {"revision": 1, "records": 30, "produce_s": 0.1, "produce_rate_rps": 300.0,
            "started": 30.0, "caught_up": 33.0}  # fmt: skip
    new = {"revision": 2, "records": 10, "apply_s": 0.2, "applied": 100.0,
           "runner_started": 100.5}  # fmt: skip
    sections = {
        "first_catchup": figures.catchup_section(first, [Batch(10.0, 7.0, 70)]),
        "steady": figures.steady_section(calm, [Batch(30.5, 1.0, 20), Batch(31.5, 1.0, 10)]),
        "reprocess": figures.reprocess_section(new, timeline_samples(), [Batch(105.0, 4.0, 10)]),
    }
    assert sections["first_catchup"]["first_batch_s"] == 10.0
    assert sections["first_catchup"]["wall_rate_rps"] == 7.0  # 70 records, batch start to group
    assert sections["steady"]["wall_rate_rps"] == 10.0  # 30 records, first append to group
    assert sections["reprocess"]["timeline"]["runner_started_s"] == 0.5
    assert sections["reprocess"]["wall_rate_rps"] == 2.0  # 10 records from 105 to 110
    assert figures.summary(sections) == {
        "time_to_cutover_s": 13.5,
        "catchup_rate_rps": 2.5,
        "steady_rate_rps": 15.0,
        "catchup_to_steady": 0.167,
    }


def test_the_bound_names_the_window_and_the_observe_interval() -> None:
    text = figures.lower_bound(2.0, 2.0)
    assert "cutoverWindow (2s)" in text
    assert "sleeps 2s between rounds" in text
    assert "at least 2s" in text
    assert "at least 10s" in figures.lower_bound(10.0, 2.0)
