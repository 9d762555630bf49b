"""Pods on the test node, made and read through the API server as a user would."""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any
from urllib.parse import quote

from distributary.devtools.node import Node

POD_TIMEOUT = 180.0  # seconds for a pod to finish on a loaded machine
PIPELINES = "pipelines"  # the namespace of the pipelines the installed operator watches
SYSTEM = "distributary-system"  # where the chart is installed (`conftest.installed`)
RELEASE = "distributary"
SELECTOR = "app.kubernetes.io/name=distributary"  # the operator's pod
CONNECT = "distributary-connect"  # the chart's Kafka Connect: its Deployment, Service, topics
CONNECT_SELECTOR = "app.kubernetes.io/name=distributary-connect"  # its pods
# The JVMs of the tests' pods (Spark's drivers and executors, Connect) compile with C1 alone and
# collect with the serial collector, as the suite's other JVMs (`tests/integration/conftest.py`):
# five to ten of them share two cores with the rest of the suite. Set through the views' own pod
# settings (`spec.spark.pods.env`), as a user on a small node would.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SMALL_JVMS = {"name": "JAVA_TOOL_OPTIONS", "value": JVM_OPTIONS}


def create_pod(
    node: Node,
    name: str,
    image: str,
    command: list[str],
    *,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    placed: bool = True,
    **spec: Any,
) -> None:
    """Create a pod that runs `command` once: on the node (`spec.nodeName`), or with `placed`
    False wherever the scheduler places it."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            **({"nodeName": node.name} if placed else {}),
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": image, "args": command}],
            **spec,
        },
    }
    node.api("POST", f"/api/v1/namespaces/{namespace}/pods", pod)


def finished(node: Node, name: str, namespace: str = "default") -> dict[str, Any]:
    """The pod once it has Succeeded or Failed."""
    deadline = time.monotonic() + POD_TIMEOUT
    found: dict[str, Any] = {}
    while time.monotonic() < deadline:
        found = node.api("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        if found.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return found
        time.sleep(0.5)
    raise AssertionError(f"pod {name} did not finish in {POD_TIMEOUT:.0f}s: {found.get('status')}")


def run_pod(
    node: Node, name: str, image: str, command: list[str], **options: Any
) -> dict[str, Any]:
    """Create a pod that runs `command` once (`create_pod`); the pod once it has finished."""
    create_pod(node, name, image, command, **options)
    return finished(node, name, options.get("namespace", "default"))


def logs(node: Node, name: str, namespace: str = "default") -> str:
    """The pod's log as `kubectl logs` reads it: the API server asks the kubelet."""
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is needed on PATH"
    command = [kubectl, "--kubeconfig", str(node.plane.kubeconfig), "-n", namespace, "logs", name]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"kubectl logs {name} failed: {result.stderr}"
    return result.stdout


def pods(node: Node, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The pods of `namespace` that `selector` (a label selector) matches."""
    path = f"/api/v1/namespaces/{namespace}/pods?labelSelector={quote(selector)}"
    return list(node.api("GET", path)["items"])


def ready_pods(node: Node, namespace: str, selector: str) -> list[dict[str, Any]]:
    """Those of `pods` that are ready and not being deleted."""
    return [
        pod
        for pod in pods(node, namespace, selector)
        if "deletionTimestamp" not in pod["metadata"]
        and all(c.get("ready") for c in pod["status"].get("containerStatuses") or [{}])
    ]
