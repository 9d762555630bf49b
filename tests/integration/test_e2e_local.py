"""`make e2e-local` converges: the clickstream example, applied with kubectl to a real API server
and run by the operator on the embedded broker and local Spark, ends Ready and caught up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_clickstream_example_converges_through_the_operator(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "e2e" / "local.py"), "--state-dir", str(tmp_path / "e2e")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(summary["views"]) == {"enriched-page-views", "views-per-user", "views-per-country"}
    for name, view in summary["views"].items():
        assert view == {
            "revision": 1,
            "outputTopic": f"{name}.r1",
            "lag": 0,
            "ready": True,
        }, name
    assert summary["logs"]["page-views"]["records"] == 308
    # The view's filter keeps 302; written in transactions, its topic's offsets also count one
    # commit marker per transaction and partition.
    assert summary["logs"]["enriched-page-views"]["records"] >= 302
    assert "derivedview.distributary.dev/views-per-country" in result.stdout
