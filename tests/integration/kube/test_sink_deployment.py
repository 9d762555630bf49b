"""A Sink under the spark-operator runtime: its process as a Deployment of the job image.

The operator (the chart's RBAC for that runtime) on the test control plane: a Sink of a Log with
a schema gets a ConfigMap holding its process's spec (the Log's topic and columns, the password
as a file mounted from the Secret) and a Deployment of one replica running it, both children of
the Sink; the Sink says it is starting (this control plane runs no pods) and why. An edit of the
Sink (its database moved) rolls the Deployment to the new spec; deleting the Sink takes both
away (garbage collection).
"""

from __future__ import annotations

import json
from typing import Any

from tests.integration.kube.operator_harness import Cluster, Operator, condition, waiting
from tests.integration.kube.spark_operator_bed import SPARK_CRDS

NAMESPACE = "sink-deployment"
EXTRA_CRDS = (SPARK_CRDS,)  # the spark-operator runtime watches SparkApplications
OPERATOR_FLAGS = ("--spark-runtime", "spark-operator", "--image", "registry.example/spark:test")
WORKLOAD = "distributary-sink-totals-table"
LOG = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "sd-totals"},
    "spec": {"partitions": 2, "schema": "user STRING, total BIGINT", "key": ["user"],
             "compaction": True},
}  # fmt: skip


def _sink(host: str) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Sink",
        "metadata": {"name": "totals-table"},
        "spec": {
            "log": "sd-totals",
            "postgres": {"host": host, "database": "reports", "user": "serving",
                         "passwordSecret": {"name": "reports-db"}, "table": "public.totals"},
        },
    }  # fmt: skip


def _spec(cluster: Cluster) -> dict[str, Any] | None:
    found = cluster.get("configmap", WORKLOAD)
    return json.loads(found["data"]["spec.json"]) if found else None


def test_a_sink_runs_as_a_deployment_of_the_job_image(cluster: Cluster, operator: Operator) -> None:
    cluster.apply(LOG, _sink("db.example"))
    spec = waiting(operator, "the Sink's ConfigMap", lambda: _spec(cluster), timeout=90)
    assert spec["topic"] == "sd-totals"
    assert spec["columns"] == [["user", "STRING"], ["total", "BIGINT"]]
    assert spec["key"] == ["user"]
    assert spec["table"] == "public.totals"
    assert spec["password_file"] == "/etc/distributary/store/password"
    deployment = waiting(
        operator, "the Sink's Deployment", lambda: cluster.get("deployment", WORKLOAD), timeout=30
    )
    owners = [(o["kind"], o["name"]) for o in deployment["metadata"]["ownerReferences"]]
    assert owners == [("Sink", "totals-table")]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example/spark:test"
    assert {v["name"]: v for v in pod["volumes"]}["store"]["secret"]["secretName"] == "reports-db"
    sink = waiting(
        operator,
        "the Sink starting, saying why",
        lambda: (
            lambda s: s if (condition(s, "Ready") or {}).get("reason") == "Starting" else None
        )(cluster.get("sink", "totals-table")),
        timeout=60,
    )
    ready = condition(sink, "Ready")
    assert ready is not None
    assert ready["status"] == "Unknown"
    assert "sd-totals" in ready["message"]
    assert condition(sink, "Reconciling") is not None


def test_an_edit_rolls_the_deployment_and_deleting_takes_it_away(
    cluster: Cluster, operator: Operator
) -> None:
    before = cluster.get("deployment", WORKLOAD)
    assert before is not None
    cluster.apply(_sink("db2.example"))  # the database moved
    waiting(
        operator,
        "the new spec in the ConfigMap",
        lambda: (_spec(cluster) or {}).get("host") == "db2.example",
        timeout=60,
    )
    after = waiting(
        operator,
        "the Deployment rolled",
        lambda: (lambda d: d if d and d["metadata"]["generation"] > before["metadata"]["generation"]
                 else None)(cluster.get("deployment", WORKLOAD)),
        timeout=60,
    )  # fmt: skip
    hashes = [d["spec"]["template"]["metadata"]["annotations"] for d in (before, after)]
    assert hashes[0] != hashes[1]
    cluster.kubectl("delete", "sink", "totals-table", "-n", NAMESPACE, "--wait=true",
                    "--timeout=60s")  # fmt: skip
    waiting(
        operator,
        "the Deployment and ConfigMap garbage-collected with the Sink",
        lambda: cluster.get("deployment", WORKLOAD) is None and _spec(cluster) is None,
        timeout=90,
    )
