"""The DerivedView controller with the `spark-operator` runtime on a real API server and broker.

A view becomes a Kubeflow SparkApplication owned by the view, carrying the runner spec as JSON.
The Spark operator itself is not run here (it would start driver pods, and no kubelet runs in the
test control plane), so the test writes the application's status through the status subresource
as the Spark operator would, and checks that the view follows it: Reconciling while the
application starts, Ready while it runs, and Restarting when it ends, since a streaming
application must never end, even with success. The restart deletes and re-creates the
application after the back-off; deleting the view garbage-collects the application and the output
Log. A view whose output says `deletionPolicy: Delete` takes every topic it wrote with it (each
revision's, the dead letters); one that keeps the default, Retain, leaves them all in Kafka.
Everything else is real: the Spark operator's own CRDs (v2.3.0, from the Go module cache),
server-side apply, topics in Kafka, the garbage collector. test_view_real_spark_operator.py runs
the real controller instead of writing its statuses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kube.operator_harness import (
    Cluster,
    Operator,
    condition,
    is_true,
    waiting,
)
from tests.integration.kube.spark_operator_bed import SPARK_CRDS

from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[3]
SPARK_CRD = SPARK_CRDS  # the release's CRDs, read from the Go module cache
SPARK_APPLICATION = "sparkapplications.sparkoperator.k8s.io"
NAMESPACE = "spark-test"
EXTRA_CRDS = (SPARK_CRD,)
IMAGE = "my-registry/distributary-spark:test"
OPERATOR_FLAGS = ("--spark-runtime", "spark-operator", "--image", IMAGE)
VIEW = "so-big-clicks"
APPLICATION = f"{VIEW}-r1"
CLICKS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "so-clicks"},
    "spec": {"partitions": 2, "schema": "user STRING, amount INT", "key": ["user"]},
}
DELETED = "so-small-clicks"  # its output says deletionPolicy: Delete


def small_clicks(below: int) -> dict[str, Any]:
    """A view whose output is deleted with it; a new threshold reprocesses it as a new revision,
    and the replaced revision's topic is kept for an hour."""
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": DELETED},
        "spec": {
            "inputs": [{"log": "so-clicks", "alias": "clicks"}],
            "sql": f"SELECT user, amount FROM clicks WHERE amount < {below}",
            "output": {"mode": "append", "deletionPolicy": "Delete"},
            "upgrade": {"cutoverWindow": "1s", "retireAfter": "1h"},
        },
    }


BIG_CLICKS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": VIEW},
    "spec": {
        "inputs": [{"log": "so-clicks", "alias": "clicks"}],
        "sql": "SELECT user, amount FROM clicks WHERE amount >= 10",
        "output": {"mode": "append"},
    },
}


def application(cluster: Cluster) -> dict[str, Any] | None:
    return cluster.get(SPARK_APPLICATION, APPLICATION)


def application_uid(cluster: Cluster) -> str | None:
    found = application(cluster)
    return str(found["metadata"]["uid"]) if found else None


def view(cluster: Cluster) -> dict[str, Any] | None:
    return cluster.get("dview", VIEW)


