"""`distributary operator`: run the controllers against the cluster of the current kubeconfig
(or the pod's service account), with settings from flags and the environment."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import importlib
import logging
import warnings
from typing import Any

import aiohttp
import click
import kopf

from distributary.api.names import (
    use_progress_topic,
    use_topic_names,
)
from distributary.backends.direct import DirectTopics
from distributary.controllers import metrics
from distributary.controllers.handled import HANDLED, ProgressRecords
from distributary.controllers.observer import application_changed, observe_forever
from distributary.controllers.services import build
from distributary.controllers.settings import OperatorSettings
from distributary.kafka.connection import KafkaConnectionError, check_connection
from distributary.plan.applications.spark import (
    MANAGED_BY,
    SPARK_APPLICATION_API_VERSION,
)
from distributary.plan.kafka_topics.topics import DesiredTopic

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
    # kopf's records without a PATCH of every object it handles (`handled.py`).
    settings.persistence.progress_storage = ProgressRecords()
    settings.persistence.diffbase_storage = HANDLED
    settings.posting.level = logging.WARNING  # events for notable transitions, not every log line
    settings.watching.server_timeout = 300


def serve(
    settings: OperatorSettings, *, health_port: int, metrics_port: int, log_level: str
) -> None:
    """Run the controllers with `settings` until the operator is told to stop (the body of
    `distributary operator`, whose flags make the settings: `cli/operator.py`)."""
    fewer_malloc_arenas()
    for module in CONTROLLERS:
        importlib.import_module(module)
    namespaces, bootstrap_servers = settings.namespaces, settings.bootstrap_servers
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
        # (`plan.kafka_topics.claims`); made once, compacted.
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
