"""`examples/clickstream` under the operator, its first view's SQL changed: reprocess and cutover.

The example is applied with kubectl as a person would, with its demo data; once every view has
caught up, the filter of `enriched-page-views` is made stricter. The view reprocesses beside its
serving revision and cuts over; `views-per-country`, which reads its output, reprocesses in turn
from the new topic; `views-per-user`, which reads the raw page views, keeps its revision. Real
API server, real broker, real Spark (`local` runtime).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.kube.operator_harness import Cluster, Operator, is_true, read_to_the_end
from tests.integration.kube.operator_harness import waiting as harness_waiting
from tests.integration.spark_pipelines import read_topic

from distributary.local.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "clickstream"
DATA = EXAMPLE / "data" / "page-views.jsonl"
NAMESPACE = "clickstream-reprocess"
OPERATOR_FLAGS = ("--spark-runtime", "local")
KEPT, STRICTER = "duration_ms >= 0", "duration_ms >= 1000"
VIEWS = ("enriched-page-views", "views-per-user", "views-per-country")


def example_views(stricter: bool) -> list[dict[str, Any]]:
    """The example's views, with a short cutover window, the first one's filter as asked."""
    text = (EXAMPLE / "views.yaml").read_text()
    if stricter:
        text = text.replace(KEPT, STRICTER)
    views = [v for v in yaml.safe_load_all(text) if v]
    for view in views:
        view["spec"]["upgrade"] = {"cutoverWindow": "1s"}
        view["spec"].setdefault("spark", {})["trigger"] = "1s"
    return views


def view(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.get("dview", name) or {}


def serving(cluster: Cluster, name: str) -> int | None:
    return (view(cluster, name).get("status") or {}).get("servingRevision")


def settled(cluster: Cluster, broker: EmbeddedBroker, name: str, revision: int) -> bool:
    found = view(cluster, name)
    return (
        (found.get("status") or {}).get("servingRevision") == revision
        and not is_true(found, "Reprocessing")
        and read_to_the_end(found, broker.bootstrap_servers)
    )


def waiting(operator: Operator, what: str, probe: Any, timeout: float = 300) -> Any:
    """`waiting` with this module's longer default (three views on two cores)."""
    return harness_waiting(operator, what, probe, timeout)


@pytest.fixture(scope="module")
def edited(cluster: Cluster, operator: Operator, broker: EmbeddedBroker) -> None:
    """The example caught up at revision 1, then its first view's SQL made stricter."""
    cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLE / "logs.yaml"))
    waiting(
        operator, "page-views Ready", lambda: is_true(cluster.get("dlog", "page-views"), "Ready")
    )
    subprocess.run(
        [
            sys.executable, "-m", "distributary.cli", "produce", "page-views",
            "--file", str(DATA), "--pipeline", str(EXAMPLE),
            "--bootstrap-servers", broker.bootstrap_servers,
        ],
        check=True, capture_output=True,
    )  # fmt: skip
    cluster.apply(*example_views(stricter=False))
    waiting(
        operator,
        "every view caught up at revision 1",
        lambda: all(settled(cluster, broker, name, 1) for name in VIEWS),
        timeout=400,
    )
    cluster.apply(*example_views(stricter=True))


def test_the_edited_view_and_its_reader_cut_over_and_the_other_view_stays(
    edited: None, cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    waiting(
        operator,
        "enriched-page-views and views-per-country at revision 2",
        lambda: (
            settled(cluster, broker, "enriched-page-views", 2)
            and settled(cluster, broker, "views-per-country", 2)
        ),
        timeout=400,
    )
    assert serving(cluster, "views-per-user") == 1
    change = view(cluster, "enriched-page-views")["status"]["lastChange"]
    assert change["classification"] == "Reprocess"
    reader = view(cluster, "views-per-country")["status"]
    assert [i["topic"] for i in reader["inputs"]] == ["enriched-page-views.r2"]
    log = (cluster.get("dlog", "enriched-page-views") or {}).get("status") or {}
    assert log.get("topicName") == "enriched-page-views.r2"
    records = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    kept = [
        r
        for r in records
        if r.get("user_id") is not None
        and r.get("url") is not None
        and r.get("duration_ms") is not None
        and r["duration_ms"] >= 1000
    ]
    output = read_topic(broker.bootstrap_servers, "enriched-page-views.r2")
    assert len(output) == len(kept)
    assert all(json.loads(r.value or b"{}")["duration_ms"] >= 1000 for r in output)