def set_application_state(
    cluster: Cluster, state: str, application: str = APPLICATION, **extra: Any
) -> None:
    """Write the application's status as the Spark operator does (driverInfo is required)."""
    status = {
        "applicationState": {"state": state},
        "driverInfo": {"podName": f"{application}-driver", "webUIPort": 4040},
        "sparkApplicationId": "spark-0123456789abcdef",
        "submissionAttempts": 1,
        "executionAttempts": 1,
        "lastSubmissionAttemptTime": "2026-11-22T12:00:00Z",
        **extra,
    }
    cluster.kubectl(
        "patch", SPARK_APPLICATION, application, "-n", NAMESPACE, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip


def reconciling_because(cluster: Cluster, reason: str) -> dict[str, Any] | None:
    found = condition(view(cluster), "Reconciling")
    return found if found and found["status"] == "True" and found["reason"] == reason else None


def spark_status(cluster: Cluster) -> dict[str, Any]:
    """What the view's status says of its Spark application."""
    return dict(((view(cluster) or {}).get("status") or {}).get("sparkApplication") or {})


@pytest.fixture(scope="module")
def created(cluster: Cluster, operator: Operator) -> dict[str, Any]:
    """The view applied and its SparkApplication created."""
    cluster.apply(CLICKS, BIG_CLICKS)
    return dict(waiting(operator, f"SparkApplication {APPLICATION}", lambda: application(cluster)))


def test_a_view_becomes_a_spark_application_owned_by_it(
    created: dict[str, Any], cluster: Cluster, broker: EmbeddedBroker
) -> None:
    owner = (view(cluster) or {})["metadata"]
    assert [
        (o["kind"], o["name"], o["uid"], o.get("controller"))
        for o in created["metadata"]["ownerReferences"]
    ] == [("DerivedView", VIEW, owner["uid"], True)]
    spec = created["spec"]
    assert spec["type"] == "Python"
    assert spec["mainApplicationFile"] == "local:///opt/distributary/runner.py"
    assert spec["image"] == IMAGE
    assert spec["restartPolicy"] == {"type": "Never"}
    arguments = spec["arguments"]
    assert arguments[0] == "--spec-json"
    runner = json.loads(arguments[1])
    assert runner["consumer_group"] == f"distributary.{NAMESPACE}.{VIEW}.r1"
    assert runner["output"]["topic"] == f"{VIEW}.r1"
    assert runner["bootstrap_servers"] == broker.bootstrap_servers
    assert [(i["log"], i["topic"]) for i in runner["inputs"]] == [("so-clicks", "so-clicks")]


def test_the_view_is_starting_until_the_application_runs_then_ready(
    created: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    starting = waiting(
        operator, "Reconciling (Starting)", lambda: reconciling_because(cluster, "Starting")
    )
    assert "new" in starting["message"]
    assert (condition(view(cluster), "Ready") or {}).get("status") == "Unknown"
    set_application_state(cluster, "SUBMITTED")
    waiting(
        operator,
        "Reconciling (Starting) while submitted",
        lambda: "submitted" in (reconciling_because(cluster, "Starting") or {}).get("message", ""),
    )
    set_application_state(cluster, "RUNNING")
    waiting(operator, "the view Ready", lambda: is_true(view(cluster), "Ready"))
    found = view(cluster) or {}
    assert condition(found, "Reconciling") is None
    running = spark_status(cluster)
    assert running == {
        "name": APPLICATION,
        "state": "RUNNING",
        "attempts": 0,
        "runningSince": running["runningSince"],
    }
    assert found["status"]["outputTopic"] == f"{VIEW}.r1"


def test_the_output_log_and_the_revisions_topics_exist(
    created: dict[str, Any], cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    child = waiting(operator, "the output Log", lambda: cluster.get("dlog", VIEW))
    owner = (view(cluster) or {})["metadata"]["uid"]
    assert [(o["kind"], o["name"], o["uid"]) for o in child["metadata"]["ownerReferences"]] == [
        ("DerivedView", VIEW, owner)
    ]
    admin = KafkaAdmin(broker.bootstrap_servers)
    output = admin.describe_topic(f"{VIEW}.r1")
    assert output is not None
    assert output.partitions == 2
    assert admin.describe_topic(f"distributary.{NAMESPACE}.{VIEW}.dlq") is not None


def test_an_application_that_completes_is_restarted_after_its_back_off(
    created: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    before = application_uid(cluster)
    assert before is not None
    set_application_state(cluster, "COMPLETED", terminationTime="2026-11-22T12:05:00Z")
    restarting = waiting(
        operator, "Reconciling (Restarting)", lambda: reconciling_because(cluster, "Restarting")
    )
    assert "the streaming application ended (COMPLETED)" in restarting["message"]
    assert (condition(view(cluster), "Ready") or {}).get("status") == "Unknown"
    waiting(
        operator,
        "the SparkApplication re-created",
        lambda: application_uid(cluster) not in (None, before),
        timeout=40,
    )
    assert not ((application(cluster) or {}).get("status") or {}).get("applicationState")
    waiting(
        operator,
        "the restart recorded in the view's status",
        lambda: spark_status(cluster).get("state") == "NEW",
        timeout=10,
    )
    restarted = spark_status(cluster)
    assert restarted == {
        "name": APPLICATION,
        "state": "NEW",
        "attempts": 1,
        "failures": restarted["failures"],
        "lastError": "the streaming application ended (COMPLETED)",
    }
    assert len(restarted["failures"]) == 1
    assert reconciling_because(cluster, "Starting") is not None


def test_deleting_the_view_collects_its_application_and_output_log(
    created: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    cluster.kubectl("delete", "dview", VIEW, "-n", NAMESPACE, "--timeout=60s")
    waiting(
        operator,
        "the SparkApplication and output Log garbage-collected",
        lambda: application(cluster) is None and cluster.get("dlog", VIEW) is None,
        timeout=90,
    )


def running(cluster: Cluster, application: str) -> bool:
    """Set the application running once it exists, as the Spark operator would; whether it is."""
    found = cluster.get(SPARK_APPLICATION, application)
    if found is None:
        return False
    state = ((found.get("status") or {}).get("applicationState") or {}).get("state")
    if state != "RUNNING":
        set_application_state(cluster, "RUNNING", application)
    return True


def serving_annotation(cluster: Cluster, name: str) -> str | None:
    annotations = ((cluster.get("dlog", name) or {}).get("metadata") or {}).get("annotations")
    return (annotations or {}).get("distributary.dev/serving-revision")


def dead_letters(name: str) -> str:
    return f"distributary.{NAMESPACE}.{name}.dlq"


def test_deleting_views_deletes_the_topics_they_wrote_only_under_delete(
    created: dict[str, Any], cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    admin = KafkaAdmin(broker.bootstrap_servers)
    cluster.apply(small_clicks(10))
    waiting(
        operator,
        f"{DELETED}.r1 and its dead-letter topic",
        lambda: (
            admin.describe_topic(f"{DELETED}.r1") and admin.describe_topic(dead_letters(DELETED))
        ),
    )
    # A new query: revision 2 reprocesses beside revision 1, then serves; revision 1 retires
    # and its topic stays (for an hour), as an older revision's does.
    cluster.apply(small_clicks(5))
    waiting(
        operator,
        "the output Log serving revision 2, and both revisions' topics",
        lambda: (
            running(cluster, f"{DELETED}-r2")
            and serving_annotation(cluster, DELETED) == "2"
            and admin.describe_topic(f"{DELETED}.r2") is not None
            and admin.describe_topic(f"{DELETED}.r1") is not None
        ),
    )
    cluster.kubectl("delete", "dview", VIEW, DELETED, "-n", NAMESPACE, "--ignore-not-found")
    waiting(
        operator,
        "both output Logs garbage-collected",
        lambda: cluster.get("dlog", VIEW) is None and cluster.get("dlog", DELETED) is None,
        timeout=90,
    )
    gone = [f"{DELETED}.r1", f"{DELETED}.r2", dead_letters(DELETED)]
    waiting(
        operator,
        f"{', '.join(gone)} deleted",
        lambda: all(admin.describe_topic(topic) is None for topic in gone),
    )
    # so-big-clicks keeps the default, Retain: its topics outlive it.
    assert admin.describe_topic(f"{VIEW}.r1") is not None
    assert admin.describe_topic(dead_letters(VIEW)) is not None
