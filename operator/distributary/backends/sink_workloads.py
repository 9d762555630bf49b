"""Sinks' processes in a cluster: one Deployment each (`plan.sinks.sink_plan.sink_manifests`).

Under the `spark-operator` runtime a Sink's process (`python -m distributary.sinks`) runs in a pod
of the job image, from a ConfigMap holding its spec; Kubernetes starts it again when it dies. The
operator reads back the Deployment's availability, and why it is not available from its
conditions; it lists no pods. A process that refuses its store says so in its consumer group's
commit metadata (`plan.sinks.sink_plan.REFUSED_METADATA`), which `reconcile.sink` reads. This is the
cluster's `SinkRuntime` (`backends.base`): Kubernetes restarts the pod, so its process is never
seen as ended, and the operator's restart policy has nothing to restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from distributary.api.sink import Sink
from distributary.backends.base import RevisionApp
from distributary.kube.resources import Kube
from distributary.plan.access.kafka_secrets import KafkaSecretMounts
from distributary.plan.applications.children import holds
from distributary.plan.applications.spark_state import AppState
from distributary.plan.sinks.sink_plan import SinkRun, sink_manifests, sink_workload_name


@dataclass(frozen=True)
class SinkPod:
    """A Sink's process as its Deployment shows it: running, or what it waits for."""

    running: bool
    waiting: str = ""


@dataclass
class SinkDeployments:
    """Applies Sinks' ConfigMaps and Deployments and reads the Deployments through `kube`:
    pods of `image`, with the Kafka Secrets `kafka` mounted."""

    kube: Kube
    image: str = ""
    kafka: KafkaSecretMounts | None = None

    def sink_app(self, sink: Sink, run: SinkRun, owner: Mapping[str, Any]) -> RevisionApp:
        """The Sink's Deployment running `run`; its pod reads the password from its Secret."""
        namespace, name = sink.metadata.namespace, sink.metadata.name
        store = sink.spec.postgres or sink.spec.redis
        secret = store.password_secret if store is not None else None
        manifests = sink_manifests(
            run,
            namespace=namespace,
            name=name,
            image=self.image,
            owner=dict(owner),
            password=(secret.name, secret.key) if secret is not None else None,
            kafka=self.kafka,
        )

        def state() -> AppState:
            pod = self.state(namespace, name)
            if pod.running:
                return AppState("RUNNING", running=True)
            return AppState("SUBMITTED", message=pod.waiting)

        def start() -> AppState:
            self.ensure(manifests)
            return state()

        return RevisionApp(namespace, sink_workload_name(name), state, start, lambda: None)

    def stop(self, namespace: str, name: str) -> None:
        """Nothing: the Deployment and its ConfigMap are the Sink's children, deleted with it."""

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
