"""The Log controller on a real API server and a real broker, `direct` backend.

The operator runs as people run it (`distributary operator`, a separate process, the kubeconfig of
the test control plane); resources are applied with the real kubectl; topics are checked through
the Kafka Admin API. Nothing stands in for the API server, the operator or Kafka.
"""

from __future__ import annotations

import urllib.request
from typing import Any

from confluent_kafka import Producer
from tests.integration.kube.operator_harness import Cluster, Operator, condition, is_true, wait_for

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.cluster import client_config
from distributary.local.broker import EmbeddedBroker

NAMESPACE = "logs-test"


def log(name: str, partitions: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name},
        "spec": {"partitions": partitions, **spec},
    }


def ready(cluster: Cluster, name: str) -> bool:
    return is_true(cluster.get("dlog", name), "Ready")


def test_a_log_becomes_a_topic_and_reports_ready(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    cluster.apply(log("clicks", 3, retention={"time": "1h"}))
    wait_for("Log clicks Ready", lambda: ready(cluster, "clicks"), timeout=90)
    topic = KafkaAdmin(broker.bootstrap_servers).describe_topic("clicks")
    assert topic is not None
    assert topic.partitions == 3
    assert topic.configs.get("retention.ms") == "3600000"
    status = (cluster.get("dlog", "clicks") or {})["status"]
    assert status["topicName"] == "clicks"
    assert status["partitions"] == 3
    assert status["managedConfigs"] == ["retention.ms"]
    # kstatus: Ready is what `kubectl wait` reads.
    cluster.kubectl("wait", "-n", cluster.namespace, "--for=condition=Ready", "dlog/clicks")


def test_more_partitions_and_new_configs_are_applied(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    admin = KafkaAdmin(broker.bootstrap_servers)
    cluster.apply(log("grows", 2, retention={"time": "1h"}))
    wait_for("Log grows Ready", lambda: ready(cluster, "grows"))
    cluster.apply(log("grows", 4, retention={"time": "2h"}))

    def grown() -> bool:
        topic = admin.describe_topic("grows")
        return (
            topic is not None
            and topic.partitions == 4
            and topic.configs["retention.ms"] == "7200000"
        )

    wait_for("4 partitions and 2h retention", grown)
    wait_for("Log grows Ready at generation 2", lambda: ready(cluster, "grows"))


def test_a_refused_replica_change_stalls_the_log_with_a_message(
    cluster: Cluster, operator: Operator
) -> None:
    cluster.apply(log("pinned", 1))
    wait_for("Log pinned Ready", lambda: ready(cluster, "pinned"))
    cluster.apply(log("pinned", 1, replicas=2))
    stalled = wait_for("Stalled", lambda: condition(cluster.get("dlog", "pinned"), "Stalled"))
    assert stalled["status"] == "True"
    assert "replicas" in stalled["message"]
    assert (condition(cluster.get("dlog", "pinned"), "Ready") or {}).get("status") == "False"


def test_offsets_reach_status_and_metrics(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    cluster.apply(log("counted", 2))
    wait_for("Log counted Ready", lambda: ready(cluster, "counted"))
    producer = Producer(client_config(broker.bootstrap_servers))
    for i in range(10):
        producer.produce("counted", value=b"{}", partition=i % 2)
    assert producer.flush(30) == 0

    def status() -> dict[str, Any]:
        return dict((cluster.get("dlog", "counted") or {}).get("status") or {})

    wait_for("10 records in status", lambda: status().get("records") == 10)
    assert status()["endOffsets"] == {"0": 5, "1": 5}
    text = urllib.request.urlopen(operator.metrics_url, timeout=5).read().decode()
    assert 'distributary_log_records{log="counted",namespace="logs-test"} 10.0' in text
    assert 'distributary_reconciles_total{kind="Log",outcome="ok"}' in text


def test_deleting_a_log_keeps_its_topic_unless_the_policy_says_delete(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    admin = KafkaAdmin(broker.bootstrap_servers)
    cluster.apply(log("kept", 1), log("dropped", 1, deletionPolicy="Delete"))
    wait_for("both Ready", lambda: ready(cluster, "kept") and ready(cluster, "dropped"))
    assert "finalizers" not in (cluster.get("dlog", "kept") or {})["metadata"]  # Retain
    cluster.kubectl("delete", "dlog", "kept", "dropped", "-n", cluster.namespace, "--timeout=60s")
    wait_for("topic dropped deleted", lambda: admin.describe_topic("dropped") is None)
    assert admin.describe_topic("kept") is not None
