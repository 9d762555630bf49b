"""A view's revision run by the Kubeflow Spark operator's real controller and webhook, nodes
played by kwok.

The controller (v2.3.0, built from its Go module) submits the view's SparkApplication with
pyspark's spark-submit, which creates the driver pod on the API server; the operator's webhook
(the chart's configurations, failing closed) defaults and validates the application and mutates
the pod, making it owned by its application; a stand-in scheduler binds it to kwok's fake node and
kwok moves it to Running. So the application goes through the real state machine: SUBMITTED,
RUNNING, and FAILED when the driver pod fails. The view follows it (Starting, Ready, Restarting
after its back-off with the controller's own error message, Ready again); the garbage collector
removes a failed application's driver before the view submits it again, and deleting the view
removes the application and its driver. The controller of v2.3.0 puts no finalizer on
applications. kwok runs no container, so no Spark code runs and no record flows: these tests check
control flow only, never data.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.kube.operator_harness import (
    Cluster,
    Operator,
    is_true,
    waiting,
    with_reason,
)
from tests.integration.kube.spark_operator_bed import (
    SPARK_APPLICATION,
    SPARK_CRDS,
    VIEW_NAMESPACE,
    app_state,
    container_env,
    fail_pod,
)
from tests.integration.spark_pipelines import produce

from distributary.devtools.sparkoperator import NODE, SparkOperatorBed
from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker
from distributary.plan.applications.spark import DEFAULT_SERVICE_ACCOUNT, application_name

NAMESPACE = VIEW_NAMESPACE
EXTRA_CRDS = (SPARK_CRDS,)
IMAGE = "registry.example/distributary-spark:kwok"
OPERATOR_FLAGS = (
    "--spark-runtime", "spark-operator",
    "--image", IMAGE,
    "--restart-delay", "2",
    "--max-restart-delay", "4",
    "--checkpoint-claim", "rs-checkpoints",
    "--checkpoint-mount-path", "/mnt/checkpoints",
    "--checkpoint-root", "file:///mnt/checkpoints/root",
)  # fmt: skip
NODE_LOCAL_CHECKPOINTS = False  # checkpoints on the claim, mounted into the driver
VIEW = "rs-big-clicks"
APPLICATION, APPLICATION_2 = f"{VIEW}-r1", f"{VIEW}-r2"
DRIVER = f"{APPLICATION}-driver"
GROUP, GROUP_2 = (f"distributary.{NAMESPACE}.{VIEW}.r{n}" for n in (1, 2))
REWIND = {"requestId": "rs-again-1", "to": {"from": "Earliest"}}
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
            "pods": {
                "env": [
                    {"name": "S3_REGION", "value": "eu-west-1"},
                    {"name": "S3_KEY", "secretKeyRef": {"name": "rs-s3", "key": "key"}},
                ],
                "envFrom": [{"secretRef": {"name": "rs-s3"}}],
                "volumes": [
                    {
                        "name": "certs",
                        "mountPath": "/etc/certs",
                        "readOnly": True,
                        "secret": {"secretName": "rs-s3"},
                    },
                ],
                "nodeSelector": {"type": "kwok"},  # kwok's node has it
                "tolerations": [{"key": "dedicated", "value": "spark", "effect": "NoSchedule"}],
                "imagePullSecrets": ["rs-registry"],
            },
        },
    },
}
S3_SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "rs-s3"},
    "stringData": {"key": "not-a-real-key"},
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
    cluster.apply(S3_SECRET, CLICKS, BIG_CLICKS)
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
    # The checkpoint claim, mounted where the runner's checkpoints are: the webhook's work.
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
              if v.get("persistentVolumeClaim")}  # fmt: skip
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert [mounts[v] for v, claim in claims.items() if claim == "rs-checkpoints"] == [
        "/mnt/checkpoints"
    ]
    checkpoint = json.loads(container["args"][-1])["checkpoint_location"]
    assert checkpoint.startswith("file:///mnt/checkpoints/root/"), checkpoint
    # A view's driver needs no environment of ours: its runner reads the spec argument.
    assert not {name for name in container_env(running) if name.startswith("DISTRIBUTARY_")}


def test_the_driver_pod_carries_the_views_pod_settings(running: dict[str, Any]) -> None:
    """spec.spark.pods as the pod has it: spark-submit's variables (a Secret's key by
    reference, never its value), the webhook's envFrom, volume, node selector and toleration."""
    pod = running["spec"]
    container = pod["containers"][0]
    env = container_env(running)
    assert env["S3_REGION"] == "eu-west-1"
    assert env["S3_KEY"] == {"secretKeyRef": {"name": "rs-s3", "key": "key"}}
    assert {"secretRef": {"name": "rs-s3"}} in container.get("envFrom", [])
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["certs"]["secret"]["secretName"] == "rs-s3"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert (mounts["certs"]["mountPath"], mounts["certs"].get("readOnly")) == ("/etc/certs", True)
    assert pod["nodeSelector"]["type"] == "kwok"
    wanted = {"key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule"}
    assert wanted in pod["tolerations"]
    assert {"name": "rs-registry"} in pod["imagePullSecrets"]


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
    # The webhook made the driver pod owned by its application, so the garbage collector removes
    # it when the view deletes the failed application; a pod of that name left behind would
    # refuse the resubmission.
    failed = cluster.get("pod", DRIVER) or {}
    assert [(o["kind"], o["uid"]) for o in failed["metadata"]["ownerReferences"]] == [
        ("SparkApplication", before)
    ]
    restarting = waiting(
        operator,
        "the view Restarting after the controller failed the application",
        lambda: with_reason(view(cluster), "Reconciling", "Restarting"),
    )
    # The view may see the controller's FAILING before its FAILED: either ends the application.
    assert any(
        f"the streaming application ended ({state})" in restarting["message"]
        for state in ("FAILING", "FAILED")
    ), restarting["message"]
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
        timeout=180,  # spark-submit starts a JVM: slow on a busy machine
    )
    waiting(operator, "the view Ready again", lambda: is_true(view(cluster), "Ready"))
    assert spark_status(cluster)["attempts"] == 1
    assert application(cluster)["status"]["submissionAttempts"] == 1


