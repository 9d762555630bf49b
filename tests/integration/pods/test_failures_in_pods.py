"""Pods deleted under a running view while records keep arriving: an executor's, the driver's,
the operator's. Nobody steps in; the view recovers by itself, its status says what happened, and
its output holds exactly the records its filter keeps, each once (exactly-once delivery across a
driver lost mid-batch).

The tests run in order on one view and one live input (`live`); the last one stops the input
and compares the output with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.kube.operator_harness import (
    Cluster,
    is_true,
    read_to_the_end,
    wait_for,
    with_reason,
)
from tests.integration.pods.pods import PIPELINES, SELECTOR, SMALL_JVMS, SYSTEM, pods
from tests.integration.spark_pipelines import SteadyProducer, read_topic

from distributary.devtools.node import Node
from distributary.local.broker import EmbeddedBroker
from distributary.plan.applications.spark import application_name

INPUT, VIEW = "f-events", "f-big"
SMALL = {"memory": "512m", "cpuRequest": "250m"}
APPLICATION = application_name(VIEW, 1)


def spark_pods(node: Node, role: str) -> list[dict[str, Any]]:
    selector = f"sparkoperator.k8s.io/app-name={APPLICATION},spark-role={role}"
    return [
        pod
        for pod in pods(node, PIPELINES, selector)
        if pod["status"].get("phase") == "Running" and "deletionTimestamp" not in pod["metadata"]
    ]


def delete(kube: Cluster, namespace: str, pod: dict[str, Any]) -> None:
    kube.kubectl("delete", "pod", "-n", namespace, pod["metadata"]["name"], "--wait=false")


def status(kube: Cluster) -> dict[str, Any]:
    return dict((kube.get("dview", VIEW) or {}).get("status") or {})


def reading(kube: Cluster, since: int = 0) -> bool:
    """Ready, and its position in the input past `since` records."""
    found = status(kube)
    position = sum(sum((i.get("position") or {}).values()) for i in found.get("inputs") or [])
    return is_true(kube.get("dview", VIEW), "Ready") and position > since


def position(kube: Cluster) -> int:
    found = status(kube)
    return sum(sum((i.get("position") or {}).values()) for i in found.get("inputs") or [])


@pytest.fixture(scope="module")
def live(installed: Cluster, pods_broker: EmbeddedBroker, node: Node) -> Iterator[SteadyProducer]:
    """The view running in pods, reading a live input."""
    installed.apply(
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": INPUT},
            "spec": {"partitions": 2, "format": "json", "schema": SteadyProducer.SCHEMA},
        }
    )
    wait_for("Log Ready", lambda: is_true(installed.get("dlog", INPUT), "Ready"), 120)
    producer = SteadyProducer(pods_broker.bootstrap_servers, INPUT).start()
    try:
        installed.apply(
            {
                "apiVersion": "distributary.dev/v1alpha1",
                "kind": "DerivedView",
                "metadata": {"name": VIEW},
                "spec": {
                    "inputs": [{"log": INPUT, "alias": "events"}],
                    "sql": "SELECT id, user, amount FROM events WHERE amount >= 10",
                    "output": {"mode": "append"},
                    "spark": {
                        "trigger": "2s",
                        "driver": SMALL,
                        "executor": {**SMALL, "instances": 1},
                        "pods": {"env": [SMALL_JVMS]},
                    },
                },
            }
        )
        wait_for("the view reading in pods", lambda: reading(installed), timeout=600)
        wait_for("its executor running", lambda: spark_pods(node, "executor"), timeout=180)
        yield producer
    finally:
        producer.stop()
        installed.kubectl("delete", "dview", VIEW, "-n", PIPELINES)  # its pods leave the node


def test_an_executor_pod_deleted_is_replaced_and_the_view_reads_on(
    live: SteadyProducer, installed: Cluster, node: Node
) -> None:
    [executor] = spark_pods(node, "executor")
    installed.kubectl(
        "delete", "pod", "-n", PIPELINES, executor["metadata"]["name"], "--wait=false"
    )

    def replaced() -> bool:
        found = spark_pods(node, "executor")
        return bool(found) and executor["metadata"]["uid"] not in {
            p["metadata"]["uid"] for p in found
        }

    wait_for("a new executor running", replaced, timeout=240)
    since = position(installed)
    wait_for("the view reading on", lambda: reading(installed, since), timeout=240)


def test_the_driver_pod_deleted_mid_batch_fails_the_revision_which_restarts_by_itself(
    live: SteadyProducer, installed: Cluster, node: Node
) -> None:
    [driver] = spark_pods(node, "driver")
    delete(installed, PIPELINES, driver)
    wait_for(
        "the view Restarting after its driver was lost",
        lambda: with_reason(installed.get("dview", VIEW), "Reconciling", "Restarting"),
        timeout=240,
    )
    application = status(installed).get("sparkApplication") or {}
    assert application.get("failures"), application
    assert application.get("lastError"), application

    def new_driver() -> bool:
        found = spark_pods(node, "driver")
        return bool(found) and found[0]["metadata"]["uid"] != driver["metadata"]["uid"]

    wait_for("a new driver running", new_driver, timeout=300)
    since = position(installed)
    wait_for("the view Ready and reading again", lambda: reading(installed, since), timeout=300)


def test_the_operators_pod_deleted_while_the_view_runs_changes_nothing_it_serves(
    live: SteadyProducer, installed: Cluster, node: Node
) -> None:
    [operator] = pods(node, SYSTEM, SELECTOR)
    [driver] = spark_pods(node, "driver")
    delete(installed, SYSTEM, operator)

    def operator_back() -> bool:
        for pod in pods(node, SYSTEM, SELECTOR):
            statuses = pod["status"].get("containerStatuses") or [{}]
            if pod["metadata"]["uid"] != operator["metadata"]["uid"] and statuses[0].get("ready"):
                return True
        return False

    wait_for("a new operator pod, ready", operator_back, timeout=240)
    since = position(installed)
    wait_for("the view's status moving on", lambda: reading(installed, since), timeout=240)
    [still] = spark_pods(node, "driver")
    assert still["metadata"]["uid"] == driver["metadata"]["uid"]  # the view was left running


def test_the_output_holds_each_kept_record_once(
    live: SteadyProducer, installed: Cluster, pods_broker: EmbeddedBroker
) -> None:
    records = live.stop()
    wait_for(
        "the view caught up",
        lambda: read_to_the_end(installed.get("dview", VIEW), pods_broker.bootstrap_servers),
        timeout=300,
    )
    output = status(installed)["outputTopic"]
    written = Counter(r.json()["id"] for r in read_topic(pods_broker.bootstrap_servers, output))
    expected = Counter(r["id"] for r in records if r["amount"] >= 10)
    assert written == expected, {
        "missing": sorted((expected - written).elements())[:20],
        "repeated": sorted((written - expected).elements())[:20],
    }
