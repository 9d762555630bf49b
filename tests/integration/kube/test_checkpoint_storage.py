"""Checkpoints under the `spark-operator` runtime, on a real API server and broker.

An operator whose checkpoint root is each driver's own disk (a `file://` root with no claim, not
explicitly allowed) refuses every view and job: they are Stalled with reason
`CheckpointNotDurable` and the fix, and no SparkApplication is made. Restarted with a checkpoint
PersistentVolumeClaim and the root under its mount path, the same view and job start, and their
SparkApplications mount the claim into the driver and the executors. The Spark operator is not
run (see test_view_spark_operator.py); the applications are read as the API server stores them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kube.operator_harness import Cluster, Operator, condition, waiting
from tests.integration.kube.spark_operator_bed import SPARK_CRDS

ROOT = Path(__file__).resolve().parents[3]
SPARK_CRD = SPARK_CRDS  # the release's CRDs, read from the Go module cache
SPARK_APPLICATION = "sparkapplications.sparkoperator.k8s.io"
NAMESPACE = "checkpoint-test"
EXTRA_CRDS = (SPARK_CRD,)
OPERATOR_FLAGS = ("--spark-runtime", "spark-operator")
NODE_LOCAL_CHECKPOINTS = False
CLAIM, MOUNT = "pipeline-checkpoints", "/mnt/checkpoints"
CLAIM_FLAGS = (
    "--checkpoint-claim", CLAIM,
    "--checkpoint-mount-path", MOUNT,
    "--checkpoint-root", f"file://{MOUNT}/root",
)  # fmt: skip
VIEW, JOB = "ck-totals", "ck-enricher"
LOGS = [
    {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name},
        "spec": {"partitions": 1, "schema": "user STRING, amount INT", "key": ["user"]},
    }
    for name in ("ck-clicks", "ck-enriched")
]
TOTALS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": VIEW},
    "spec": {
        "inputs": [{"log": "ck-clicks", "alias": "clicks"}],
        "sql": "SELECT user, sum(amount) AS total FROM clicks GROUP BY user",
        "output": {"mode": "upsert", "key": ["user"]},
    },
}
ENRICHER = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "StreamJob",
    "metadata": {"name": JOB},
    "spec": {
        "image": "my-registry/enricher:1.0",
        "mainApplicationFile": "local:///app/enrich.py",
        "inputs": [{"log": "ck-clicks"}],
        "outputs": [{"log": "ck-enriched"}],
    },
}


def stalled_reason(cluster: Cluster, kind: str, name: str) -> str | None:
    found = condition(cluster.get(kind, name), "Stalled")
    return str(found["reason"]) if found and found["status"] == "True" else None


@pytest.fixture(scope="module")
def refused(cluster: Cluster, operator: Operator) -> Operator:
    """The view and job applied to the operator with node-local checkpoints, and refused."""
    cluster.apply(*LOGS, TOTALS, ENRICHER)
    waiting(
        operator,
        "the view and the job Stalled",
        lambda: stalled_reason(cluster, "dview", VIEW) and stalled_reason(cluster, "sjob", JOB),
    )
    return operator


def test_node_local_checkpoints_stall_every_view_and_job_with_the_fix(
    refused: Operator, cluster: Cluster
) -> None:
    for kind, name in (("dview", VIEW), ("sjob", JOB)):
        stalled = condition(cluster.get(kind, name), "Stalled") or {}
        assert stalled["reason"] == "CheckpointNotDurable"
        message = stalled["message"]
        assert refused.folder.as_uri() in message  # the root, as the harness sets it
        assert "restarted driver loses its checkpoint" in message
        assert "DISTRIBUTARY_CHECKPOINT_CLAIM" in message
        assert "DISTRIBUTARY_ALLOW_NODE_LOCAL_CHECKPOINTS=true" in message
        assert (condition(cluster.get(kind, name), "Ready") or {}).get("status") == "False"
    listed = cluster.kubectl("get", SPARK_APPLICATION, "-n", NAMESPACE, "-o", "name")
    assert listed.strip() == ""
    # Said once, at the start: whatever the operator logged since, the whole log is read.
    assert "every view and job is refused" in refused.logs(tail=None)


@pytest.fixture(scope="module")
def claimed(refused: Operator, cluster: Cluster) -> Operator:
    """The same operator restarted with a checkpoint claim and the root under its mount."""
    refused.stop()
    refused.extra = (*refused.extra, *CLAIM_FLAGS)
    refused.start()
    return refused


def application(cluster: Cluster, name: str) -> dict[str, Any] | None:
    return cluster.get(SPARK_APPLICATION, name)


def test_with_a_claim_applications_mount_it_and_checkpoint_under_it(
    claimed: Operator, cluster: Cluster
) -> None:
    view_app = waiting(
        claimed, f"SparkApplication {VIEW}-r1", lambda: application(cluster, f"{VIEW}-r1")
    )
    job_app = waiting(
        claimed, f"SparkApplication {JOB}-job-r1", lambda: application(cluster, f"{JOB}-job-r1")
    )
    for app in (view_app, job_app):
        spec = app["spec"]
        (volume,) = spec["volumes"]
        assert volume["persistentVolumeClaim"] == {"claimName": CLAIM}
        for role in ("driver", "executor"):
            assert spec[role]["volumeMounts"] == [{"name": volume["name"], "mountPath": MOUNT}]
    runner = json.loads(view_app["spec"]["arguments"][1])
    uid = cluster.get("dview", VIEW)["metadata"]["uid"]  # a view's folder is its uid's
    assert runner["checkpoint_location"] == f"file://{MOUNT}/root/{NAMESPACE}/{VIEW}/{uid}/r1"
    job_env = job_app["spec"]["driver"]["envVars"]
    assert (
        job_env["DISTRIBUTARY_CHECKPOINT_LOCATION"] == f"file://{MOUNT}/root/{NAMESPACE}/{JOB}/r1"
    )
    waiting(
        claimed,
        "the view and the job no longer Stalled",
        lambda: (
            not stalled_reason(cluster, "dview", VIEW) and not stalled_reason(cluster, "sjob", JOB)
        ),
    )
