"""Sinks' processes in a cluster: one Deployment each (`plan.sink_plan.sink_manifests`).

Under the `spark-operator` runtime a Sink's process (`python -m distributary.sinks`) runs in a pod
of the job image, from a ConfigMap holding its spec; Kubernetes starts it again when it dies. The
operator reads back the Deployment's availability, and why it is not available from its
conditions; it lists no pods. A process that refuses its store says so in its consumer group's
commit metadata (`plan.sink_plan.REFUSED_METADATA`), which the Sink controller reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distributary.kube.resources import Kube
from distributary.plan.children import holds
from distributary.plan.sink_plan import SinkRun, sink_workload_name


@dataclass(frozen=True)
class SinkPod:
    """A Sink's process as its Deployment shows it: running, or what it waits for."""

    running: bool
    waiting: str = ""


@dataclass
class SinkDeployments:
    """Applies Sinks' ConfigMaps and Deployments and reads the Deployments through `kube`."""

    kube: Kube

    def ensure(self, manifests: list[dict[str, Any]]) -> None:
        """Apply each manifest unless the object already holds it."""
        for manifest in manifests:
            meta = manifest["metadata"]
            found = self.kube.get(
                manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"]
            )
            if found is None or not holds(found, manifest):
                self.kube.apply(manifest)

    def last_run(self, namespace: str, name: str) -> SinkRun | None:
        """The spec the Sink's process was last given (None: none yet)."""
        found = self.kube.get("v1", "ConfigMap", namespace, sink_workload_name(name))
        text = ((found or {}).get("data") or {}).get("spec.json")
        if not text:
            return None
        try:
            return SinkRun.model_validate_json(text)
        except ValueError:
            return None

    def state(self, namespace: str, name: str) -> SinkPod:
        """The process's state, from its Deployment."""
        deployment = self.kube.get("apps/v1", "Deployment", namespace, sink_workload_name(name))
        return deployment_state(deployment)


def deployment_state(deployment: dict[str, Any] | None) -> SinkPod:
    """Running when the Deployment, as its controller last saw the current spec, has its
    replica available; else what its conditions say it waits for."""
    if deployment is None:
        return SinkPod(False, "its Deployment is being made")
    status = deployment.get("status") or {}
    generation = (deployment.get("metadata") or {}).get("generation")
    if status.get("observedGeneration") != generation:
        return SinkPod(False, "its Deployment is being rolled out")
    if int(status.get("availableReplicas") or 0) >= 1 and not status.get("unavailableReplicas"):
        return SinkPod(True)
    for kind in ("ReplicaFailure", "Progressing", "Available"):
        found = next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)
        if found and found.get("status") != "True" and found.get("message"):
            return SinkPod(False, str(found["message"]))
    return SinkPod(False, "its pod is not available yet")
