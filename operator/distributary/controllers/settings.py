"""The operator's settings, from flags and environment, shared with every handler through kopf's
memo: one place decides how Kafka is reached and which backend makes topics."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from distributary.backends.direct import DirectTopics
from distributary.backends.local_spark import LocalRuntime
from distributary.backends.strimzi import StrimziTopics
from distributary.controllers.topic_batches import TopicBatches
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.progress import ProgressReader
from distributary.kube.resources import Kube
from distributary.plan.pipeline import DEFAULT_CHECKPOINT_ROOT, DEFAULT_IMAGE
from distributary.plan.progress import PROGRESS_TOPIC

TopicBackend = Literal["strimzi", "direct"]
SparkRuntime = Literal["spark-operator", "local"]

# Kafka client settings the operator takes from its environment (e.g. a Secret in the chart).
KAFKA_ENVIRONMENT = {
    "DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL": "security.protocol",
    "DISTRIBUTARY_KAFKA_SASL_MECHANISM": "sasl.mechanism",
    "DISTRIBUTARY_KAFKA_SASL_USERNAME": "sasl.username",
    "DISTRIBUTARY_KAFKA_SASL_PASSWORD": "sasl.password",
    "DISTRIBUTARY_KAFKA_SSL_CA_LOCATION": "ssl.ca.location",
    "DISTRIBUTARY_KAFKA_SSL_CERTIFICATE_LOCATION": "ssl.certificate.location",
    "DISTRIBUTARY_KAFKA_SSL_KEY_LOCATION": "ssl.key.location",
}


def kafka_security() -> dict[str, str]:
    """Kafka client settings from DISTRIBUTARY_KAFKA_* environment variables that are set."""
    return {
        key: os.environ[name] for name, key in KAFKA_ENVIRONMENT.items() if os.environ.get(name)
    }


@dataclass
class OperatorSettings:
    """How the operator reaches Kafka and Spark, and how often it looks."""

    bootstrap_servers: str
    topic_backend: TopicBackend = "direct"
    strimzi_cluster: str = "my-cluster"
    spark_runtime: SparkRuntime = "spark-operator"
    image: str = DEFAULT_IMAGE
    checkpoint_root: str = DEFAULT_CHECKPOINT_ROOT
    observe_interval: float = 30.0
    namespaces: tuple[str, ...] = ()
    state_dir: Path = Path("/var/lib/distributary/local")
    restart_due: dict[tuple[str, str], float] = field(default_factory=dict, repr=False)
    # The last state seen of each SparkApplication (namespace, name): `observer.py` acts on
    # changes.
    application_states: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)
    _admin: KafkaAdmin | None = field(default=None, repr=False)
    _kube: Kube | None = field(default=None, repr=False)
    _local: LocalRuntime | None = field(default=None, repr=False)
    _progress: ProgressReader | None = field(default=None, repr=False)
    _batches: TopicBatches | None = field(default=None, repr=False)

    @property
    def admin(self) -> KafkaAdmin:
        """The one Kafka admin client of the operator."""
        if self._admin is None:
            self._admin = KafkaAdmin(self.bootstrap_servers, client=kafka_security())
        return self._admin

    @property
    def kube(self) -> Kube:
        """The Kubernetes adapter, for children the operator applies itself."""
        if self._kube is None:
            # The kubeconfig kopf uses too: $KUBECONFIG, else the pod's service account.
            self._kube = Kube(os.environ.get("KUBECONFIG") or None)
        return self._kube

    @property
    def local_runtime(self) -> LocalRuntime:
        """The local Spark runtime, its processes under `state_dir`."""
        if self._local is None:
            self._local = LocalRuntime(self.state_dir)
        return self._local

    @property
    def progress(self) -> ProgressReader:
        """The reader of the runners' progress topic."""
        if self._progress is None:
            self._progress = ProgressReader(self.bootstrap_servers, PROGRESS_TOPIC)
        return self._progress

    @property
    def strimzi(self) -> StrimziTopics:
        """The strimzi topic backend: KafkaTopics in the Logs' namespaces, or in the one
        $DISTRIBUTARY_STRIMZI_NAMESPACE names (where Strimzi's topic operator watches)."""
        namespace = os.environ.get("DISTRIBUTARY_STRIMZI_NAMESPACE") or None
        return StrimziTopics(self.kube, self.strimzi_cluster, namespace)

    @property
    def topics(self) -> DirectTopics:
        """The direct topic backend, on the shared admin client."""
        return DirectTopics(self.admin)

    @property
    def topic_batches(self) -> TopicBatches:
        """The direct backend's topic work of many Logs at once (`topic_batches.py`)."""
        if self._batches is None:
            self._batches = TopicBatches(self.topics.reconcile_many)
        return self._batches
