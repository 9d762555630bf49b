"""The real Kubeflow Spark operator in the kube tests: its CRDs, and what tests read of its work.

The CRDs are read from the Go module cache at the release `distributary.devtools.sparkoperator`
pins (downloaded on first use), never from a copy: `SPARK_CRDS` is their folder, which every test
module applying SparkApplications installs (`EXTRA_CRDS`). The controller itself, with kwok as
nodes, runs once per session (the `spark_operator` fixture) and manages only `NAMESPACES`, so
modules that write SparkApplication statuses by hand are left alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.integration.kube.operator_harness import Cluster

from distributary.devtools.sparkoperator import crd_files

SPARK_CRDS: Path = crd_files()[0].parent
SPARK_APPLICATION = "sparkapplications.sparkoperator.k8s.io"
# The namespaces of the modules run against the real controller (each module's NAMESPACE).
VIEW_NAMESPACE = "real-spark-view"
JOB_NAMESPACE = "real-spark-job"
NAMESPACES = (VIEW_NAMESPACE, JOB_NAMESPACE)
FINALIZER = "sparkoperator.k8s.io/finalizer"


def app_state(cluster: Cluster, name: str) -> str | None:
    """The state the Spark operator reports for SparkApplication `name`, None when none yet."""
    found = cluster.get(SPARK_APPLICATION, name) or {}
    return ((found.get("status") or {}).get("applicationState") or {}).get("state")


def fail_pod(
    cluster: Cluster, pod: str, message: str, *, reason: str = "Error", exit_code: int = 1
) -> None:
    """Make `pod` Failed, its container terminated with `exit_code` and `reason`, as a kubelet
    would report a crashed driver (kwok runs no container that could crash)."""
    found = cluster.get("pod", pod)
    assert found is not None, f"pod {pod} does not exist"
    container = found["spec"]["containers"][0]["name"]
    terminated = {
        "exitCode": exit_code,
        "reason": reason,
        "message": message,
        "startedAt": found["status"].get("startTime"),
        "finishedAt": found["status"].get("startTime"),
    }
    status = {
        "phase": "Failed",
        "message": message,
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [
            {
                "name": container,
                "image": found["spec"]["containers"][0]["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        ],
    }
    cluster.kubectl(
        "patch", "pod", pod, "-n", cluster.namespace, "--subresource=status",
        "--type=strategic", "-p", json.dumps({"status": status}),
    )  # fmt: skip


def container_env(pod: dict[str, Any]) -> dict[str, Any]:
    """The driver container's environment: name -> value, or the valueFrom of a reference."""
    container = pod["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}
