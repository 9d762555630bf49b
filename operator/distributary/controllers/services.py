"""The operator's services: the clients and backends built once, at start, from the settings.

Handlers reach them through kopf's memo (`memo.services`). This is the one place that knows which
topic backend and which Spark runtime the operator runs with; every reconcile speaks to them
through the contracts of `backends.base`. The last application states seen are kept here too,
since they live exactly as long as the operator process (restart histories live in status).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from distributary.backends.base import SinkRuntime, SparkRuntime, TopicBackend
from distributary.backends.captures import PostgresCaptures
from distributary.backends.claimed import ClaimedTopicBackend
from distributary.backends.connect import Connectors, RestConnectors, StrimziConnectors
from distributary.backends.direct import DirectTopics
from distributary.backends.local_sinks import LocalSinkProcesses
from distributary.backends.local_spark import LocalRuntime, LocalSparkRuntime
from distributary.backends.secrets import api_secret
from distributary.backends.sink_workloads import SinkDeployments
from distributary.backends.spark_operator import SparkOperatorRuntime, WatchedApplications
from distributary.backends.strimzi import StrimziTopicBackend, StrimziTopics
from distributary.backends.topic_batches import DirectTopicBackend
from distributary.controllers.settings import OperatorSettings
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.claims import ClaimsLog
from distributary.kafka.connection import client_settings
from distributary.kafka.history import lost_input_history
from distributary.kafka.progress import ProgressReader
from distributary.kube.errors import KubeError
from distributary.kube.resources import Kube
from distributary.plan.access.kafka_connection import KafkaSecurity
from distributary.plan.access.kafka_secrets import for_pods
from distributary.plan.applications.checkpoint_storage import checkpoint_problem
from distributary.plan.kafka_topics.topics import DesiredTopic
from distributary.reconcile.ports import Services

LOGGER = logging.getLogger("distributary.claims")


@dataclass(kw_only=True)
class OperatorServices(Services):
    """What the handlers act through: the reconcile's services (`reconcile.ports.Services`),
    and the operator's own. Built by `build`; tests build it from in-memory parts."""

    settings: OperatorSettings
    kube: Kube
    applications: WatchedApplications = field(default_factory=WatchedApplications, repr=False)
    """Each SparkApplication as last seen, to act on changes of state and to read it without
    asking the API server (the spark-operator runtime reads it)."""


def runners_security(settings: OperatorSettings) -> KafkaSecurity | None:
    """The connection model runners and jobs get: the operator's, with the references their
    pods have when the spark-operator runtime mounts the Kafka Secrets into them."""
    security, mounts = settings.kafka_security, settings.kafka_secrets
    if security is None or mounts is None or settings.spark_runtime != "spark-operator":
        return security
    return for_pods(security, mounts)


def cluster_id(api: Kube) -> str | None:
    """This Kubernetes cluster's identity: the uid of its kube-system namespace (which lives as
    long as the cluster); None when it cannot be read, and then no claim is ever swept."""
    try:
        found = api.get("v1", "Namespace", None, "kube-system")
    except KubeError as exc:
        LOGGER.warning(
            "claims of deleted Logs will not be swept: the kube-system namespace could not be "
            "read to tell this cluster from others sharing the Kafka cluster (%s); the chart "
            "grants `get` on it",
            exc,
        )
        return None
    uid = ((found or {}).get("metadata") or {}).get("uid")
    return str(uid) if uid else None


def _make_topics(admin: KafkaAdmin, wanted: Sequence[DesiredTopic]) -> None:
    """Make topics no Log's reconcile makes (a Source revision's) on Kafka directly."""
    topics = DirectTopics(admin)
    for topic in wanted:
        topics.apply(topic)


def build(settings: OperatorSettings) -> OperatorServices:
    """The services for `settings`: the one place the backend and runtime are chosen."""
    client = client_settings(settings.kafka_security)
    admin = KafkaAdmin(settings.bootstrap_servers, client=client)
    api = Kube(settings.kubeconfig)
    topics: TopicBackend
    if settings.topic_backend == "strimzi":
        strimzi = StrimziTopics(api, settings.strimzi_cluster, settings.strimzi_namespace)
        topics = StrimziTopicBackend(strimzi, admin)
    else:
        topics = DirectTopicBackend(admin)
    # Either backend touches only topics their Log owns (`plan.kafka_topics.claims`).
    claims = ClaimsLog(settings.bootstrap_servers, settings.claims_topic, client, cluster_id(api))
    topics = ClaimedTopicBackend(topics, claims, admin)
    runtime: SparkRuntime
    sinks: SinkRuntime
    watched = WatchedApplications()  # fed by the operator's watch of SparkApplications
    if settings.spark_runtime == "local":
        local = LocalRuntime(settings.state_dir)
        runtime = LocalSparkRuntime(local)
        sinks = LocalSinkProcesses(local, lambda *secret: api_secret(api, *secret))
    else:
        sinks = SinkDeployments(api, settings.image, settings.kafka_secrets)
        runtime = SparkOperatorRuntime(
            api,
            settings.image,
            settings.checkpoint_claim,
            settings.spark_service_account,
            kafka_secrets=settings.kafka_secrets,
            watched=watched,
        )

    connectors: Connectors | None = None
    if settings.connect_url:
        connectors = RestConnectors(settings.connect_url)
    elif settings.connect_cluster:
        connectors = StrimziConnectors(api, settings.connect_cluster, settings.connect_namespace)

    def lost_history(topics: Mapping[str, str], tables: Collection[str]) -> str | None:
        return lost_input_history(admin, topics, client, tables=tables)

    return OperatorServices(
        settings=settings,
        kube=api,
        checkpoint_root=settings.checkpoint_root,
        checkpoint_problem=checkpoint_problem(
            settings.checkpoint_root,
            settings.spark_runtime,
            settings.checkpoint_claim,
            allow_node_local=settings.allow_node_local_checkpoints,
        ),
        bootstrap_servers=settings.bootstrap_servers,
        admin=admin,
        progress=ProgressReader(settings.bootstrap_servers, settings.progress_topic, client),
        kafka_security=runners_security(settings),
        topics=topics,
        runtime=runtime,
        lost_history=lost_history,
        restart_policy=settings.restart_policy,
        connectors=connectors,
        connect_secrets=settings.connect_secrets,
        secret=lambda *secret: api_secret(api, *secret),
        captures=PostgresCaptures(),
        make_topics=lambda wanted: _make_topics(admin, wanted),
        sinks=sinks,
        applications=watched,
    )
