"""A StreamJob run by the Kubeflow Spark operator's real controller and webhook, nodes played by
kwok.

The job's driver pod is made by spark-submit from what the controller (v2.3.0) reads in our
SparkApplication, and mutated by the operator's webhook, so it shows what a job really gets: its
image, its arguments, our environment (topics, consumer group, checkpoint, the user's `env`), the
Kafka credentials as references to Secrets (an environment variable from a Secret's key, a Secret
mounted), never a secret value, its service account and resources. Its driver failing again and
again makes the controller report FAILED each time, which drives our restarts with a growing
back-off, Stalled, and recovery once it runs stably. kwok runs no container, so no Spark code runs
and no record flows: these tests check control flow only, never data. The webhook makes each
driver pod owned by its application, so the garbage collector removes a failed driver when the
operator deletes its application to run it again. With the Kafka password's Secret gone from the
namespace, a new driver pod cannot start (the bed leaves it Pending, waiting
`CreateContainerConfigError` as a kubelet reports it): the job says why (`DriverNotStarting`) and
what to do, and runs once the Secret is made again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.kube.operator_harness import (
    Cluster,
    Operator,
    condition,
    is_true,
    waiting,
    with_reason,
)
from tests.integration.kube.spark_operator_bed import (
    JOB_NAMESPACE,
    SPARK_APPLICATION,
    SPARK_CRDS,
    app_state,
    container_env,
    fail_pod,
)

from distributary.devtools.sparkoperator import SparkOperatorBed
from distributary.plan.access.kafka_connection import PASSWORD_VARIABLE
from distributary.plan.access.kafka_secrets import (
    CA_SECRET_VARIABLE,
    KAFKA_CA_MOUNT,
    PASSWORD_SECRET_VARIABLE,
)

NAMESPACE = JOB_NAMESPACE
EXTRA_CRDS = (SPARK_CRDS,)
FIRST, LONGEST, STABLE = 1, 4, 8
OPERATOR_FLAGS = (
    "--spark-runtime", "spark-operator",
    "--restart-delay", str(FIRST),
    "--max-restart-delay", str(LONGEST),
    "--stable-after", str(STABLE),
    "--failure-window", "600",
    "--failures-before-stalled", "2",
)  # fmt: skip
PASSWORD = "n0t-in-any-manifest"  # the Secret's value, which must appear nowhere
SECRETS = [
    {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "kafka-user"},
        "stringData": {"password": PASSWORD},
    },
    {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "kafka-ca"},
        "stringData": {"ca.crt": "-----BEGIN CERTIFICATE-----\n"},
    },
]
LOGS = [
    {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name},
        "spec": {"partitions": 1, "schema": "user STRING, amount INT"},
    }
    for name in ("rj-clicks", "rj-enriched")
]
JOB_NAME = "rj-enrich"
IMAGE = "registry.example/enricher:1.0"
JOB = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "StreamJob",
    "metadata": {"name": JOB_NAME},
    "spec": {
        "image": IMAGE,
        "mainApplicationFile": "local:///app/enrich.py",
        "arguments": ["--level", "3"],
        "inputs": [{"log": "rj-clicks"}],
        "outputs": [{"log": "rj-enriched"}],
        "env": {"ENRICH_LEVEL": "3"},
        "spark": {"driver": {"cores": 1, "memory": "768m"}},
    },
}
APPLICATION = f"{JOB_NAME}-job-r1"
DRIVER = f"{APPLICATION}-driver"


@pytest.fixture(scope="module", autouse=True)
def kafka_secret_names() -> Iterator[None]:
    """The operator told which Secrets hold the Kafka credentials (the chart sets these from
    its values), for the whole module: set before the operator starts, restored after."""
    names = {PASSWORD_SECRET_VARIABLE: "kafka-user/password", CA_SECRET_VARIABLE: "kafka-ca"}
    before = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def job(cluster: Cluster) -> dict[str, Any]:
    return cluster.get("sjob", JOB_NAME) or {}


def application(cluster: Cluster) -> dict[str, Any]:
    return cluster.get(SPARK_APPLICATION, APPLICATION) or {}


def record(cluster: Cluster) -> dict[str, Any]:
    return dict((job(cluster).get("status") or {}).get("sparkApplication") or {})


@pytest.fixture(scope="module")
def running(
    spark_operator: SparkOperatorBed, cluster: Cluster, operator: Operator
) -> dict[str, Any]:
    """The job applied, and its driver pod Running on kwok's node."""
    cluster.apply(*SECRETS, *LOGS, JOB)
    waiting(
        operator,
        f"{APPLICATION} RUNNING under the real controller",
        lambda: app_state(cluster, APPLICATION) == "RUNNING",
        timeout=120,
    )
    return dict(cluster.get("pod", DRIVER) or {})


