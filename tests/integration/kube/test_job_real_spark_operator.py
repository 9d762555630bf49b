"""A StreamJob run by the Kubeflow Spark operator's real controller, nodes played by kwok.

The job's driver pod is made by spark-submit from what the controller (v2.3.0, no webhook) reads
in our SparkApplication, so it shows what a job really gets: its image, its arguments, our
environment (topics, consumer group, checkpoint, the user's `env`), the Kafka credentials as
references to Secrets (an environment variable from a Secret's key, a Secret mounted), never a
secret value, its service account and resources. Its driver failing again and again makes the
controller report FAILED each time, which drives our restarts with a growing back-off, Stalled,
and recovery once it runs stably. kwok runs no container, so no Spark code runs and no record
flows: these tests check control flow only, never data. Without the webhook the controller
leaves a failed driver pod behind (kubeflow/spark-operator#2492; the webhook makes it owned by
its application): the tests delete it, where the garbage collector would, once it has failed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.kube.operator_harness import Cluster, Operator, condition, is_true, waiting
from tests.integration.kube.spark_operator_bed import (
    JOB_NAMESPACE,
    SPARK_APPLICATION,
    SPARK_CRDS,
    app_state,
    container_env,
    fail_pod,
    remove_pod,
)

from distributary.devtools.sparkoperator import SparkOperatorBed
from distributary.plan.kafka_connection import PASSWORD_VARIABLE
from distributary.plan.kafka_secrets import (
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
    """The running driver failed (OOMKilled, failure `n`), the controller's FAILED awaited, and
    the failed pod deleted as the garbage collector would once its application goes; the
    application's uid."""
    uid = str(application(cluster)["metadata"]["uid"])
    fail_pod(cluster, DRIVER, f"out of memory ({n})", reason="OOMKilled", exit_code=137)
    waiting(operator, f"FAILED (failure {n})", lambda: app_state(cluster, APPLICATION) == "FAILED")
    remove_pod(cluster, DRIVER)
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
        timeout=LONGEST + 60,
    )


def test_a_driver_that_keeps_failing_backs_off_stalls_and_recovers(
    running: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    uid = fail_and_clear(cluster, operator, 1)
    restarting = waiting(
        operator,
        "the job Restarting",
        lambda: (
            (found := condition(job(cluster), "Reconciling"))
            and found["reason"] == "Restarting"
            and found
        ),
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
