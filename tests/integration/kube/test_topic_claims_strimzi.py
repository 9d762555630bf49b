"""Two teams' namespaces applying the same Log under the `strimzi` topic backend, each KafkaTopic in
its Log's own namespace: the same rule as under `direct` (`test_topic_claims.py`).

Strimzi's annotation on a KafkaTopic tells its Log only within one namespace; two namespaces'
KafkaTopics for one Kafka topic would each look like their own Log's. The claims topic decides:
the second Log is Stalled (`TopicTaken`) naming the first and no KafkaTopic is made for it, and
deleting it (`deletionPolicy: Delete`) leaves the first's KafkaTopic alone. Strimzi's topic
operator ships only as an image, so the test writes the KafkaTopic's status as it would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kube.operator_harness import Cluster, Operator, condition, is_true, waiting
from tests.integration.kube.test_log_controller_strimzi import KAFKA_TOPIC, set_topic_status
from tests.integration.kube.test_strimzi_backend import install_strimzi_crd

from distributary.devtools.controlplane import ControlPlane
from distributary.local.broker import EmbeddedBroker

NS_A, NS_B = "strimzi-claims-a", "strimzi-claims-b"
CLAIMS = "distributary.strimzi-claims-test.claims"


@pytest.fixture(scope="module")
def teams(control_plane: ControlPlane, kubectl: Any) -> tuple[Cluster, Cluster]:
    first, second = Cluster(control_plane.kubeconfig, NS_A), Cluster(control_plane.kubeconfig, NS_B)
    first.install_crds()
    second.install_crds()
    install_strimzi_crd(kubectl, "v1-and-v1beta2")
    return first, second


@pytest.fixture(scope="module")
def operator(
    teams: tuple[Cluster, Cluster], broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    folder: Path = tmp_path_factory.mktemp("operator")
    flags = ("--namespace", NS_B, "--topic-backend", "strimzi", "--claims-topic", CLAIMS)
    running = Operator(teams[0], broker.bootstrap_servers, folder, flags)
    running.start()
    yield running
    running.stop()


def log(name: str) -> dict[str, Any]:
    spec = {"partitions": 1, "deletionPolicy": "Delete"}
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_the_second_teams_log_makes_no_kafka_topic_and_its_deletion_leaves_the_first(
    teams: tuple[Cluster, Cluster], operator: Operator
) -> None:
    first, second = teams
    first.apply(log("orders"))
    waiting(operator, "team a's KafkaTopic", lambda: first.get(KAFKA_TOPIC, "orders"))
    set_topic_status(first, "orders", True, "Ready", "")
    waiting(
        operator,
        "team a's Log Ready",
        lambda: is_true(first.get("dlog", "orders"), "Ready"),
        timeout=90,
    )

    second.apply(log("orders"))
    taken = waiting(
        operator,
        "team b's Log TopicTaken",
        lambda: (
            (c := condition(second.get("dlog", "orders"), "Stalled"))
            and c["status"] == "True"
            and c["reason"] == "TopicTaken"
            and c
        ),
    )
    assert "topic orders belongs to Log strimzi-claims-a/orders" in taken["message"]
    assert second.get(KAFKA_TOPIC, "orders") is None

    second.kubectl("delete", "dlog", "orders", "-n", NS_B, "--wait=true", "--timeout=60s")
    kafka_topic = first.get(KAFKA_TOPIC, "orders")
    assert kafka_topic is not None
    assert kafka_topic["metadata"].get("deletionTimestamp") is None
    assert is_true(first.get("dlog", "orders"), "Ready")