def driver_uid(cluster: Cluster, pod: str = DRIVER) -> str | None:
    return (cluster.get("pod", pod) or {}).get("metadata", {}).get("uid")


def last_rewind(cluster: Cluster) -> dict[str, Any]:
    return dict((view(cluster).get("status") or {}).get("lastRewind") or {})


def test_a_rewind_deletes_the_application_moves_the_group_once_its_driver_is_gone_and_resubmits(
    running: dict[str, Any], cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    """The operator deletes the application; the garbage collector deletes its driver pod (the
    webhook's owner reference), and only then is the group moved; the application is applied
    again and the controller submits a new driver. kwok runs no driver, so the test commits the
    group's offsets where a driver would have read to."""
    waiting(operator, "the view Ready", lambda: is_true(view(cluster), "Ready"))
    admin = KafkaAdmin(broker.bootstrap_servers)
    produce(broker.bootstrap_servers, "rs-clicks", [(n % 2, None, b"{}") for n in range(20)])
    admin.commit(GROUP, {"rs-clicks": {0: 6, 1: 4}})
    app_before, driver_before = application(cluster)["metadata"]["uid"], driver_uid(cluster)
    assert driver_before is not None
    cluster.apply({**BIG_CLICKS, "spec": {**BIG_CLICKS["spec"], "rewind": REWIND}})
    done = waiting(
        operator,
        "the rewind done",
        lambda: last_rewind(cluster) if last_rewind(cluster).get("phase") == "Done" else None,
        timeout=120,
    )
    assert {(m["partition"], m["toOffset"]) for m in done["offsets"]} == {(0, 0), (1, 0)}
    assert admin.committed(GROUP) == {"rs-clicks": {0: 0, 1: 0}}
    waiting(
        operator,
        "the application applied again and RUNNING under the controller with a new driver",
        lambda: (
            application(cluster).get("metadata", {}).get("uid") not in (None, app_before)
            and app_state(cluster, APPLICATION) == "RUNNING"
            and driver_uid(cluster) not in (None, driver_before)
        ),
        timeout=180,  # spark-submit starts a JVM: slow on a busy machine
    )
    assert application(cluster)["status"]["submissionAttempts"] == 1
    waiting(operator, "the view Ready after the rewind", lambda: is_true(view(cluster), "Ready"))
    assert admin.committed(GROUP) == {"rs-clicks": {0: 0, 1: 0}}  # no late commit undid it


def test_an_edit_runs_revision_2_through_the_controller_and_cuts_over_to_it(
    running: dict[str, Any], cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    """Revision 2's application is submitted beside revision 1's; once its group has read to
    the end (committed by the test where a driver would), readers switch to it and revision 1's
    application and, through the garbage collector, its driver go."""
    edited = {
        **BIG_CLICKS["spec"],
        "sql": "SELECT user, amount FROM clicks WHERE amount >= 20",
        "upgrade": {"cutoverWindow": "2s"},
        "rewind": REWIND,
    }
    cluster.apply({**BIG_CLICKS, "spec": edited})
    waiting(
        operator,
        f"{APPLICATION_2} RUNNING under the controller beside {APPLICATION}",
        lambda: app_state(cluster, APPLICATION_2) == "RUNNING",
        timeout=180,
    )
    assert app_state(cluster, APPLICATION) == "RUNNING"
    assert (view(cluster)["status"] or {}).get("servingRevision") == 1
    admin = KafkaAdmin(broker.bootstrap_servers)
    ends = admin.end_offsets(["rs-clicks"])
    admin.commit(GROUP_2, ends)
    waiting(
        operator,
        "revision 2 serving",
        lambda: (view(cluster).get("status") or {}).get("servingRevision") == 2,
        timeout=120,
    )
    # The output Log follows the view's cutover in its own reconcile, moments later.
    waiting(
        operator,
        f"the output Log {VIEW} naming revision 2's topic",
        lambda: (
            ((cluster.get("dlog", VIEW) or {}).get("status") or {}).get("topicName") == f"{VIEW}.r2"
        ),
        timeout=60,
    )
    waiting(
        operator,
        f"{APPLICATION} and its driver gone",
        lambda: not application(cluster) and not cluster.get("pod", DRIVER),
        timeout=90,
    )
    assert app_state(cluster, APPLICATION_2) == "RUNNING"
    waiting(operator, "the view Ready on revision 2", lambda: is_true(view(cluster), "Ready"))


def test_deleting_the_view_collects_the_application_and_its_driver(
    running: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    """The controller of v2.3.0 has no finalizer on SparkApplications: deleting the view has the
    garbage collector delete the application at once, and then its driver pod, which the webhook
    made the application's."""
    serving = (view(cluster).get("status") or {}).get("servingRevision")
    name = f"{VIEW}-r{serving}"
    waiting(operator, "a running driver pod", lambda: app_state(cluster, name) == "RUNNING")
    assert not (cluster.get(SPARK_APPLICATION, name) or {})["metadata"].get("finalizers")
    cluster.kubectl("delete", "dview", VIEW, "-n", NAMESPACE, "--timeout=60s")
    waiting(
        operator,
        "the SparkApplication and its driver pod garbage-collected",
        lambda: (
            not cluster.get(SPARK_APPLICATION, name) and not cluster.get("pod", f"{name}-driver")
        ),
        timeout=90,
    )


LONG_VIEW = "long-view-" + "abcdefghij" * 9  # 100 characters, a valid object name


def test_a_view_named_with_100_characters_runs_under_names_kubernetes_takes(
    running: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    """Every name derived from a 100-character view's fits Kubernetes' limits: the API server
    takes its SparkApplication, spark-submit its driver pod and Services, and the view is
    Ready (a Service name longer than 63 characters, or such a label, would be refused)."""
    assert len(LONG_VIEW) == 100
    manifest = {**BIG_CLICKS, "metadata": {"name": LONG_VIEW}}
    manifest["spec"] = {k: v for k, v in BIG_CLICKS["spec"].items() if k != "spark"}
    cluster.apply(manifest)
    app = application_name(LONG_VIEW, 1)
    waiting(operator, f"{app} RUNNING", lambda: app_state(cluster, app) == "RUNNING", timeout=120)
    waiting(
        operator,
        "the long-named view Ready",
        lambda: is_true(cluster.get("dview", LONG_VIEW) or {}, "Ready"),
    )
    driver = cluster.get("pod", f"{app}-driver") or {}
    assert driver["status"]["phase"] == "Running"
    assert all(len(value) <= 63 for value in driver["metadata"]["labels"].values())
    services = json.loads(cluster.kubectl("get", "services", "-n", NAMESPACE, "-o", "json"))
    label = "sparkoperator.k8s.io/app-name"
    ours = [
        s["metadata"]["name"]
        for s in services["items"]
        if (s["metadata"].get("labels") or {}).get(label) == app
    ]
    assert ours, "no Service of the application"
    assert all(len(name) <= 63 for name in ours), ours
    cluster.kubectl("delete", "dview", LONG_VIEW, "-n", NAMESPACE, "--timeout=60s")


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
