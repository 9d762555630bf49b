"""Why a driver pod never starts, from the pod as the kubelet left it
(`plan.applications.driver_pods`)."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.plan.applications.driver_pods import DRIVER_NOT_STARTING, driver_not_starting

NS, POD = "shop", "big-r2-driver"


def pod(
    waiting: dict[str, str] | None = None,
    *,
    phase: str = "Pending",
    init: dict[str, str] | None = None,
    conditions: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A driver pod whose container (or init container) is waiting as `waiting` says."""

    def statuses(found: dict[str, str] | None, name: str) -> list[dict[str, Any]]:
        state = {"waiting": found} if found is not None else {"running": {}}
        return [{"name": name, "image": "dist/spark:1", "ready": False, "state": state}]

    status: dict[str, Any] = {"phase": phase, "containerStatuses": statuses(waiting, "spark")}
    if init is not None:
        status["initContainerStatuses"] = statuses(init, "setup")
    if conditions is not None:
        status["conditions"] = conditions
    return {
        "metadata": {"name": POD, "namespace": NS},
        "spec": {
            "serviceAccountName": "distributary-spark",
            "containers": [{"name": "spark", "image": "dist/spark:1"}],
        },
        "status": status,
    }


def test_a_missing_secret_names_the_secret_the_namespace_and_what_to_do() -> None:
    said = {"reason": "CreateContainerConfigError", "message": 'secret "kafka-user" not found'}
    problem = driver_not_starting(pod(said), 2)
    assert problem is not None
    assert problem.reason == DRIVER_NOT_STARTING
    message = problem.message
    assert message.startswith(f"revision 2's driver pod {NS}/{POD} does not start: ")
    assert 'CreateContainerConfigError: secret "kafka-user" not found' in message
    assert f"create Secret kafka-user in namespace {NS}" in message
    assert "DISTRIBUTARY_KAFKA_*_SECRET" in message
    assert "\n" not in message


def test_a_missing_key_of_a_secret_says_which_key_to_add() -> None:
    said = {
        "reason": "CreateContainerConfigError",
        "message": f"couldn't find key password in Secret {NS}/kafka-user",
    }
    problem = driver_not_starting(pod(said), 1)
    assert problem is not None
    assert f"add the key password to Secret kafka-user in namespace {NS}" in problem.message


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "ErrImagePull", "InvalidImageName"])
def test_an_image_that_cannot_be_pulled_points_at_the_image_settings_and_pull_secrets(
    reason: str,
) -> None:
    said = {"reason": reason, "message": 'Back-off pulling image "dist/spark:1"'}
    problem = driver_not_starting(pod(said), 3)
    assert problem is not None
    assert f"{reason}: Back-off pulling image" in problem.message
    assert "check the image dist/spark:1" in problem.message
    assert "--image" in problem.message
    assert "spark.jobImage" in problem.message
    assert "pull secrets of service account distributary-spark" in problem.message


def test_an_init_container_waiting_counts_too() -> None:
    said = {"reason": "CreateContainerError", "message": "container name in use"}
    problem = driver_not_starting(pod(None, init=said), 1)
    assert problem is not None
    assert "CreateContainerError: container name in use" in problem.message
    assert f"kubectl describe pod -n {NS} {POD}" in problem.message


def test_an_unschedulable_pod_says_what_the_scheduler_said() -> None:
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient cpu.",
    }
    problem = driver_not_starting(pod(None, conditions=[scheduled]), 1)
    assert problem is not None
    assert "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu." in problem.message
    assert "spec.spark.driver" in problem.message


@pytest.mark.parametrize(
    "found",
    [
        None,  # not made yet
        pod(None, phase="Running"),
        pod({"reason": "ContainerCreating"}),  # the normal start
        pod({"reason": "CreateContainerConfigError", "message": "x"}, phase="Failed"),
        pod(None, conditions=[{"type": "PodScheduled", "status": "False", "reason": "Other"}]),
    ],
)
def test_a_pod_that_runs_starts_or_is_not_made_yet_is_no_problem(
    found: dict[str, Any] | None,
) -> None:
    assert driver_not_starting(found, 1) is None


def test_the_kubelets_message_is_kept_to_one_short_line() -> None:
    said = {"reason": "CreateContainerError", "message": "first line\nsecond " + "x" * 1000}
    problem = driver_not_starting(pod(said), 1)
    assert problem is not None
    assert "\n" not in problem.message
    assert "first line second" in problem.message
    assert len(problem.message) < 800
