"""The retention guard on a real API server and broker (`spark-operator` runtime, no Spark runs).

A reprocess reads its inputs from the start; when retention (here: records deleted from the head
of the input's partition, as retention does) has removed part of that history, the new revision
would silently miss records. So the operator refuses to start it: the view is Stalled with
`HistoryIncomplete`, naming the log, the partition and its first offset, while revision 1 keeps
serving. Allowing partial history in the spec lets the reprocess start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from tests.integration.kube.operator_harness import (
    Cluster,
    Operator,
    condition,
    is_true,
    wait_for,
    waiting,
)
from tests.integration.kube.spark_operator_bed import SPARK_CRDS

from distributary.kafka.cluster import client_config
from distributary.kafka.records import produce
from distributary.local.broker import EmbeddedBroker
from distributary.schema import RecordSchema

ROOT = Path(__file__).resolve().parents[3]
SPARK_CRD = SPARK_CRDS  # the release's CRDs, read from the Go module cache
SPARK_APPLICATION = "sparkapplications.sparkoperator.k8s.io"
NAMESPACE = "retention-guard-test"
EXTRA_CRDS = (SPARK_CRD,)
OPERATOR_FLAGS = ("--spark-runtime", "spark-operator")
SCHEMA = "user STRING, amount INT"
EVENTS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "rg-events"},
    "spec": {"partitions": 1, "schema": SCHEMA},
}


def guarded(threshold: int, **upgrade: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "rg-view"},
        "spec": {
            "inputs": [{"log": "rg-events", "alias": "events"}],
            "sql": f"SELECT user, amount FROM events WHERE amount >= {threshold}",
            "output": {"mode": "append"},
            "upgrade": upgrade,
        },
    }


def view(cluster: Cluster) -> dict[str, Any]:
    return cluster.get("dview", "rg-view") or {}


@pytest.fixture(scope="module")
def trimmed(cluster: Cluster, operator: Operator, broker: EmbeddedBroker) -> None:
    """Revision 1 running over a log whose first 4 records retention has removed."""
    cluster.apply(EVENTS)
    wait_for("Log rg-events Ready", lambda: is_true(cluster.get("dlog", "rg-events"), "Ready"))
    schema = RecordSchema.parse(SCHEMA, [])
    records = [{"user": f"u{i}", "amount": i} for i in range(10)]
    produce(broker.bootstrap_servers, "rg-events", [schema.encode(r) for r in records])
    client = AdminClient(client_config(broker.bootstrap_servers))
    for future in client.delete_records([TopicPartition("rg-events", 0, 4)]).values():
        future.result(timeout=30)
    cluster.apply(guarded(5))
    waiting(
        operator,
        "revision 1's application",
        lambda: cluster.get(SPARK_APPLICATION, "rg-view-r1"),
    )


def test_a_reprocess_over_lost_history_is_refused_and_revision_1_keeps_serving(
    trimmed: None, cluster: Cluster, operator: Operator
) -> None:
    cluster.apply(guarded(7))

    def stalled() -> dict[str, Any] | None:
        found = condition(view(cluster), "Stalled")
        return found if found and found["status"] == "True" else None

    found = waiting(operator, "Stalled HistoryIncomplete", stalled)
    assert found["reason"] == "HistoryIncomplete"
    assert (
        "input log rg-events (topic rg-events) has lost its history to retention"
        in (found["message"])
    )
    assert "partition 0 starts at offset 4, not 0" in found["message"]
    assert "allowPartialHistory: true" in found["message"]
    status = view(cluster)["status"]
    assert status["servingRevision"] == 1
    assert [r["revision"] for r in status["revisions"]] == [1]
    assert cluster.get(SPARK_APPLICATION, "rg-view-r2") is None
    assert cluster.get(SPARK_APPLICATION, "rg-view-r1") is not None


def test_allowing_partial_history_lets_the_reprocess_start(
    trimmed: None, cluster: Cluster, operator: Operator
) -> None:
    cluster.apply(guarded(7, allowPartialHistory=True))
    waiting(
        operator, "revision 2's application", lambda: cluster.get(SPARK_APPLICATION, "rg-view-r2")
    )
    rows = {r["revision"]: r["phase"] for r in view(cluster)["status"]["revisions"]}
    assert rows == {1: "Serving", 2: "CatchingUp"}
