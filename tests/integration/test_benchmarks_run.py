"""Each benchmark's smallest form (`--smoke`) runs as a person runs it, so a change that breaks
a benchmark fails the suite rather than the next person who measures.

Every benchmark is a subprocess started as `bench/<name> --smoke`, on the parts it starts itself
(its own broker, control plane, PostgreSQL, in a temporary folder); its figures mean nothing at
this size and are not judged. What is judged is that it ran to the end: exit 0 and a last stdout
line of JSON that says every step completed and its output was exact.

`bench/controlplane --smoke` runs with the Kubernetes tests
(`kube/test_controlplane_bench_smoke.py`): it needs the control plane's programs built.
`bench/reprocess --smoke` and `bench/chaos --smoke` take minutes even at their smallest (Spark
starts again at each cutover and each chaos action), more than the suite can give them: the
chaos driver is the one `tests/integration/kube/test_chaos.py` runs, and both have their
arguments checked in `tests/unit/bench`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"


def smoke(name: str, timeout: float, *extra: str) -> dict[str, Any]:
    """Run `bench/<name> --smoke`; its report (the last stdout line), failing with its stderr."""
    command = [sys.executable, str(BENCH / name), "--smoke", *extra]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        said = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise AssertionError(
            f"bench/{name} --smoke ran past {timeout:.0f}s:\n{said[-4000:]}"
        ) from None
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, f"bench/{name} exited {done.returncode}:\n{done.stderr[-4000:]}"
    assert lines, f"bench/{name} printed no report:\n{done.stderr[-4000:]}"
    report = json.loads(lines[-1])
    assert report["benchmark"] == name, report
    return report


def test_dataplane_smoke_runs_every_query_to_its_exact_output() -> None:
    report = smoke("dataplane", 900)
    assert report["smoke"] is True
    for query in ("handwritten", "runner"):
        run = report[query]
        assert run["status"] == "ok", (query, run)
        assert run["output_records"] == run["expected_output_records"] > 0
    fresh = report["freshness"]
    assert fresh["query"] == "runner"
    assert fresh["matched"] == fresh["expected"] > 0, fresh


def test_cdc_smoke_captures_serves_and_sinks_every_row() -> None:
    report = smoke("cdc", 900)
    assert report["rows"] == 300
    capture = report["capture"]
    assert capture["status"] == capture["snapshot"]["status"] == "ok", capture
    assert report["freshness"]["status"] == "ok", report["freshness"]
    assert report["sink"]["sink"]["status"] == report["sink"]["plain"]["status"] == "ok"


def test_tables_smoke_keeps_the_view_exact_and_recomputes_the_same_answer() -> None:
    report = smoke("tables", 900)
    assert report["smoke"] is True
    assert report["maintained"]["exact"] is True, report["maintained"]
    assert report["maintained"]["batches"] > 0
    assert report["recompute"]["exact"] is True, report["recompute"]
    fresh = report["freshness"]
    assert 0 < fresh["matched"] <= fresh["markers"], fresh
