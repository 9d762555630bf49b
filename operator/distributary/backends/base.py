"""The contracts every backend keeps: one for topics, one for Spark, one for Sinks' processes.

The one reconcile (`reconcile/`) is written against these and nothing else: which topic
backend makes topics (`direct`: Kafka's Admin API; `strimzi`: KafkaTopic resources) and which Spark
runtime runs revisions (`spark-operator`: SparkApplications; `local`: processes on this machine)
and where Sinks' processes run (`spark-operator`: a Deployment each; `local`: a process on this
machine) is chosen once, where the services are built, and no reconcile asks which one it has. A new
backend is a new class that keeps these contracts; nothing else changes. The unit tests drive the
controllers through small in-memory classes that keep them too.

Every method of `TopicBackend` is a coroutine (the direct backend batches many reconciles into
few Admin API requests); every method of `SparkRuntime` and `SinkRuntime` blocks and is called
from a thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from distributary.api.job import StreamJob
from distributary.api.log import Log
from distributary.api.sink import Sink
from distributary.api.source import Source
from distributary.api.view import DerivedView
from distributary.errors import DistributaryError
from distributary.plan.applications.runner_spec import RunnerSpec
from distributary.plan.applications.spark import Application
from distributary.plan.applications.spark_state import AppState
from distributary.plan.kafka_topics.topics import DesiredTopic
from distributary.plan.logs.log_status import LogReconcile
from distributary.plan.sinks.sink_plan import SinkRun
from distributary.plan.sources.source_plan import CaptureRights, SlotReading, TableShape


@dataclass(frozen=True)
class RevisionApp:
    """How to reach one revision's application: its name, and how to read, start and remove it
    (each a blocking call, run in a thread). `start` brings it to what the plan says and leaves
    one that already is as it is."""

    namespace: str
    name: str
    state: Callable[[], AppState]
    start: Callable[[], AppState]
    remove: Callable[[], None]


@dataclass(frozen=True)
class Owner:
    """Whose revisions a runtime stops: a view or a job, by kind, namespace and name."""

    kind: Literal["DerivedView", "StreamJob"]
    namespace: str
    name: str


class TopicBackend(Protocol):
    """Makes and keeps Logs' topics, and deletes them when a Log says so."""

    async def ensure(
        self,
        log: Log,
        desired: DesiredTopic,
        owner: Mapping[str, Any],
        managed: frozenset[str] = frozenset(),
    ) -> LogReconcile:
        """Bring topic `desired` (the Log's own, or a view's revision or dead-letter topic) to
        its spec on behalf of `log`, whose owner reference is `owner`; `managed` are the config
        keys set before, the only ones that may be unset. The outcome, never an exception: a
        Kafka (or API server) that does not answer is `unreachable`, a refusal is in the plan."""
        ...

    async def delete(self, log: Log | None, topic: str) -> str | None:
        """Delete `topic` of `log` (its `deletionPolicy: Delete` asked for it); `log` is None
        when its spec no longer parses. A topic already gone is fine, another Log's topic is
        never touched. None when deleted, else why the topic was kept (another Log's, or one
        the Log adopted). Raises `KafkaAdminError` or `KubeError` when it cannot be done now."""
        ...

    async def release(self, namespace: str, name: str) -> list[str]:
        """Give up every claim of the deleted Log `namespace/name` (`plan.kafka_topics.claims`), so
        another Log may have its topics; the topics released. Raises `KafkaAdminError`."""
        ...


class SparkRuntime(Protocol):
    """Runs the revisions of views and jobs, and stops them."""

    def view_app(self, view: DerivedView, runner: RunnerSpec) -> RevisionApp:
        """The application of the view's revision `runner.revision`, running `runner`."""
        ...

    def job_app(
        self,
        job: StreamJob,
        revision: int,
        launch: Application | None,
        manifest: dict[str, Any] | None,
    ) -> RevisionApp:
        """The application of the job's revision: `launch` says what runs, `manifest` is the
        SparkApplication it becomes; both None while a change is refused (what runs is left
        as it is)."""
        ...

    def keep(self, owner: Owner, revisions: Sequence[int]) -> None:
        """These revisions run on as they are: the serving one beside a revision catching up,
        or every live one while an edit is refused. Nothing is started anew for them but those
        `suspend` stopped, which start again as they ran; a runtime that starts everything it
        runs afresh (one process for every view) carries them over."""
        ...

    def suspend(self, owner: Owner, revisions: Sequence[int]) -> list[int]:
        """Stop these revisions' applications as `stop` does, keeping what each ran, so that
        `keep` starts it again as it was (a view suspended while a revision catches up beside
        the serving one: the serving one's spec is no longer the view's). Those that ran."""
        ...

    def stop(self, owner: Owner, revisions: Sequence[int]) -> list[int]:
        """Stop these revisions' applications (idempotent); the revisions that were running."""
        ...

    def stopped(self, owner: Owner, revision: int) -> bool:
        """Whether nothing of the revision runs any more: no process, no driver that could still
        commit offsets for its group."""
        ...

    def retire_others(self, owner: Owner, keep: int) -> list[str]:
        """Stop every application of `owner` but revision `keep`'s (a replaced revision, or one a
        crash left behind); the names of those stopped."""
        ...

    def orphans(self, namespace: str | None, alive: set[tuple[str, str, str]]) -> list[str]:
        """Stop applications whose view or job is gone, in `namespace` (None: all); `alive` holds
        (kind, namespace, name) of the views and jobs that exist. Those stopped, by name. Where
        the cluster's garbage collector removes them with their owner, nothing is done here."""
        ...

    def watches_applications(self) -> bool:
        """Whether the runtime's applications are API objects whose changes the operator should
        watch (SparkApplications), rather than processes it looks at on each round."""
        ...


class SecretMissingError(DistributaryError, LookupError):
    """A Secret (or its key) a resource names is not there; the message names the field, the
    Secret and how to make it."""


class SinkRuntime(Protocol):
    """Runs Sinks' processes (`python -m distributary.sinks`), one per Sink, and stops them.
    How the store's password reaches the process is the runtime's: a Secret mounted into a pod,
    or a file only the process reads."""

    def last_run(self, namespace: str, name: str) -> SinkRun | None:
        """The spec the Sink's process was last given (None: none yet)."""
        ...

    def sink_app(self, sink: Sink, run: SinkRun, owner: Mapping[str, Any]) -> RevisionApp:
        """The Sink's process running `run`: `start` brings it to `run` (a new spec stops the
        old process first: it finishes its transaction); `state` is RUNNING while it serves,
        ended once it exited (a runtime that restarts it by itself never says ended). Raises
        `SecretMissingError` when the store's password cannot be given to it."""
        ...

    def stop(self, namespace: str, name: str) -> None:
        """Stop the Sink's process (it finishes its transaction); the store keeps its rows."""
        ...


@dataclass(frozen=True)
class CaptureReading:
    """What a Source's database says: each table's shape (None: missing), whether the server and
    user allow capture, and each live revision's slot (its reading, and its lag in seconds)."""

    shapes: Mapping[str, TableShape | None]
    rights: CaptureRights
    readings: Mapping[int, tuple[SlotReading, float | None]]


class CaptureDatabases(Protocol):
    """A Source's database as its reconcile asks it. Blocking; raises `DatabaseError`."""

    def read(self, source: Source, password: str, revisions: Sequence[int]) -> CaptureReading:
        """The tables' shapes, the capture rights and the slot of each of `revisions`."""
        ...

    def drop(self, source: Source, password: str, revision: int) -> list[str]:
        """Drop a revision's slot and publication; what was dropped."""
        ...
