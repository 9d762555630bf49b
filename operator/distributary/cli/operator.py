"""`distributary operator`: the operator's flags and environment, read once into its settings
(`controllers.settings.OperatorSettings`); `controllers.main.serve` runs the controllers with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from distributary.api.names import (
    CLAIMS_SUFFIX,
    CLAIMS_TOPIC,
    DEFAULT_TOPIC_NAMES,
    PROGRESS_SUFFIX,
    internal_topic_problem,
    topic_names_problem,
)
from distributary.cli.options import RESTART_POLICY
from distributary.controllers.main import serve
from distributary.controllers.settings import DEFAULT_STATE_DIR, OperatorSettings
from distributary.plan.applications.checkpoint_storage import DEFAULT_MOUNT_PATH, CheckpointClaim
from distributary.plan.applications.restarts import RestartPolicy
from distributary.plan.applications.spark import DEFAULT_SERVICE_ACCOUNT
from distributary.plan.kafka_topics.claims import SWEEP_SECONDS
from distributary.plan.pipelines.pipeline import (
    DEFAULT_CHECKPOINT_ROOT,
    DEFAULT_IMAGE,
    DEFAULT_STRIMZI_CLUSTER,
    DEFAULT_TOPIC_BACKEND,
)
from distributary.plan.revisions.progress import PROGRESS_TOPIC
from distributary.sql import (
    ALLOW_FUNCTIONS_ENV,
    ALLOW_FUNCTIONS_FLAG,
    UNSAFE_FUNCTIONS,
    allowed_functions,
)


def _topic_names(_context: click.Context, _param: click.Parameter, text: str) -> str:
    problem = topic_names_problem(text)
    if problem is not None:
        raise click.BadParameter(problem)
    return text


def _internal_topic(suffix: str) -> Any:
    def check(_context: click.Context, _param: click.Parameter, text: str) -> str:
        problem = internal_topic_problem(text, suffix)
        if problem is not None:
            raise click.BadParameter(problem)
        return text

    return check


def _allowed_functions(
    _context: click.Context, _param: click.Parameter, text: str
) -> frozenset[str]:
    """The unsafe SQL functions the flag allows; a name that is not one is a usage error."""
    try:
        return allowed_functions(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.option(
    "--bootstrap-servers",
    required=True,
    envvar="DISTRIBUTARY_BOOTSTRAP_SERVERS",
    help="Kafka bootstrap servers (host:port,...).",
)
@click.option(
    "--topic-backend",
    type=click.Choice(["direct", "strimzi"]),
    default=DEFAULT_TOPIC_BACKEND,
    show_default=True,
    envvar="DISTRIBUTARY_TOPIC_BACKEND",
    help="direct: the Kafka Admin API; strimzi: KafkaTopic resources.",
)
@click.option(
    "--strimzi-cluster",
    default=DEFAULT_STRIMZI_CLUSTER,
    show_default=True,
    envvar="DISTRIBUTARY_STRIMZI_CLUSTER",
    help="The strimzi.io/cluster label.",
)
@click.option(
    "--spark-runtime",
    type=click.Choice(["spark-operator", "local"]),
    default="spark-operator",
    show_default=True,
    envvar="DISTRIBUTARY_SPARK_RUNTIME",
    help="spark-operator: SparkApplications; local: spark-submit on the operator's machine.",
)
@click.option(
    "--image",
    default=DEFAULT_IMAGE,
    show_default=True,
    envvar="DISTRIBUTARY_IMAGE",
    help="The default job image of views (a spec's spark.image wins).",
)
@click.option(
    "--spark-service-account",
    default=DEFAULT_SERVICE_ACCOUNT,
    show_default=True,
    envvar="DISTRIBUTARY_SPARK_SERVICE_ACCOUNT",
    help="The service account Spark drivers run as, in each view's or job's namespace.",
)
@click.option(
    "--checkpoint-root",
    default=DEFAULT_CHECKPOINT_ROOT,
    show_default=True,
    envvar="DISTRIBUTARY_CHECKPOINT_ROOT",
    help="Where revisions checkpoint: storage every driver reaches (s3a://, a shared volume).",
)
@click.option(
    "--checkpoint-claim",
    default="",
    envvar="DISTRIBUTARY_CHECKPOINT_CLAIM",
    help="A PersistentVolumeClaim (in each pipeline's namespace) that every SparkApplication "
    "mounts into its driver and executors, for a checkpoint root under its mount path.",
)
@click.option(
    "--checkpoint-mount-path",
    default=DEFAULT_MOUNT_PATH,
    show_default=True,
    envvar="DISTRIBUTARY_CHECKPOINT_MOUNT_PATH",
    help="Where drivers and executors mount the checkpoint claim.",
)
@click.option(
    "--allow-node-local-checkpoints",
    is_flag=True,
    envvar="DISTRIBUTARY_ALLOW_NODE_LOCAL_CHECKPOINTS",
    help="Run views and jobs under spark-operator even with checkpoints on each driver's own "
    "disk, which a restarted driver loses (refused otherwise).",
)
@click.option(
    ALLOW_FUNCTIONS_FLAG,
    "allow_sql_functions",
    default="",
    envvar=ALLOW_FUNCTIONS_ENV,
    callback=_allowed_functions,
    help="SQL functions that run code of a view's author's choosing inside Spark, allowed in "
    f"views' SQL (comma separated, of: {', '.join(UNSAFE_FUNCTIONS)}); refused by default.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    envvar="DISTRIBUTARY_STATE_DIR",
    help="The local runtime's folder: runner specs, pids and logs.",
)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    envvar="DISTRIBUTARY_NAMESPACES",
    help="A namespace to watch (repeatable); none: every namespace.",
)
@click.option(
    "--observe-interval",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    envvar="DISTRIBUTARY_OBSERVE_INTERVAL",
    help="Seconds between reads of offsets into status.",
)
@RESTART_POLICY
@click.option(
    "--health-port",
    type=int,
    default=8080,
    show_default=True,
    help="Port of the liveness endpoint /healthz.",
)
@click.option(
    "--metrics-port",
    type=int,
    default=9090,
    show_default=True,
    help="Port of the Prometheus endpoint /metrics; 0 turns it off.",
)
@click.option(
    "--topic-names",
    default=DEFAULT_TOPIC_NAMES,
    show_default=True,
    envvar="DISTRIBUTARY_TOPIC_NAMES",
    callback=_topic_names,
    help="How Logs without spec.topicName name their topics: {name}, or e.g. "
    "'{namespace}.{name}' on a Kafka cluster shared by teams (views' revision topics follow). "
    "Choose it before the first Log: changing it moves Logs made later to other topics.",
)
@click.option(
    "--progress-topic",
    default=PROGRESS_TOPIC,
    show_default=True,
    envvar="DISTRIBUTARY_PROGRESS_TOPIC",
    callback=_internal_topic(PROGRESS_SUFFIX),
    help="This installation's progress topic (distributary.<installation>.progress): "
    "installations sharing a Kafka cluster each need their own.",
)
@click.option(
    "--claims-topic",
    default=CLAIMS_TOPIC,
    show_default=True,
    envvar="DISTRIBUTARY_CLAIMS_TOPIC",
    callback=_internal_topic(CLAIMS_SUFFIX),
    help="Where which Log owns each topic is kept (distributary[.<name>].claims): installations "
    "sharing a Kafka cluster share it, so a topic stays one Log's across them.",
)
@click.option(
    "--claims-sweep-interval",
    type=click.FloatRange(min=1),
    default=SWEEP_SECONDS,
    show_default=True,
    envvar="DISTRIBUTARY_CLAIMS_SWEEP_INTERVAL",
    help="Seconds between sweeps that release the claims of Logs deleted while the operator "
    "was down (in the watched namespaces only); the first runs at start.",
)
@click.option(
    "--connect-url",
    default=None,
    envvar="DISTRIBUTARY_CONNECT_URL",
    help="The REST endpoint of the Kafka Connect cluster (with Debezium's PostgreSQL connector) "
    "that runs Sources' connectors, for clusters without Strimzi.",
)
@click.option(
    "--connect-cluster",
    default=None,
    envvar="DISTRIBUTARY_CONNECT_CLUSTER",
    help="The Strimzi KafkaConnect whose KafkaConnectors run Sources' connectors (when "
    "--connect-url is not given).",
)
@click.option(
    "--connect-namespace",
    default=None,
    envvar="DISTRIBUTARY_CONNECT_NAMESPACE",
    help="Where KafkaConnectors go (the KafkaConnect's namespace); default: each Source's own.",
)
@click.option(
    "--connect-secrets",
    default="kubernetes",
    show_default=True,
    envvar="DISTRIBUTARY_CONNECT_SECRETS",
    help="How Connect's workers read a Source's password: 'kubernetes' (Strimzi's "
    "KubernetesSecretConfigProvider reads the Secret), or the folder where the workers mount "
    "each Secret as FOLDER/NAME/KEY (Kafka's DirectoryConfigProvider).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    envvar="DISTRIBUTARY_LOG_LEVEL",
    help="How much the operator logs.",
)
def operator(
    bootstrap_servers: str,
    topic_backend: str,
    strimzi_cluster: str,
    spark_runtime: str,
    image: str,
    spark_service_account: str,
    checkpoint_root: str,
    checkpoint_claim: str,
    checkpoint_mount_path: str,
    allow_node_local_checkpoints: bool,
    allow_sql_functions: frozenset[str],
    state_dir: Path,
    namespaces: tuple[str, ...],
    observe_interval: float,
    health_port: int,
    metrics_port: int,
    topic_names: str,
    progress_topic: str,
    claims_topic: str,
    claims_sweep_interval: float,
    connect_url: str | None,
    connect_cluster: str | None,
    connect_namespace: str | None,
    connect_secrets: str,
    log_level: str,
    restart_policy: RestartPolicy,
) -> None:
    """Run the Distributary operator: reconcile Logs, DerivedViews, StreamJobs, Sources and
    Sinks."""
    settings = OperatorSettings.from_environment(
        bootstrap_servers=bootstrap_servers,
        topic_backend="strimzi" if topic_backend == "strimzi" else "direct",
        strimzi_cluster=strimzi_cluster,
        spark_runtime="local" if spark_runtime == "local" else "spark-operator",
        image=image,
        spark_service_account=spark_service_account,
        checkpoint_root=checkpoint_root,
        checkpoint_claim=(
            CheckpointClaim(checkpoint_claim, checkpoint_mount_path) if checkpoint_claim else None
        ),
        allow_node_local_checkpoints=allow_node_local_checkpoints,
        allowed_sql_functions=allow_sql_functions,
        state_dir=state_dir,
        observe_interval=observe_interval,
        restart_policy=restart_policy,
        namespaces=namespaces,
        topic_names=topic_names,
        progress_topic=progress_topic,
        claims_topic=claims_topic,
        claims_sweep_interval=claims_sweep_interval,
        connect_url=connect_url or None,
        connect_cluster=connect_cluster or None,
        connect_namespace=connect_namespace or None,
        connect_secrets=connect_secrets,
    )
    serve(settings, health_port=health_port, metrics_port=metrics_port, log_level=log_level)
