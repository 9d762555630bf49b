"""A view's revision run by the Kubeflow Spark operator's real controller, nodes played by kwok.

The controller (v2.3.0, built from its Go module, webhook disabled) submits the view's
SparkApplication with pyspark's spark-submit, which creates the driver pod on the API server; a
stand-in scheduler binds it to kwok's fake node and kwok moves it to Running, so the application
goes through the real state machine: SUBMITTED, RUNNING, and FAILED when the driver pod fails. The
view follows it (Starting, Ready, Restarting after its back-off with the controller's own error
message, Ready again), and deleting the view has the garbage collector remove the application.
Two things differ from a cluster whose Spark operator runs its webhook, as the chart's does by
default: the webhook makes each driver pod owned by its application, so without it a deleted
application leaves its driver pod behind (the tests delete it where the garbage collector would),
and `env` entries reach no pod (ours are `envVars`, which the controller passes itself). The
controller of v2.3.0 puts no finalizer on applications. kwok runs no container, so no Spark code
runs and no record flows: these tests check control flow only, never data.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.kube.operator_harness import Cluster, Operator, condition, is_true, waiting
from tests.integration.kube.spark_operator_bed import (
    SPARK_APPLICATION,
    SPARK_CRDS,
    VIEW_NAMESPACE,
    app_state,
    container_env,
    fail_pod,
    remove_pod,
)

from distributary.devtools.sparkoperator import NODE, SparkOperatorBed
from distributary.plan.spark import DEFAULT_SERVICE_ACCOUNT

NAMESPACE = VIEW_NAMESPACE
EXTRA_CRDS = (SPARK_CRDS,)
IMAGE = "registry.example/distributary-spark:kwok"
OPERATOR_FLAGS = (
    "--spark-runtime", "spark-operator",
    "--image", IMAGE,
    "--restart-delay", "2",
    "--max-restart-delay", "4",
)  # fmt: skip
VIEW = "rs-big-clicks"
APPLICATION = f"{VIEW}-r1"
DRIVER = f"{APPLICATION}-driver"
CLICKS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "rs-clicks"},
    "spec": {"partitions": 2, "schema": "user STRING, amount INT"},
}
BIG_CLICKS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": VIEW},
    "spec": {
        "inputs": [{"log": "rs-clicks", "alias": "clicks"}],
        "sql": "SELECT user, amount FROM clicks WHERE amount >= 10",
        "output": {"mode": "append"},
        "spark": {
            "driver": {"cores": 2, "memory": "1g"},
            "sparkConf": {"spark.sql.shuffle.partitions": "7"},
        },
    },
}


def view(cluster: Cluster) -> dict[str, Any]:
    return cluster.get("dview", VIEW) or {}


def application(cluster: Cluster) -> dict[str, Any]:
    return cluster.get(SPARK_APPLICATION, APPLICATION) or {}


def spark_status(cluster: Cluster) -> dict[str, Any]:
    return dict((view(cluster).get("status") or {}).get("sparkApplication") or {})


def events_of(cluster: Cluster, name: str) -> list[str]:
    """The reasons of the events on SparkApplication `name`, oldest first."""
    found = cluster.kubectl(
        "get", "events", "-n", NAMESPACE, "-o", "json",
        "--field-selector", f"involvedObject.kind=SparkApplication,involvedObject.name={name}",
    )  # fmt: skip
    items = sorted(json.loads(found)["items"], key=lambda e: e["metadata"]["creationTimestamp"])
    return [e["reason"] for e in items]


@pytest.fixture(scope="module")
def running(
    spark_operator: SparkOperatorBed, cluster: Cluster, operator: Operator
) -> dict[str, Any]:
    """The view applied, and its driver pod Running on kwok's node."""
    cluster.apply(CLICKS, BIG_CLICKS)
    waiting(
        operator,
        f"{APPLICATION} RUNNING under the real controller",
        lambda: app_state(cluster, APPLICATION) == "RUNNING",
        timeout=120,
    )
    return dict(cluster.get("pod", DRIVER) or {})


