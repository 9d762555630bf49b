"""The operator's settings: documented values and nothing else.

Every knob is here, read once at start from flags and the environment (`controllers/main.py`),
so a test builds settings without touching the environment and nothing reads it later. The
clients and backends built from them are services (`controllers/services.py`); what the operator
remembers between reconciles lives beside the code that owns it. Defaults are the planners'
(`plan.pipelines.pipeline`), so `distributary plan` previews what the operator does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from distributary.api.names import CLAIMS_TOPIC, DEFAULT_TOPIC_NAMES, PROGRESS_TOPIC
from distributary.plan.access.kafka_connection import (
    ENVIRONMENT,
    PASSWORD_FILE_VARIABLE,
    PASSWORD_VARIABLE,
    KafkaSecurity,
    security_from_environment,
)
from distributary.plan.access.kafka_secrets import SECRET_ENVIRONMENT, KafkaSecretMounts
from distributary.plan.applications.checkpoint_storage import CheckpointClaim
from distributary.plan.applications.restarts import RestartPolicy
from distributary.plan.applications.spark import DEFAULT_SERVICE_ACCOUNT
from distributary.plan.kafka_topics.claims import SWEEP_SECONDS
from distributary.plan.pipelines.pipeline import (
    DEFAULT_CHECKPOINT_ROOT,
    DEFAULT_IMAGE,
    DEFAULT_STRIMZI_CLUSTER,
    DEFAULT_TOPIC_BACKEND,
    SparkRuntime,
    TopicBackend,
)

# The variables the operator's Kafka connection comes from (e.g. a Secret in the chart): see
# `plan.access.kafka_connection.security_from_environment`.
KAFKA_ENVIRONMENT = (
    *ENVIRONMENT,
    PASSWORD_VARIABLE,
    PASSWORD_FILE_VARIABLE,
    *SECRET_ENVIRONMENT,
)
DEFAULT_STATE_DIR = Path("/var/lib/distributary/local")


@dataclass(frozen=True)
class OperatorSettings:
    """How the operator reaches Kafka, Kubernetes and Spark, and how often it looks."""

    bootstrap_servers: str
    """Kafka's bootstrap servers, host:port[,host:port...]."""

    kafka_security: KafkaSecurity | None = None
    """How every client the operator opens, and every runner and job it starts, authenticates
    to Kafka and trusts it (references to secrets, never a secret); None: plaintext."""

    kafka_secrets: KafkaSecretMounts | None = None
    """The Secrets (in each pipeline namespace) that give Spark drivers and executors their
    Kafka credentials under the spark-operator runtime; None: none are mounted."""

    topic_backend: TopicBackend = DEFAULT_TOPIC_BACKEND
    """Where topics are made: `direct` (Kafka's Admin API) or `strimzi` (KafkaTopics)."""

    strimzi_cluster: str = DEFAULT_STRIMZI_CLUSTER
    """The `strimzi.io/cluster` label of every KafkaTopic."""

    strimzi_namespace: str | None = None
    """Where KafkaTopics go (where Strimzi's topic operator watches); None: each Log's own."""

    progress_topic: str = PROGRESS_TOPIC
    """Where this installation's runners publish progress; installations sharing a Kafka
    cluster each need their own (`distributary.<installation>.progress`)."""

    claims_topic: str = CLAIMS_TOPIC
    """Where who owns each topic is kept (`plan.kafka_topics.claims`); installations sharing a Kafka
    cluster share it, so a topic stays one Log's across them."""

    claims_sweep_interval: float = SWEEP_SECONDS
    """Seconds between sweeps that release the claims of Logs deleted while no operator
    watched them (`plan.kafka_topics.claims.stale_claims`); the first runs at start."""

    topic_names: str = DEFAULT_TOPIC_NAMES
    """How Logs without `spec.topicName` name their topics (`api.names.TopicNames`): `{name}`,
    or e.g. `{namespace}.{name}` on a Kafka cluster shared by teams."""

    spark_runtime: SparkRuntime = "spark-operator"
    """What runs revisions: `spark-operator` (SparkApplications) or `local` (processes)."""

    image: str = DEFAULT_IMAGE
    """The job image of views whose spec names none."""

    spark_service_account: str = DEFAULT_SERVICE_ACCOUNT
    """The service account Spark drivers run as, in each view's or job's namespace."""

    checkpoint_root: str = DEFAULT_CHECKPOINT_ROOT
    """Where revisions checkpoint: storage every driver reaches."""

    checkpoint_claim: CheckpointClaim | None = None
    """A PersistentVolumeClaim every SparkApplication mounts into its driver and executors, with
    the checkpoint root under its mount path; None: none."""

    allow_node_local_checkpoints: bool = False
    """Run revisions under the spark-operator runtime even when their checkpoints are on each
    driver's own disk (lost with the driver), instead of refusing them."""

    allowed_sql_functions: frozenset[str] = frozenset()
    """The functions of `sql.UNSAFE_FUNCTIONS` (code of a view's author's choosing, run inside
    Spark) that views' SQL may call; none by default."""

    observe_interval: float = 30.0
    """Seconds from the start of one observe round to the start of the next."""

    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)
    """How ended applications are restarted (the back-off), and how many failures within which
    window make a view or job Stalled (`plan.applications.restarts`)."""

    namespaces: tuple[str, ...] = ()
    """The namespaces watched; none: every namespace."""

    state_dir: Path = DEFAULT_STATE_DIR
    """The local runtime's folder: runner specs, pids and logs."""

    connect_url: str | None = None
    """A Kafka Connect cluster's REST endpoint that runs Sources' connectors (clusters without
    Strimzi); None: `connect_cluster`, or no Sources run."""

    connect_cluster: str | None = None
    """The Strimzi KafkaConnect (its `strimzi.io/cluster` label value) whose KafkaConnectors run
    Sources' connectors, when `connect_url` is not given."""

    connect_namespace: str | None = None
    """Where KafkaConnectors go (the KafkaConnect's namespace); None: each Source's own."""

    connect_secrets: str = "kubernetes"
    """How Connect's workers read a Source's database password: `kubernetes` (Strimzi's
    KubernetesSecretConfigProvider reads the Secret: `${secrets:NS/NAME:KEY}`), or the folder
    where the workers mount each Secret (`FOLDER/NAME/KEY`, Kafka's DirectoryConfigProvider)."""

    kubeconfig: str | None = None
    """The kubeconfig of the API server; None: the pod's service account."""

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, **values: object
    ) -> OperatorSettings:
        """Settings from `values` (the flags) and what only the environment gives: the
        kubeconfig kopf uses too, Strimzi's namespace and the Kafka client's security."""
        env = os.environ if environ is None else environ
        return cls(
            kafka_security=security_from_environment(env),
            kafka_secrets=KafkaSecretMounts.from_environment(env),
            strimzi_namespace=env.get("DISTRIBUTARY_STRIMZI_NAMESPACE") or None,
            kubeconfig=env.get("KUBECONFIG") or None,
            **values,  # type: ignore[arg-type]
        )
