"""A view's records through Spark drivers and executors that run in containers on the node, and
its edit cut over while records keep arriving.

The operator runs in its pod (the chart, `conftest.installed`); each revision's SparkApplication
is submitted by the real Spark operator's controller; the driver's pod (the job image) is placed
on the node by the scheduler, creates its executor pods with the chart's drivers' account, and
the executors reach it through its Service by name; both read the input from the broker's
listener for pods and checkpoint on the chart's claim (a volume of the node). Records arrive
throughout, from before revision 1 starts until after revision 2 serves; then the producer
stops, and revision 2's output must hold exactly the records its filter keeps, each once.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from tests.integration.kube.operator_harness import Cluster, is_true, read_to_the_end, wait_for
from tests.integration.pods.pods import PIPELINES
from tests.integration.spark_pipelines import SteadyProducer, read_topic

from distributary.devtools.images import SPARK
from distributary.devtools.node import Node
from distributary.local.broker import EmbeddedBroker
from distributary.plan.applications.spark import application_name

INPUT, VIEW = "events", "big-events"
SMALL = {"memory": "512m", "cpuRequest": "250m"}  # two cores: the operator, driver, executor


def view(least: int) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": VIEW},
        "spec": {
            "inputs": [{"log": INPUT, "alias": "events"}],
            "sql": f"SELECT id, user, amount FROM events WHERE amount >= {least}",
            "output": {"mode": "append"},
            "spark": {"trigger": "2s", "driver": SMALL, "executor": {**SMALL, "instances": 1}},
        },
    }


def status(kube: Cluster) -> dict[str, Any]:
    return dict((kube.get("dview", VIEW) or {}).get("status") or {})


def pods_of(node: Node, application: str, role: str) -> list[dict[str, Any]]:
    selector = quote(f"sparkoperator.k8s.io/app-name={application},spark-role={role}")
    path = f"/api/v1/namespaces/{PIPELINES}/pods?labelSelector={selector}"
    return list(node.api("GET", path)["items"])


def assert_in_containers_on_the_node(node: Node, application: str) -> None:
    """The revision's driver and executors run on the node, in the job image (executors come
    some seconds after their driver)."""

    def running() -> list[dict[str, Any]]:
        pods = pods_of(node, application, "driver") + pods_of(node, application, "executor")
        roles = [pod["metadata"]["labels"]["spark-role"] for pod in pods]
        phases = {pod["status"].get("phase") for pod in pods}
        both = sorted(set(roles)) == ["driver", "executor"]
        return pods if both and phases == {"Running"} else []

    pods = wait_for(f"the driver and executors of {application} running", running, timeout=180)
    for pod in pods:
        assert pod["spec"]["nodeName"] == node.name
        [container] = pod["status"]["containerStatuses"]
        assert container["image"].endswith(SPARK.tag), container["image"]


def read_some(found: dict[str, Any]) -> bool:
    """The status shows a position past the start of the input."""
    return any(sum((i.get("position") or {}).values()) > 0 for i in found.get("inputs") or [])


@pytest.fixture(scope="module")
def live(
    installed: Cluster, node: Node, pods_broker: EmbeddedBroker
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Revision 1 keeping up with live input in pods, the edit, revision 2 serving, records
    arriving throughout; then the producer stops and revision 2 reads the rest."""
    log = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": INPUT},
        "spec": {"partitions": 2, "format": "json", "schema": SteadyProducer.SCHEMA},
    }
    installed.apply(log)
    wait_for("Log events Ready", lambda: is_true(installed.get("dlog", INPUT), "Ready"), 120)
    producer = SteadyProducer(pods_broker.bootstrap_servers, INPUT).start()
    seen: dict[str, Any] = {}
    try:
        installed.apply(view(10))

        def keeping_up() -> bool:
            found = status(installed)
            return (
                is_true(installed.get("dview", VIEW), "Ready")
                and found.get("servingRevision") == 1
                and (found.get("lag") or 0) < 5 * SteadyProducer.RATE
                and read_some(found)
            )

        wait_for("revision 1 keeping up with live input", keeping_up, timeout=600)
        assert_in_containers_on_the_node(node, application_name(VIEW, 1))
        seen["r1_topic"] = status(installed)["outputTopic"]
        installed.apply(view(15))

        def serving_2() -> bool:
            return status(installed).get("servingRevision") == 2

        wait_for("revision 2 serving while records arrive", serving_2, timeout=600)
        seen["sent_at_cutover"] = len(producer.sent)
        assert_in_containers_on_the_node(node, application_name(VIEW, 2))
        time.sleep(2)  # records still arrive after the cutover
    finally:
        records = producer.stop()

    def caught_up() -> bool:
        return read_to_the_end(installed.get("dview", VIEW), pods_broker.bootstrap_servers)

    wait_for("revision 2 caught up", caught_up, timeout=300)
    yield seen, records
    installed.kubectl("delete", "dview", VIEW, "-n", PIPELINES)  # its pods leave the node


def test_the_edit_cuts_over_in_pods_and_revision_2_holds_exactly_its_rows(
    live: tuple[dict[str, Any], list[dict[str, Any]]],
    installed: Cluster,
    pods_broker: EmbeddedBroker,
) -> None:
    seen, records = live
    assert len(records) > seen["sent_at_cutover"]  # the producer ran on past the cutover
    output = status(installed)["outputTopic"]
    assert output != seen["r1_topic"]
    written = Counter(r.json()["id"] for r in read_topic(pods_broker.bootstrap_servers, output))
    assert written == Counter(r["id"] for r in records if r["amount"] >= 15)


def test_revision_1_wrote_only_its_rows_each_once(
    live: tuple[dict[str, Any], list[dict[str, Any]]], pods_broker: EmbeddedBroker
) -> None:
    seen, records = live
    sent = {r["id"]: r for r in records}
    written = [r.json() for r in read_topic(pods_broker.bootstrap_servers, seen["r1_topic"])]
    assert written, "revision 1 wrote nothing"
    ids = [row["id"] for row in written]
    assert len(ids) == len(set(ids)), "revision 1 wrote a record twice"
    assert all(row == sent[row["id"]] and row["amount"] >= 10 for row in written)


def test_both_revisions_checkpoint_on_the_charts_claim(
    live: tuple[dict[str, Any], list[dict[str, Any]]], checkpoint_volume: Path
) -> None:
    """The drivers wrote their checkpoints (offsets and commits of each batch) on the volume
    the chart's claim is bound to."""
    offsets = [path.parent for path in checkpoint_volume.rglob("offsets") if path.is_dir()]
    assert len({str(path) for path in offsets}) >= 2, sorted(checkpoint_volume.rglob("*"))[:20]
    for folder in offsets:
        assert any((folder / "commits").iterdir()), f"no batch committed in {folder}"
