"""A view follows its SparkApplication's state as it changes, not at the next observe round.

The operator here observes only every 10 minutes, so what the view shows within seconds of its
application's state changing comes from the operator's watch of SparkApplications: the view
turns Ready when the application runs, and a streaming application that ends is reported (and
restarted after its back-off) at once. The Spark operator is not run (no kubelet): the test
writes the application's status as it would, through the status subresource.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from tests.integration.kube.operator_harness import Cluster, Operator, condition, is_true, waiting
from tests.integration.kube.test_view_spark_operator import SPARK_APPLICATION, SPARK_CRD

from distributary.plan.applications.spark import application_name

NAMESPACE = "spark-events"
EXTRA_CRDS = (SPARK_CRD,)
OPERATOR_FLAGS = ("--spark-runtime", "spark-operator", "--observe-interval", "600")
PROMPT = 10.0  # seconds: far below the observe interval
CLICKS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "ev-clicks"},
    "spec": {"partitions": 1, "schema": "user STRING, amount INT"},
}


def view(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": name},
        "spec": {
            "inputs": [{"log": "ev-clicks", "alias": "clicks"}],
            "sql": "SELECT user, amount FROM clicks",
            "output": {"mode": "append"},
        },
    }


VIEWS = [f"ev-view-{i}" for i in range(4)]


def set_state(cluster: Cluster, application: str, state: str) -> None:
    """Write the application's status as the Spark operator does (driverInfo is required)."""
    status = {"applicationState": {"state": state}, "driverInfo": {"podName": f"{application}-d"}}
    cluster.kubectl(
        "patch", SPARK_APPLICATION, application, "-n", cluster.namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip


@pytest.fixture(scope="module")
def applications(cluster: Cluster, operator: Operator) -> list[str]:
    """The views applied, their applications created (not yet running)."""
    cluster.apply(CLICKS, *(view(name) for name in VIEWS))
    names = [application_name(name, 1) for name in VIEWS]
    for name in names:
        waiting(
            operator, f"SparkApplication {name}", lambda n=name: cluster.get(SPARK_APPLICATION, n)
        )
    return names


def test_views_turn_ready_as_soon_as_their_applications_run(
    applications: list[str], cluster: Cluster, operator: Operator
) -> None:
    assert not any(is_true(cluster.get("dview", name), "Ready") for name in VIEWS)
    started = time.monotonic()
    for name in applications:
        set_state(cluster, name, "RUNNING")
    for name in VIEWS:
        waiting(
            operator,
            f"{name} Ready",
            lambda n=name: is_true(cluster.get("dview", n), "Ready"),
            timeout=PROMPT,
        )
    assert time.monotonic() - started < PROMPT


def test_an_application_that_ends_is_reported_at_once(
    applications: list[str], cluster: Cluster, operator: Operator
) -> None:
    set_state(cluster, applications[0], "FAILED")

    def restarting() -> dict[str, Any] | None:
        found = condition(cluster.get("dview", VIEWS[0]), "Reconciling")
        return found if found and found.get("reason") == "Restarting" else None

    found = waiting(operator, "Reconciling (Restarting)", restarting, timeout=PROMPT)
    assert "the streaming application ended (FAILED)" in found["message"]
    assert all(is_true(cluster.get("dview", name), "Ready") for name in VIEWS[1:])