def test_the_driver_pod_carries_our_environment_and_secret_references(
    running: dict[str, Any], cluster: Cluster
) -> None:
    spec = application(cluster)["spec"]
    container = running["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["args"][-2:] == ["--level", "3"]
    assert running["spec"]["serviceAccountName"] == spec["driver"]["serviceAccount"]
    assert container["resources"]["requests"]["cpu"] == "1"
    env = container_env(running)
    # Every variable of ours, as the application has it.
    assert spec["driver"]["envVars"]
    for name, value in spec["driver"]["envVars"].items():
        assert env.get(name) == value, name
    assert env["ENRICH_LEVEL"] == "3"
    assert env["DISTRIBUTARY_CONSUMER_GROUP"] == f"distributary.{NAMESPACE}.{JOB_NAME}.r1"
    assert env["DISTRIBUTARY_INPUT_RJ_CLICKS_TOPIC"] == "rj-clicks"
    # The password from its Secret's key; the CA as the Secret mounted where the model says.
    assert env[PASSWORD_VARIABLE] == {"secretKeyRef": {"name": "kafka-user", "key": "password"}}
    secret_volumes = {
        v["name"]: v["secret"]["secretName"] for v in running["spec"]["volumes"] if v.get("secret")
    }
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert [mounts[v] for v, s in secret_volumes.items() if s == "kafka-ca"] == [KAFKA_CA_MOUNT]
    # No secret value anywhere: not in the application, not in the pod.
    assert PASSWORD not in json.dumps(application(cluster))
    assert PASSWORD not in json.dumps(running)


def fail_and_clear(cluster: Cluster, operator: Operator, n: int) -> str:
    """The running driver failed (OOMKilled, failure `n`) and the controller's FAILED awaited;
    the application's uid. The failed pod is its application's, so it goes with it."""
    uid = str(application(cluster)["metadata"]["uid"])
    fail_pod(cluster, DRIVER, f"out of memory ({n})", reason="OOMKilled", exit_code=137)
    waiting(operator, f"FAILED (failure {n})", lambda: app_state(cluster, APPLICATION) == "FAILED")
    owners = (cluster.get("pod", DRIVER) or {}).get("metadata", {}).get("ownerReferences") or []
    assert [(o["kind"], o["uid"]) for o in owners] == [("SparkApplication", uid)]
    return uid


def rerun(cluster: Cluster, operator: Operator, uid: str, n: int) -> None:
    """The application re-created by the operator after its back-off and run by the
    controller."""
    waiting(
        operator,
        f"{APPLICATION} re-created and RUNNING (run {n})",
        lambda: (
            application(cluster).get("metadata", {}).get("uid") not in (None, uid)
            and app_state(cluster, APPLICATION) == "RUNNING"
        ),
        timeout=LONGEST + 150,  # spark-submit starts a JVM: slow on a busy machine
    )


def test_a_driver_that_keeps_failing_backs_off_stalls_and_recovers(
    running: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    uid = fail_and_clear(cluster, operator, 1)
    restarting = waiting(
        operator,
        "the job Restarting",
        lambda: with_reason(job(cluster), "Reconciling", "Restarting"),
    )
    assert "ExitCode: 137, Reason: OOMKilled" in restarting["message"]
    rerun(cluster, operator, uid, 2)
    waiting(operator, "the restart seen running", lambda: record(cluster).get("runningSince"))
    uid = fail_and_clear(cluster, operator, 2)
    stalled = waiting(
        operator,
        "the job Stalled after its second failure",
        lambda: (
            (found := condition(job(cluster), "Stalled")) and found["status"] == "True" and found
        ),
    )
    assert stalled["reason"] == "ApplicationFailing"
    assert "ExitCode: 137, Reason: OOMKilled" in stalled["message"]
    history = record(cluster)
    assert history["attempts"] == 2
    assert len(history["failures"]) == 2
    # Stalled, it is still retried; once it runs stably, it is Ready again.
    rerun(cluster, operator, uid, 3)
    waiting(
        operator,
        "the job Ready and no longer Stalled after a stable run",
        lambda: (
            is_true(job(cluster), "Ready")
            and (condition(job(cluster), "Stalled") or {}).get("status") != "True"
        ),
        timeout=STABLE + 60,
    )
    assert record(cluster)["attempts"] == 0


def job_events(cluster: Cluster, reason: str) -> list[dict[str, Any]]:
    """The events on the job with `reason`."""
    found = cluster.kubectl(
        "get", "events", "-n", NAMESPACE, "-o", "json",
        "--field-selector", f"involvedObject.kind=StreamJob,involvedObject.name={JOB_NAME},"
        f"reason={reason}",
    )  # fmt: skip
    return list(json.loads(found)["items"])


def test_a_missing_kafka_secret_is_said_and_the_driver_starts_once_it_is_made(
    running: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    """The Secret of the Kafka password gone from the namespace: the next driver pod cannot
    start (the bed leaves it Pending, waiting `CreateContainerConfigError` as a kubelet reports
    it). The job says why and what to do, warns once, and leaves the application as it is; made
    again, the Secret lets the pod run and the job is Ready without a restart."""
    cluster.kubectl("delete", "secret", "kafka-user", "-n", NAMESPACE)
    # Its restart makes a driver pod that needs the Secret (spark-submit may take a while).
    before = fail_and_clear(cluster, operator, 3)
    waiting(
        operator,
        f"{APPLICATION} re-created and its driver pod made",
        lambda: (
            application(cluster).get("metadata", {}).get("uid") not in (None, before)
            and cluster.get("pod", DRIVER)
        ),
        timeout=LONGEST + 60,
    )
    stuck = waiting(
        operator,
        "the job saying its driver does not start",
        lambda: with_reason(job(cluster), "Ready", "DriverNotStarting"),
        timeout=30,
    )
    assert stuck["status"] == "False"
    assert f"driver pod {NAMESPACE}/{DRIVER} does not start" in stuck["message"]
    assert 'CreateContainerConfigError: secret "kafka-user" not found' in stuck["message"]
    assert f"create Secret kafka-user in namespace {NAMESPACE}" in stuck["message"]
    assert (condition(job(cluster), "Stalled") or {}).get("reason") == "DriverNotStarting"
    uid = application(cluster)["metadata"]["uid"]
    time.sleep(4)  # a few reconciles (the observer's every 2s): the application stays as it is
    assert application(cluster)["metadata"]["uid"] == uid
    assert app_state(cluster, APPLICATION) == "SUBMITTED"
    assert application(cluster)["status"]["submissionAttempts"] == 1
    warned = job_events(cluster, "DriverNotStarting")
    assert [(e["type"], e.get("count", 1)) for e in warned] == [("Warning", 1)]
    assert "kafka-user" in warned[0]["message"]
    cluster.apply(SECRETS[0])  # the fix: the pod runs, the same application goes on
    waiting(
        operator,
        "the job Ready once its driver runs",
        lambda: is_true(job(cluster), "Ready"),
        timeout=LONGEST + 60,  # as long as any start: kwok may take a while to run the pod
    )
    assert application(cluster)["metadata"]["uid"] == uid
    assert app_state(cluster, APPLICATION) == "RUNNING"
    assert (condition(job(cluster), "Stalled") or {}).get("status") != "True"
    assert len(job_events(cluster, "DriverNotStarting")) == 1
