"""`distributary operator`: run the controllers against the cluster of the current kubeconfig
(or the pod's service account), with settings from flags and the environment."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import importlib
import logging
import warnings
from pathlib import Path
from typing import Any

import aiohttp
import click
import kopf

from distributary.api.names import (
    CLAIMS_SUFFIX,
    CLAIMS_TOPIC,
    DEFAULT_TOPIC_NAMES,
    PROGRESS_SUFFIX,
    internal_topic_problem,
    topic_names_problem,
    use_progress_topic,
    use_topic_names,
)
from distributary.backends.direct import DirectTopics
from distributary.controllers import metrics
from distributary.controllers.observer import application_changed, observe_forever
from distributary.controllers.services import build
from distributary.controllers.settings import DEFAULT_STATE_DIR, OperatorSettings
from distributary.kafka.connection import KafkaConnectionError, check_connection
from distributary.plan.checkpoint_storage import DEFAULT_MOUNT_PATH, CheckpointClaim
from distributary.plan.claims import SWEEP_SECONDS
from distributary.plan.pipeline import (
    DEFAULT_CHECKPOINT_ROOT,
    DEFAULT_IMAGE,
    DEFAULT_STRIMZI_CLUSTER,
    DEFAULT_TOPIC_BACKEND,
)
from distributary.plan.progress import PROGRESS_TOPIC
from distributary.plan.restarts import (
    FAILURE_WINDOW,
    FAILURES_BEFORE_STALLED,
    FIRST_DELAY,
    MAX_DELAY,
    STABLE_AFTER,
    RestartPolicy,
)
from distributary.plan.spark import (
    DEFAULT_SERVICE_ACCOUNT,
    MANAGED_BY,
    SPARK_APPLICATION_API_VERSION,
)
from distributary.plan.topics import DesiredTopic
from distributary.sql import (
    ALLOW_FUNCTIONS_ENV,
    ALLOW_FUNCTIONS_FLAG,
    UNSAFE_FUNCTIONS,
    allowed_functions,
)

FINALIZER = "distributary.dev/finalizer"
CONTROLLERS = (
    "distributary.controllers.logs",
    "distributary.controllers.views",
    "distributary.controllers.jobs",
    "distributary.controllers.sources",
    "distributary.controllers.sinks",
)
API_CONNECTIONS = 32  # kopf's connections to the API server besides its watch streams
WORKER_THREADS = 24
M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def internal_topic(name: str) -> DesiredTopic:
    """An installation's progress or claims topic: one partition (one order), compacted (the
    latest record per key is what counts)."""
    return DesiredTopic(name, 1, None, {"cleanup.policy": "compact"})


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


def capped_session(info: kopf.ConnectionInfo | None, limit: int) -> kopf.AiohttpSession | None:
    """kopf's API session for `info` (as kopf would make it), with at most `limit` connections.

    kopf's own session opens a TLS connection for every request in flight: a thousand Logs
    reconciled together write their statuses through about 900 connections at once, which
    costs hundreds of MB that are never given back. Requests beyond `limit` wait for a free
    connection instead; the limit leaves room for every watch stream, which holds one."""
    if info is None:
        return None
    with warnings.catch_warnings():  # kopf's own: basic auth is deprecated, still honoured
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="kopf")
        auth = info.as_aiohttp_basic_auth()
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        auth=auth,
        proxy=info.proxy_url,
        trust_env=info.trust_env,
    )
    return kopf.AiohttpSession(
        aiohttp_session=session,
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
    )


def _refuse_refused_credentials(settings: OperatorSettings) -> None:
    """Stop at start, with what to fix, when Kafka refuses the operator's credentials or
    certificates: nothing can work until they are fixed, and a pod that exits says so where a
    person looks. A Kafka that does not answer yet is only reported: it may be starting."""
    try:
        check_connection(settings.bootstrap_servers, settings.kafka_security, timeout=10.0)
    except KafkaConnectionError as exc:
        if exc.refused:
            raise click.ClickException(f"distributary operator: {exc}") from None
        click.echo(f"distributary operator: warning: {exc}; reconciling anyway", err=True)


def fewer_malloc_arenas(arenas: int = 2) -> bool:
    """Let glibc's malloc keep at most `arenas` arenas (whether it was set).

    By default glibc gives threads that allocate at once arenas of their own, up to 8 per core,
    and memory freed in one is not reused by the others: the operator's worker threads, each
    parsing API responses in turn, would hold tens of MB more than they use (what setting
    MALLOC_ARENA_MAX does, set from inside, before any thread starts)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to set
        return False
    mallopt = getattr(libc, "mallopt", None)
    return bool(mallopt is not None and mallopt(M_ARENA_MAX, arenas) == 1)


