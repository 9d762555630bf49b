"""The operator with the `strimzi` topic backend on a real API server: a Log becomes a KafkaTopic
labelled for its Kafka cluster, and the Log follows what the topic operator reports.

Strimzi's topic operator ships only as a container image, so the test writes the KafkaTopic's
status through its status subresource as the topic operator would (see test_strimzi_backend.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.kube.operator_harness import Cluster, Operator, condition, is_true, wait_for
from tests.integration.kube.test_strimzi_backend import install_strimzi_crd

KAFKA_TOPIC = "kafkatopics.kafka.strimzi.io"
NAMESPACE = "strimzi-test"
OPERATOR_FLAGS = ("--topic-backend", "strimzi", "--strimzi-cluster", "events-cluster")


@pytest.fixture(scope="module")
def cluster(control_plane: Any, kubectl: Any) -> Cluster:
    kube = Cluster(control_plane.kubeconfig, NAMESPACE)
    kube.install_crds()
    install_strimzi_crd(kubectl, "v1-and-v1beta2")
    return kube


def set_topic_status(cluster: Cluster, name: str, ready: bool, reason: str, message: str) -> None:
    topic = cluster.get(KAFKA_TOPIC, name) or {}
    status = {
        "observedGeneration": topic["metadata"]["generation"],
        "topicName": topic["spec"].get("topicName", name),
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": "2026-11-22T12:00:00Z",
            }
        ],
    }
    cluster.kubectl(
        "patch", KAFKA_TOPIC, name, "-n", cluster.namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip


def test_a_log_becomes_a_kafka_topic_and_is_ready_when_the_topic_operator_says_so(
    cluster: Cluster, operator: Operator
) -> None:
    cluster.apply(
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": "orders"},
            "spec": {"partitions": 3, "retention": {"time": "1h"}},
        }
    )
    topic = wait_for("the KafkaTopic", lambda: cluster.get(KAFKA_TOPIC, "orders"))
    assert topic["apiVersion"] == "kafka.strimzi.io/v1"
    assert topic["metadata"]["labels"]["strimzi.io/cluster"] == "events-cluster"
    assert topic["spec"]["partitions"] == 3
    assert topic["spec"]["config"]["retention.ms"] == "3600000"
    waiting = wait_for(
        "Reconciling", lambda: condition(cluster.get("dlog", "orders"), "Reconciling")
    )
    assert waiting["status"] == "True"
    set_topic_status(cluster, "orders", True, "Ready", "")
    wait_for("Log Ready", lambda: is_true(cluster.get("dlog", "orders"), "Ready"), timeout=90)


def test_a_refusal_by_the_topic_operator_stalls_the_log_with_its_message(
    cluster: Cluster, operator: Operator
) -> None:
    cluster.apply(
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": "shrinks"},
            "spec": {"partitions": 2},
        }
    )
    wait_for("the KafkaTopic", lambda: cluster.get(KAFKA_TOPIC, "shrinks"))
    set_topic_status(
        cluster, "shrinks", False, "NotSupported", "Decreasing partitions not supported"
    )
    stalled = wait_for(
        "Stalled", lambda: condition(cluster.get("dlog", "shrinks"), "Stalled"), timeout=90
    )
    assert stalled["status"] == "True"
    assert "Decreasing partitions not supported" in stalled["message"]
