"""The operator as a cluster runs it: the chart installed with helm, the operator in its pod on
the test node, from the image `make images` builds, as the chart's ServiceAccount.

- The chart's Deployment becomes available: its one pod runs the operator image on the node as
  the chart's account, its probes pass.
- A Log applied with kubectl is made a topic on the broker (reached from the pod at the node's
  address) and reports Ready.
- The operator's pod deleted while Logs are applied: the Deployment starts another, which makes
  the Logs applied meanwhile topics and Ready, each once, with nobody's help.
"""

from __future__ import annotations

from typing import Any

from tests.integration.kube.operator_harness import Cluster, is_true, wait_for
from tests.integration.pods.pods import RELEASE, SELECTOR, SYSTEM

from distributary.devtools.node import Node
from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker


def operator_pods(node: Node) -> list[dict[str, Any]]:
    path = f"/api/v1/namespaces/{SYSTEM}/pods?labelSelector={SELECTOR.replace('=', '%3D')}"
    return list(node.api("GET", path)["items"])


def log(name: str, partitions: int) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name},
        "spec": {"partitions": partitions},
    }


def ready(kube: Cluster, name: str) -> bool:
    return is_true(kube.get("dlog", name), "Ready")


def test_the_operator_runs_in_its_pod_from_its_image_as_the_charts_account(
    installed: Cluster, node: Node, operator_image: str
) -> None:
    [pod] = operator_pods(node)
    assert pod["spec"]["nodeName"] == node.name
    assert pod["spec"]["serviceAccountName"] == RELEASE
    [container] = pod["status"]["containerStatuses"]
    assert container["ready"] is True, pod["status"]
    assert container["image"].endswith(operator_image), container["image"]
    assert container["restartCount"] == 0, installed.kubectl(
        "logs", "-n", SYSTEM, pod["metadata"]["name"]
    )


def test_a_log_is_made_a_topic_by_the_operator_in_its_pod(
    installed: Cluster, pods_broker: EmbeddedBroker
) -> None:
    installed.apply(log("clicks", 3))
    wait_for("Log clicks Ready", lambda: ready(installed, "clicks"), timeout=120)
    topic = KafkaAdmin(pods_broker.bootstrap_servers).describe_topic("clicks")
    assert topic is not None
    assert topic.partitions == 3


def test_the_operators_pod_deleted_while_logs_are_applied_is_replaced_and_carries_on(
    installed: Cluster, node: Node, pods_broker: EmbeddedBroker
) -> None:
    [first] = operator_pods(node)
    names = [f"during-{i}" for i in range(6)]
    installed.apply(*(log(name, 2) for name in names[:3]))
    installed.kubectl("delete", "pod", "-n", SYSTEM, first["metadata"]["name"], "--wait=false")
    installed.apply(*(log(name, 2) for name in names[3:]))

    def replaced() -> dict[str, Any] | None:
        for pod in operator_pods(node):
            statuses = pod["status"].get("containerStatuses") or [{}]
            if pod["metadata"]["uid"] != first["metadata"]["uid"] and statuses[0].get("ready"):
                return pod
        return None

    wait_for("a new operator pod, ready", replaced, timeout=180)
    for name in names:
        wait_for(f"Log {name} Ready", lambda name=name: ready(installed, name), timeout=120)
    admin = KafkaAdmin(pods_broker.bootstrap_servers)
    for name in names:
        topic = admin.describe_topic(name)
        assert topic is not None, name
        assert topic.partitions == 2