def _configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix="distributary.dev"
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="distributary.dev", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # events for notable transitions, not every log line
    settings.watching.server_timeout = 300


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
@click.option(
    "--restart-delay",
    type=click.FloatRange(min=0.1),
    default=FIRST_DELAY,
    show_default=True,
    envvar="DISTRIBUTARY_RESTART_DELAY",
    help="Seconds before an ended Spark application is restarted after a first failure; "
    "doubled for each failure in a row, up to --max-restart-delay.",
)
@click.option(
    "--max-restart-delay",
    type=click.FloatRange(min=0.1),
    default=MAX_DELAY,
    show_default=True,
    envvar="DISTRIBUTARY_MAX_RESTART_DELAY",
    help="The longest wait before a restart; every retry waits this long once Stalled.",
)
@click.option(
    "--stable-after",
    type=click.FloatRange(min=0),
    default=STABLE_AFTER,
    show_default=True,
    envvar="DISTRIBUTARY_STABLE_AFTER",
    help="Seconds an application runs before its earlier failures are forgiven (the back-off "
    "starts over, Stalled clears).",
)
@click.option(
    "--failure-window",
    type=click.FloatRange(min=1),
    default=FAILURE_WINDOW,
    show_default=True,
    envvar="DISTRIBUTARY_FAILURE_WINDOW",
    help="Seconds in which --failures-before-stalled failures make a view or job Stalled.",
)
@click.option(
    "--failures-before-stalled",
    type=click.IntRange(min=1),
    default=FAILURES_BEFORE_STALLED,
    show_default=True,
    envvar="DISTRIBUTARY_FAILURES_BEFORE_STALLED",
    help="Failures within --failure-window that make a view or job Stalled (ApplicationFailing).",
)
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
    restart_delay: float,
    max_restart_delay: float,
    stable_after: float,
    failure_window: float,
    failures_before_stalled: int,
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
) -> None:
    """Run the Distributary operator: reconcile Logs, DerivedViews, StreamJobs, Sources and
    Sinks."""
    fewer_malloc_arenas()
    for module in CONTROLLERS:
        importlib.import_module(module)
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
        restart_policy=RestartPolicy(
            first_delay=restart_delay,
            max_delay=max(max_restart_delay, restart_delay),
            stable_after=stable_after,
            window=failure_window,
            failures_before_stalled=failures_before_stalled,
        ),
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
    # Every planner names Logs' topics and revisions' progress topic alike from here on.
    use_topic_names(settings.topic_names)
    use_progress_topic(settings.progress_topic)
    # The one place the topic backend and the Spark runtime are chosen (`services.build`).
    services = build(settings)
    if services.checkpoint_problem is not None:
        click.echo(
            f"distributary operator: every view and job is refused (Stalled, "
            f"{services.checkpoint_problem.reason}): {services.checkpoint_problem.message}",
            err=True,
        )

    @kopf.on.startup()
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        _configure(settings)
        # Handlers wait on the API server and Kafka through threads: more than the default 6.
        asyncio.get_running_loop().set_default_executor(
            concurrent.futures.ThreadPoolExecutor(WORKER_THREADS, thread_name_prefix="distributary")
        )
        # Where runners publish progress (one record per revision), and who owns each topic
        # (`plan.claims`); made once, compacted.
        internal = DirectTopics(memo.services.admin)
        for name in (services.settings.progress_topic, services.settings.claims_topic):
            await asyncio.to_thread(internal.apply, internal_topic(name))
        # Assigned here, off the event loop: reconciles then only take what it has fetched.
        await asyncio.to_thread(memo.services.progress.poll, 1.0)
        memo.observer = asyncio.create_task(observe_forever(memo.services))
        # Claims of Logs deleted while no operator ran: released now and every interval.
        from distributary.controllers.logs import sweep_claims_forever  # one of CONTROLLERS

        memo.sweeper = asyncio.create_task(sweep_claims_forever(memo.services))

    if services.runtime.watches_applications():
        group, version = SPARK_APPLICATION_API_VERSION.split("/")
        kopf.on.event(group, version, "sparkapplications", labels=MANAGED_BY)(application_changed)

    @kopf.on.login()
    async def login(**kwargs: Any) -> kopf.AiohttpSession | None:
        return capped_session(
            kopf.login_via_client(**kwargs),
            API_CONNECTIONS + len(CONTROLLERS) * max(1, len(namespaces)),
        )

    @kopf.on.cleanup()
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        for name in ("observer", "sweeper"):
            task = getattr(memo, name, None)
            if task is not None:
                task.cancel()

    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if metrics_port:
        metrics.serve(metrics_port)
    watched = f"namespaces {', '.join(namespaces)}" if namespaces else "all namespaces"
    security = settings.kafka_security.describe() if settings.kafka_security else "PLAINTEXT"
    click.echo(
        f"distributary operator: {watched}; Kafka {bootstrap_servers} ({security})", err=True
    )
    _refuse_refused_credentials(settings)
    asyncio.run(
        kopf.operator(
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=True,
            liveness_endpoint=f"http://0.0.0.0:{health_port}/healthz",
            memo=kopf.Memo(services=services),
        )
    )