def test_the_controller_submits_the_application_and_reports_it_running(
    running: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    assert running["status"]["phase"] == "Running"
    assert running["spec"]["nodeName"] == NODE
    # The real state machine, as its events tell it: submitted by spark-submit, then running.
    reasons = events_of(cluster, APPLICATION)
    assert reasons.index("SparkApplicationSubmitted") < reasons.index("SparkDriverRunning")
    status = application(cluster)["status"]
    assert status["driverInfo"]["podName"] == DRIVER
    assert status["submissionAttempts"] == 1
    waiting(operator, "the view Ready", lambda: is_true(view(cluster), "Ready"))
    assert spark_status(cluster)["state"] == "RUNNING"


def test_the_driver_pod_carries_our_image_arguments_conf_account_and_resources(
    running: dict[str, Any], cluster: Cluster
) -> None:
    spec = application(cluster)["spec"]
    pod = running["spec"]
    container = pod["containers"][0]
    assert container["image"] == IMAGE == spec["image"]
    assert pod["serviceAccountName"] == DEFAULT_SERVICE_ACCOUNT == spec["driver"]["serviceAccount"]
    # The runner's spec, as arguments after the main file.
    assert container["args"][-2:] == spec["arguments"]
    assert (
        json.loads(container["args"][-1])["consumer_group"] == f"distributary.{NAMESPACE}.{VIEW}.r1"
    )
    assert container["resources"]["requests"]["cpu"] == "2"
    assert _mebibytes(container["resources"]["limits"]["memory"]) > 1024  # 1g and its overhead
    labels = running["metadata"]["labels"]
    for key, value in spec["driver"]["labels"].items():
        assert labels[key] == value
    # Every sparkConf entry reaches Spark's own properties, mounted into the driver.
    conf_maps = [v["configMap"]["name"] for v in pod["volumes"] if v.get("configMap")]
    properties = _properties(cluster, conf_maps)
    for key, value in spec["sparkConf"].items():
        assert properties.get(key) == value, key
    assert properties["spark.sql.shuffle.partitions"] == "7"
    # A view's driver needs no environment of ours: its runner reads the spec argument.
    assert not {name for name in container_env(running) if name.startswith("DISTRIBUTARY_")}


def test_a_failed_driver_fails_the_application_and_the_view_restarts_it(
    running: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    before = application(cluster)["metadata"]["uid"]
    fail_pod(
        cluster, DRIVER, "java.lang.OutOfMemoryError: Java heap space",
        reason="OOMKilled", exit_code=137,
    )  # fmt: skip
    waiting(
        operator, "the controller's FAILED", lambda: app_state(cluster, APPLICATION) == "FAILED"
    )
    # Without its webhook, v2.3.0 leaves the failed driver pod behind when the application goes:
    # only the webhook makes a driver pod owned by its application (kubeflow/spark-operator#2492)
    # and a pod of the same name refuses the resubmission. Where the webhook runs the garbage
    # collector removes it; here the test does.
    failed = cluster.get("pod", DRIVER) or {}
    assert not failed["metadata"].get("ownerReferences")
    remove_pod(cluster, DRIVER)
    restarting = waiting(
        operator,
        "the view Restarting after the controller failed the application",
        lambda: (
            (found := condition(view(cluster), "Reconciling"))
            and found["reason"] == "Restarting"
            and found
        ),
    )
    assert "the streaming application ended (FAILED)" in restarting["message"]
    assert "ExitCode: 137, Reason: OOMKilled" in restarting["message"]
    recorded = waiting(
        operator, "the failure recorded", lambda: spark_status(cluster).get("failures")
    )
    assert len(recorded) == 1
    assert "OOMKilled" in spark_status(cluster)["lastError"]
    # After the back-off the view applies the application afresh; the controller runs it.
    waiting(
        operator,
        f"{APPLICATION} re-created and RUNNING again",
        lambda: (
            application(cluster).get("metadata", {}).get("uid") not in (None, before)
            and app_state(cluster, APPLICATION) == "RUNNING"
        ),
        timeout=60,
    )
    waiting(operator, "the view Ready again", lambda: is_true(view(cluster), "Ready"))
    assert spark_status(cluster)["attempts"] == 1
    assert application(cluster)["status"]["submissionAttempts"] == 1


def test_deleting_the_view_collects_the_application_but_not_its_driver(
    running: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    """The controller of v2.3.0 has no finalizer on SparkApplications: deleting the view has the
    garbage collector delete the application at once; the driver pod, owned by nothing without
    the webhook, stays (upstream issue kubeflow/spark-operator#2492)."""
    waiting(operator, "a running driver pod", lambda: app_state(cluster, APPLICATION) == "RUNNING")
    assert not application(cluster)["metadata"].get("finalizers")
    cluster.kubectl("delete", "dview", VIEW, "-n", NAMESPACE, "--timeout=60s")
    waiting(
        operator,
        "the SparkApplication garbage-collected",
        lambda: not application(cluster),
        timeout=60,
    )
    driver = cluster.get("pod", DRIVER) or {}
    assert driver["status"]["phase"] == "Running"
    remove_pod(cluster, DRIVER)


def _mebibytes(quantity: str) -> int:
    units = {"Mi": 1, "Gi": 1024}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    raise AssertionError(f"unexpected memory quantity {quantity!r}")


def _properties(cluster: Cluster, config_maps: list[str]) -> dict[str, str]:
    """The Spark properties in the driver's configuration ConfigMaps."""
    found: dict[str, str] = {}
    for name in config_maps:
        data = (cluster.get("configmap", name) or {}).get("data") or {}
        for line in data.get("spark.properties", "").splitlines():
            if "=" in line and not line.startswith("#"):
                key, _, value = line.partition("=")
                found[key.strip()] = value.strip().replace("\\:", ":").replace("\\=", "=")
    return found
