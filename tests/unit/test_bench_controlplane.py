"""The pure parts of bench/controlplane: its command line, the objects it applies, readiness, and
the arithmetic of its figures from the API server's and the operator's metrics text.

The benchmark is a folder run as a program (`python bench/controlplane`), not a package, so its
`figures.py` is loaded by path; loading it runs nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from distributary.api import parse_resource
from distributary.graph import Pipeline

FIGURES = Path(__file__).resolve().parents[2] / "bench" / "controlplane" / "figures.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_controlplane_figures", FIGURES)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


figures = load()

APISERVER_METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="distributary.dev",\
resource="logs",scope="namespace",subresource="",verb="POST",version="v1alpha1"} 40
apiserver_request_total{code="409",component="apiserver",dry_run="",group="distributary.dev",\
resource="logs",scope="namespace",subresource="",verb="POST",version="v1alpha1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="distributary.dev",\
resource="logs",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 7
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",\
subresource="/metrics",verb="GET",version=""} 3
apiserver_request_total_other{verb="GET"} 99
apiserver_request_duration_seconds_count{verb="GET"} 5
"""


def test_defaults_are_the_full_run_and_quick_is_small() -> None:
    full = figures.parse_args([])
    assert (full.logs, full.views, full.partitions, full.timeout) == (1000, 300, 1, 600.0)
    assert full.settle == full.observe_interval + 5 == 35.0
    quick = figures.parse_args(["--quick"])
    assert (quick.logs, quick.views, quick.timeout) == (50, 15, 180.0)
    assert figures.parse_args(["--quick", "--logs", "80"]).logs == 80


@pytest.mark.parametrize("argv", [["--logs", "0"], ["--logs", "5", "--views", "6"]])
def test_impossible_workloads_are_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        figures.parse_args(argv)
    assert "view i reads log i" in capsys.readouterr().err


def test_the_workload_is_valid_and_every_view_reads_its_own_log() -> None:
    manifests = figures.workload(logs=4, views=2, partitions=3)
    assert [m["kind"] for m in manifests] == ["Log"] * 4 + ["DerivedView"] * 2
    resources = [parse_resource(m) for m in manifests]
    pipeline = Pipeline.build(resources)
    assert pipeline.problems == ()
    assert manifests[4]["spec"]["inputs"][0]["log"] == figures.log_name(0)
    assert manifests[0]["spec"]["partitions"] == 3


def test_ready_means_true_at_the_current_generation() -> None:
    def log(status: str, observed: int) -> dict[str, object]:
        condition = {"type": "Ready", "status": status, "observedGeneration": observed}
        return {"metadata": {"generation": 2}, "status": {"conditions": [condition]}}

    assert figures.is_ready(log("True", 2))
    assert not figures.is_ready(log("True", 1))
    assert not figures.is_ready(log("Unknown", 2))
    assert not figures.is_ready({"metadata": {"generation": 1}})


def test_all_ready_is_the_first_moment_all_are_ready_at_once() -> None:
    readiness = figures.Readiness(frozenset({"a", "b"}), started=100.0)
    readiness.observe("a", True, 101.0)
    readiness.observe("a", False, 102.0)  # flipped back: counts again
    readiness.observe("b", True, 103.0)
    readiness.observe("other", True, 103.5)  # not applied by the benchmark: ignored
    assert not readiness.done
    readiness.observe("a", True, 104.25)
    assert readiness.done
    assert readiness.all_ready_at == 4.25
    readiness.observe("b", False, 110.0)
    assert readiness.all_ready_at == 4.25


def test_request_counts_sum_codes_by_resource_and_verb() -> None:
    counts = figures.request_counts(APISERVER_METRICS)
    assert counts == {
        ("logs", "POST"): 42.0,
        ("logs/status", "PATCH"): 7.0,
        ("/metrics", "GET"): 3.0,
    }


def test_request_delta_keeps_what_grew_largest_first() -> None:
    before = {("logs", "POST"): 2.0, ("logs/status", "PATCH"): 7.0}
    after = {("logs", "POST"): 42.0, ("logs/status", "PATCH"): 7.0, ("events", "POST"): 5.0}
    assert figures.request_delta(before, after) == {"logs POST": 40, "events POST": 5}


def test_proc_fields_and_cpu_time() -> None:
    status = "Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t18\n"
    assert figures.proc_status_kib(status, "VmHWM") == 204800
    assert figures.proc_status_kib(status, "VmSwap") is None
    assert figures.proc_status_count(status, "Threads") == 18
    fields = " ".join(["S", *["0"] * 10, "250", "50", *["0"] * 8])
    assert figures.cpu_seconds(f"4242 (kube apiserver) {fields}", 100) == 3.0


def test_reconcile_summary_from_the_operators_metrics() -> None:
    text = (
        'distributary_reconciles_total{kind="Log",outcome="ok"} 1000.0\n'
        'distributary_reconciles_total{kind="Log",outcome="temporary"} 5.0\n'
        'distributary_reconcile_duration_seconds_sum{kind="Log"} 502.5\n'
        'distributary_reconcile_duration_seconds_count{kind="Log"} 1005.0\n'
    )
    assert figures.reconcile_summary(text) == {
        "Log": {"outcomes": {"ok": 1000, "temporary": 5}, "seconds": 502.5, "timed": 1005,
                "mean_ms": 500.0}
    }  # fmt: skip


def test_report_divides_by_what_was_applied_and_leaves_the_benchmark_out() -> None:
    args = argparse.Namespace(
        quick=False, logs=1000, views=300, partitions=1, observe_interval=30.0, apply_threads=8,
        real_spark_operator=False,
    )  # fmt: skip
    ready = {"logs": 20.0, "output_logs": 40.0, "views": 65.0}
    requests = {"logs POST": 1000, "logs/status PATCH": 1300, "derivedviews POST": 300}
    own = {"logs POST": 1000, "derivedviews POST": 300}
    report = figures.report(args, ready, 3.5, requests, own)
    assert report["status"] == "ok"
    assert report["spark_operator"] == "stand-in"
    assert report["all_ready_seconds"] == 65.0
    assert report["objects_per_second"] == 20.0
    assert report["api_requests_per_object"] == 2.0
    assert report["operator_api_requests_per_object"] == 1.0
    timed_out = figures.report(args, {**ready, "views": None}, 3.5, requests, own)
    assert (timed_out["status"], timed_out["all_ready_seconds"]) == ("timeout", None)


def test_targets_hold_only_for_the_full_thousand_logs() -> None:
    met = figures.targets(29.0, 150.0, logs=1000)
    assert (met["logs_ready_met"], met["peak_memory_met"]) == (True, True)
    missed = figures.targets(83.0, 440.0, logs=1000)
    assert (missed["logs_ready_met"], missed["peak_memory_met"]) == (False, False)
    assert figures.targets(5.0, 100.0, logs=50)["logs_ready_met"] is None
