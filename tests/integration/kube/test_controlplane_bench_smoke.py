"""`bench/controlplane --smoke` runs as a person runs it (see `test_benchmarks_run.py`): here,
among the Kubernetes tests, since it starts a control plane of its own from the programs built
once per machine."""

from __future__ import annotations

from tests.integration.test_benchmarks_run import smoke


def test_controlplane_smoke_makes_every_log_and_view_ready() -> None:
    report = smoke("controlplane", 600)
    assert report["status"] == "ok", report
    assert (report["logs"], report["views"]) == (5, 2)
    assert report["all_ready_seconds"] is not None
