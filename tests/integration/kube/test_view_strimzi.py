"""A reprocessed view under the `strimzi` topic backend: each revision's topic is a KafkaTopic,
and a retired revision's topic (its output Log says `deletionPolicy: Delete`) is deleted by
deleting its KafkaTopic, which Strimzi's topic operator then deletes the topic for. Deleting the
topic through the Admin API instead would leave the KafkaTopic, and the topic operator would
make the topic again.

An upsert view's dead-letter topic is a KafkaTopic of its own configs, never the compacted
output's: a dead letter may have no key, which a compacted topic refuses.

Neither Strimzi's topic operator nor the Spark operator runs here (both ship as images): the
test makes each KafkaTopic's topic, with its spec's partitions and config, and writes KafkaTopic
and SparkApplication statuses as they would.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.kube.operator_harness import Cluster, Operator, waiting
from tests.integration.kube.test_log_controller_strimzi import KAFKA_TOPIC, set_topic_status
from tests.integration.kube.test_strimzi_backend import install_strimzi_crd
from tests.integration.kube.test_view_spark_operator import SPARK_APPLICATION, SPARK_CRD

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.records import RecordsError, produce
from distributary.local.broker import EmbeddedBroker
from distributary.plan.applications.runner_spec import dead_letter_topic
from distributary.plan.kafka_topics.topics import CreateTopic, kafka_topic_name
from distributary.schema import EncodedRecord

NAMESPACE = "strimzi-views"
OPERATOR_FLAGS = (
    "--topic-backend", "strimzi", "--strimzi-cluster", "events-cluster",
    "--spark-runtime", "spark-operator",
)  # fmt: skip
VIEW = "sz-small"
CLICKS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "sz-clicks"},
    "spec": {"partitions": 1, "schema": "user STRING, amount INT"},
}


def small(below: int) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": VIEW},
        "spec": {
            "inputs": [{"log": "sz-clicks", "alias": "clicks"}],
            "sql": f"SELECT user, amount FROM clicks WHERE amount < {below}",
            "output": {"mode": "append", "deletionPolicy": "Delete"},
            "upgrade": {"cutoverWindow": "1s", "retireAfter": "2s"},
        },
    }


@pytest.fixture(scope="module")
def cluster(control_plane: Any, kubectl: Any) -> Cluster:
    kube = Cluster(control_plane.kubeconfig, NAMESPACE)
    kube.kubectl("apply", "--server-side", "-f", str(SPARK_CRD))
    kube.install_crds()
    install_strimzi_crd(kubectl, "v1-and-v1beta2")
    return kube


def kafka_topic(cluster: Cluster, topic: str) -> dict[str, Any] | None:
    return cluster.get(KAFKA_TOPIC, kafka_topic_name(topic))


def made(cluster: Cluster, admin: KafkaAdmin, topic: str) -> dict[str, Any] | None:
    """Make the topic of a KafkaTopic once it exists and say it is Ready, as Strimzi's topic
    operator would; the KafkaTopic."""
    found = kafka_topic(cluster, topic)
    if found is None:
        return None
    if admin.describe_topic(topic) is None:
        spec = found["spec"]
        admin.create_topic(CreateTopic(topic, spec["partitions"], None, spec.get("config") or {}))
    if not (found.get("status") or {}).get("conditions"):
        set_topic_status(cluster, kafka_topic_name(topic), True, "", "")
    return found


def running(cluster: Cluster, application: str) -> bool:
    """Set the application running once it exists, as the Spark operator would."""
    found = cluster.get(SPARK_APPLICATION, application)
    if found is None:
        return False
    if ((found.get("status") or {}).get("applicationState") or {}).get("state") != "RUNNING":
        cluster.kubectl(
            "patch", SPARK_APPLICATION, application, "-n", NAMESPACE, "--subresource=status",
            "--type=merge", "-p",
            '{"status": {"applicationState": {"state": "RUNNING"}, '
            f'"driverInfo": {{"podName": "{application}-driver"}}}}}}',
        )  # fmt: skip
    return True


def rows(cluster: Cluster) -> dict[int, dict[str, Any]]:
    status = (cluster.get("dview", VIEW) or {}).get("status") or {}
    return {int(r["revision"]): r for r in status.get("revisions") or []}


def test_a_retired_revisions_topic_goes_with_its_kafka_topic(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    admin = KafkaAdmin(broker.bootstrap_servers)
    cluster.apply(CLICKS)
    waiting(operator, "the input's topic", lambda: made(cluster, admin, "sz-clicks"))
    cluster.apply(small(10))
    waiting(operator, "revision 1 running", lambda: running(cluster, f"{VIEW}-r1"))
    first = waiting(operator, "revision 1's topic", lambda: made(cluster, admin, f"{VIEW}.r1"))
    assert first["spec"]["topicName"] == f"{VIEW}.r1"
    cluster.apply(small(5))  # a new query: revision 2 beside 1, then serving
    waiting(operator, "revision 2's topic", lambda: made(cluster, admin, f"{VIEW}.r2"))
    waiting(operator, "revision 2 running", lambda: running(cluster, f"{VIEW}-r2"))
    waiting(
        operator,
        "revision 2 serving and revision 1 retired",
        lambda: (
            rows(cluster).get(1, {}).get("phase") == "Retired"
            and rows(cluster).get(2, {}).get("phase") == "Serving"
        ),
        timeout=90,
    )
    waiting(
        operator,
        "revision 1's KafkaTopic deleted",
        lambda: kafka_topic(cluster, f"{VIEW}.r1") is None,
        timeout=30,
    )
    assert kafka_topic(cluster, f"{VIEW}.r2") is not None  # the serving one stays
    assert rows(cluster)[1].get("topicDeleted") is True


TOTALS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": "sz-totals"},
    "spec": {
        "inputs": [{"log": "sz-clicks", "alias": "clicks"}],
        "sql": "SELECT user, sum(amount) AS total FROM clicks GROUP BY user",
        "output": {"mode": "upsert", "key": ["user"]},
        "deadLetters": {"retention": "2d"},
    },
}


def test_an_upsert_views_dead_letters_go_to_a_topic_that_is_never_compacted(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    admin = KafkaAdmin(broker.bootstrap_servers)
    cluster.apply(CLICKS)
    waiting(operator, "the input's topic", lambda: made(cluster, admin, "sz-clicks"))
    cluster.apply(TOTALS)
    letters = dead_letter_topic(NAMESPACE, "sz-totals")
    dlq = waiting(operator, "the dead-letter KafkaTopic", lambda: made(cluster, admin, letters))
    output = waiting(
        operator, "the output's KafkaTopic", lambda: made(cluster, admin, "sz-totals.r1")
    )
    two_days = str(2 * 24 * 3600 * 1000)
    assert dlq["spec"]["config"] == {"cleanup.policy": "delete", "retention.ms": two_days}
    assert dlq["metadata"]["labels"]["strimzi.io/cluster"] == "events-cluster"
    assert output["spec"]["config"] == {"cleanup.policy": "compact"}
    made_topic = admin.describe_topic(letters)
    assert made_topic is not None
    assert made_topic.configs.get("cleanup.policy") == "delete"
    assert made_topic.configs.get("retention.ms") == two_days
    # A dead letter with no key (its input record had none) is taken; the compacted output
    # topic, whose config the dead letters once took, refuses it.
    keyless = [EncodedRecord(None, b"not json at all")]
    assert produce(broker.bootstrap_servers, letters, keyless).records == 1
    with pytest.raises(RecordsError, match="refused"):
        produce(broker.bootstrap_servers, "sz-totals.r1", keyless, timeout=30)
