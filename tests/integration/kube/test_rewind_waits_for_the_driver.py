"""A rewind under spark-operator moves the group only once the old driver is gone.

An at-least-once view commits its group's offsets with the Admin API, which no fence can refuse.
When its SparkApplication is deleted, its driver pod lives on for its grace period and may
commit once more: a rewind that moved the group as soon as the application was deleted would be
undone by that commit. Here the view's SparkApplication runs (its status written as the Spark
operator writes it) and its driver pod exists (a real Pod object; no kubelet runs it). The rewind
deletes the application but must leave the group alone while the pod exists; the lingering
driver then commits, and only after the pod is deleted does the rewind move the group, which
then stays where the rewind put it. Real API server and broker; the Spark operator's part is
played by the test, as in test_view_spark_operator.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kube.operator_harness import Cluster, Operator, is_true, waiting
from tests.integration.kube.spark_operator_bed import SPARK_CRDS
from tests.integration.spark_pipelines import produce

from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[3]
SPARK_CRD = SPARK_CRDS  # the release's CRDs, read from the Go module cache
SPARK_APPLICATION = "sparkapplications.sparkoperator.k8s.io"
NAMESPACE = "rewind-driver"
EXTRA_CRDS = (SPARK_CRD,)
OPERATOR_FLAGS = ("--spark-runtime", "spark-operator", "--image", "registry.example/spark:test")
VIEW, APPLICATION = "rd-copy", "rd-copy-r1"
DRIVER = f"{APPLICATION}-driver"
GROUP = f"distributary.{NAMESPACE}.{VIEW}.r1"
EVENTS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "rd-events"},
    "spec": {"partitions": 2, "schema": "user STRING, amount INT"},
}


def copy_view(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": VIEW},
        "spec": {
            "inputs": [{"log": "rd-events", "alias": "events"}],
            "sql": "SELECT user, amount FROM events",
            "output": {"mode": "append", "delivery": "AtLeastOnce"},
            **spec,
        },
    }


def running(cluster: Cluster) -> None:
    """The application's status as the Spark operator writes it for a running driver."""
    status = {
        "applicationState": {"state": "RUNNING"},
        "driverInfo": {"podName": DRIVER, "webUIPort": 4040},
        "sparkApplicationId": "spark-0123456789abcdef",
        "submissionAttempts": 1,
        "executionAttempts": 1,
        "lastSubmissionAttemptTime": "2026-11-22T12:00:00Z",
    }
    cluster.kubectl(
        "patch", SPARK_APPLICATION, APPLICATION, "-n", NAMESPACE, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip


def driver_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": DRIVER, "labels": {"spark-role": "driver"}},
        "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "spark:test"}]},
    }


def last_rewind(cluster: Cluster) -> dict[str, Any]:
    return dict(((cluster.get("dview", VIEW) or {}).get("status") or {}).get("lastRewind") or {})


@pytest.fixture(scope="module")
def rewound(cluster: Cluster, operator: Operator, broker: EmbeddedBroker) -> dict[str, Any]:
    admin = KafkaAdmin(broker.bootstrap_servers)
    cluster.apply(EVENTS)
    waiting(operator, "the Log Ready", lambda: is_true(cluster.get("dlog", "rd-events"), "Ready"))
    produce(broker.bootstrap_servers, "rd-events", [(n % 2, None, b"{}") for n in range(20)])
    cluster.apply(copy_view())
    waiting(operator, "the application", lambda: cluster.get(SPARK_APPLICATION, APPLICATION))
    running(cluster)
    cluster.apply(driver_pod())
    waiting(operator, "the view Ready", lambda: is_true(cluster.get("dview", VIEW), "Ready"))
    admin.commit(GROUP, {"rd-events": {0: 5, 1: 5}})  # where the driver has got to
    rewind = {"requestId": "again-1", "to": {"from": "Earliest"}}
    cluster.apply(copy_view(rewind=rewind))
    waiting(
        operator,
        "the application deleted",
        lambda: cluster.get(SPARK_APPLICATION, APPLICATION) is None or None,
    )
    time.sleep(6)  # three of the operator's looks at the driver
    while_alive = {"lastRewind": last_rewind(cluster), "group": admin.committed(GROUP)}
    admin.commit(GROUP, {"rd-events": {0: 7, 1: 7}})  # the lingering driver's last commit
    cluster.kubectl("delete", "pod", DRIVER, "-n", NAMESPACE, "--grace-period=0", "--force")
    done = waiting(
        operator,
        "the rewind done",
        lambda: last_rewind(cluster) if last_rewind(cluster).get("phase") == "Done" else None,
    )
    time.sleep(3)
    return {"while_alive": while_alive, "done": done, "group": admin.committed(GROUP)}


def test_the_group_is_left_alone_while_the_driver_pod_exists(rewound: dict[str, Any]) -> None:
    assert rewound["while_alive"]["lastRewind"].get("phase") == "Pending"
    assert rewound["while_alive"]["group"] == {"rd-events": {0: 5, 1: 5}}


def test_the_rewind_moves_the_group_once_the_driver_is_gone_and_it_stays(
    rewound: dict[str, Any],
) -> None:
    moved = {(m["partition"], m["toOffset"]) for m in rewound["done"]["offsets"]}
    assert moved == {(0, 0), (1, 0)}
    assert rewound["group"] == {"rd-events": {0: 0, 1: 0}}
