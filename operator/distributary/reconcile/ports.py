"""What a front end gives the reconcile: its status store, its events, its view of the world.

The operator implements these with the API server (status subresource, Kubernetes events, kopf's
indexes, the output Log as a child resource); `distributary run` with the state folder
(`revisions.json`, lines on stderr, the pipeline files, `run.json`). The unit tests implement them
in memory. Each is small on purpose: a front end is the few things that truly differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from distributary.api.log import LogStatus
from distributary.api.source import SecretKey
from distributary.backends.base import CaptureDatabases, SinkRuntime, SparkRuntime, TopicBackend
from distributary.backends.connect import Connectors
from distributary.graph import Pipeline
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.progress import ProgressReader
from distributary.plan.access.kafka_connection import KafkaSecurity
from distributary.plan.applications.restarts import RestartPolicy, RoundMemory
from distributary.plan.kafka_topics.topics import DesiredTopic
from distributary.plan.status.conditions import Problem
from distributary.plan.views.view_plan import LostHistory


class TryAgain(Exception):  # noqa: N818 (control flow, not an error a user sees as such)
    """The reconcile cannot go on now (Kafka does not answer, an application restarts): run it
    again after `delay` seconds. What it waits for is in the status already written."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


class StatusConflictError(Exception):
    """The resource's status changed since it was read: nothing was written, and nothing may act
    on what was decided from the old status; the reconcile runs again from the new one."""


class StatusStore(Protocol):
    """One resource's status: as read, then as written; writes only onto what was read."""

    @property
    def status(self) -> dict[str, Any]:
        """The status as read, with this reconcile's own writes merged in."""
        ...

    async def record_ahead(self, record: Mapping[str, Any]) -> None:
        """Write a write-ahead record (`plan.edits.write_ahead`) before acting on it. Raises
        `StatusConflictError` when the status changed since it was read."""
        ...

    async def finish(self, status: Mapping[str, Any]) -> bool:
        """Write the reconcile's status where it changes something; whether it did. Raises
        `StatusConflictError` as `record_ahead` does."""
        ...


class Events(Protocol):
    """Where a reconcile tells people what it did (Kubernetes events, or lines on stderr)."""

    def info(self, reason: str, message: str) -> None:
        """A notable step: a revision started, a cutover, a rewind."""
        ...

    def warn(self, reason: str, message: str) -> None:
        """Something went wrong that people must act on (a rewind undone)."""
        ...


@dataclass(frozen=True)
class Lineage:
    """What a view or job is planned against: the graph it is checked in, the statuses of the
    views' output Logs by name (the topics they serve), and the output Logs whose view has a
    revision catching up (readers wait for its cutover before they reprocess)."""

    pipeline: Pipeline
    children: dict[str, LogStatus]
    reprocessing: frozenset[str] = frozenset()


class World(Protocol):
    """What a reconcile sees around a resource, and the one child a view keeps: its output
    Log."""

    def lineage(self, resource: Mapping[str, Any]) -> Lineage:
        """What the view or job `resource` is planned against. Blocking: called from a
        thread."""
        ...

    async def serve(self, output: dict[str, Any], topic: str) -> None:
        """Make the view's output Log as `output` (its manifest) says and point its readers at
        `topic`, the serving revision's (idempotent)."""
        ...

    def read_elsewhere(self, namespace: str, name: str) -> set[str]:
        """The topics that live revisions of other views and jobs than `name` read."""
        ...

    def adopt_logs(self, manifests: Sequence[dict[str, Any]], owner_uid: str) -> list[Problem]:
        """Apply a Source's table Logs (`manifests`, children of the owner `owner_uid`) where
        they lack part of them; a Log of that name that is another's is left alone and named in
        a problem. Blocking: called from a thread."""
        ...

    def log(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The Log `name` as its body reads (its spec, and the topic it serves now in
        `status.topicName`), None when there is no such Log. Blocking: called from a thread."""
        ...


@dataclass(kw_only=True)
class Services:
    """The outside systems a reconcile acts through, and its memory between reconciles."""

    checkpoint_root: str
    """Where revisions checkpoint."""

    bootstrap_servers: str
    """Kafka's bootstrap servers, as the runners get them."""

    admin: KafkaAdmin
    progress: ProgressReader
    topics: TopicBackend
    runtime: SparkRuntime
    lost_history: LostHistory
    """Why some input topics (topic -> log) lost history, None if they did not (the retention
    guard's question to Kafka)."""

    checkpoint_problem: Problem | None = None
    """Why no revision may run where checkpoints would go (`plan.applications.checkpoint_storage`),
    decided once when the services are built; every view and job is then Stalled with it."""

    kafka_security: KafkaSecurity | None = None
    """How the runners authenticate to Kafka and trust it (references to secrets only);
    None: plaintext."""

    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)
    """How ended applications and Sinks' processes are restarted, and when failing ones make
    their resource Stalled (`plan.applications.restarts`); their histories live in the resources'
    statuses."""

    sinks: SinkRuntime | None = None
    """Where Sinks' processes run (`backends.base.SinkRuntime`); None: nowhere (no Sinks)."""

    connectors: Connectors | None = None
    """Where Sources' connectors run (`backends.connect`); None: no Connect was given."""

    connect_secrets: str = "kubernetes"
    """How Connect reads a Source's password (`plan.sources.source_plan.password_reference`)."""

    secret: Callable[[str, SecretKey, str], str] | None = None
    """The value of a Secret's key in a namespace (the last argument names the field); raises
    `backends.base.SecretMissingError`. None: no Secret can be read."""

    captures: CaptureDatabases | None = None
    """Sources' databases (`backends.captures`)."""

    make_topics: Callable[[Sequence[DesiredTopic]], None] | None = None
    """Make topics outside any Log's reconcile (a Source revision's, its heartbeat's)."""

    memory: RoundMemory = field(default_factory=RoundMemory)
    """What is kept between rounds and is in no status (connectors' restarts, topics made)."""
