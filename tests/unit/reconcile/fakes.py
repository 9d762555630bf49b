"""In-memory parts behind the reconcile's ports and the backend contracts, for the fast tests of
the order of record and act. Every part appends what it is asked to do to one shared journal, so
a test reads the order in which the reconcile wrote status and acted. Fakes live here, in the
unit tier only: the integration tests drive the same reconcile through the real parts."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from distributary.api.job import StreamJob
from distributary.api.log import Log, LogStatus
from distributary.api.sink import Sink
from distributary.api.source import SecretKey, Source
from distributary.api.view import DerivedView
from distributary.backends.base import CaptureReading, Owner, RevisionApp, SecretMissingError
from distributary.databases.postgres import DatabaseError
from distributary.plan.applications.restarts import RestartPolicy, RoundMemory
from distributary.plan.applications.runner_spec import RunnerSpec
from distributary.plan.applications.spark import Application
from distributary.plan.applications.spark_state import AppState
from distributary.plan.kafka_topics.topics import DesiredTopic
from distributary.plan.logs.log_status import LogReconcile
from distributary.plan.sinks.sink_plan import SinkRun
from distributary.plan.sources.source_plan import (
    CaptureRights,
    ConnectorState,
    SlotReading,
    TableShape,
)
from distributary.plan.status.conditions import Problem
from distributary.plan.status.status_patch import changes, merged
from distributary.plan.views.view_plan import namespace_pipeline, reprocessing_outputs
from distributary.reconcile.ports import Lineage, Services, StatusConflictError

NS = "shop"
Journal = list[tuple[Any, ...]]


@dataclass
class FakeStore:
    """A resource's status, kept in memory; `conflict` makes the next write refused."""

    journal: Journal
    saved: dict[str, Any] = field(default_factory=dict)
    conflict: bool = False

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.saved)

    def _write(self, what: str, update: Mapping[str, Any]) -> None:
        if self.conflict:
            self.conflict = False
            raise StatusConflictError("changed since it was read")
        self.journal.append((what, dict(update)))
        self.saved = merged(self.saved, update)

    async def record_ahead(self, record: Mapping[str, Any]) -> None:
        self._write("record", record)

    async def finish(self, status: Mapping[str, Any]) -> bool:
        if not changes(self.saved, status):
            return False
        self._write("finish", status)
        return True


@dataclass
class FakeEvents:
    journal: Journal

    def info(self, reason: str, message: str) -> None:
        self.journal.append(("event", reason))

    def warn(self, reason: str, message: str) -> None:
        self.journal.append(("warning", reason))


@dataclass
class FakeWorld:
    """A namespace of Logs, views and jobs (bodies as the API server holds them)."""

    journal: Journal
    logs: list[dict[str, Any]]
    writers: list[dict[str, Any]]
    served: dict[str, str] = field(default_factory=dict)
    applied: dict[str, Any] = field(default_factory=dict)  # each output Log's spec as applied
    partitions: dict[str, int] = field(default_factory=dict)  # each output topic's, as made
    adopted: dict[str, Any] = field(default_factory=dict)  # a Source's table Logs, as applied

    def lineage(self, resource: Mapping[str, Any]) -> Lineage:
        pipeline, statuses, _ = namespace_pipeline(self.logs, self.writers)
        for name, topic in self.served.items():
            statuses[name] = LogStatus(topic_name=topic, partitions=self.partitions.get(name))
        return Lineage(pipeline, statuses, reprocessing_outputs(self.writers))

    async def serve(self, output: dict[str, Any], topic: str) -> None:
        name = output["metadata"]["name"]
        if self.applied.get(name) != output["spec"]:
            self.journal.append(("apply", name))
            self.applied[name] = output["spec"]
        if self.served.get(name) != topic:
            self.journal.append(("serve", name, topic))
            self.served[name] = topic

    def read_elsewhere(self, namespace: str, name: str) -> set[str]:
        return set()

    def adopt_logs(self, manifests: Sequence[dict[str, Any]], owner_uid: str) -> list[Problem]:
        for manifest in manifests:
            name = manifest["metadata"]["name"]
            if self.adopted.get(name) != manifest:
                self.journal.append(("apply", name))
                self.adopted[name] = manifest
        return []

    def log(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        found = next((log for log in self.logs if log["metadata"]["name"] == name), None)
        if found is None or name not in self.served:
            return found
        return {**found, "status": {**(found.get("status") or {}), "topicName": self.served[name]}}


@dataclass
class FakeTopics:
    journal: Journal
    unreachable: str | None = None
    refused: str | None = None
    taken: str | None = None

    async def ensure(
        self,
        log: Log,
        desired: DesiredTopic,
        owner: Mapping[str, Any],
        managed: frozenset[str] = frozenset(),
    ) -> LogReconcile:
        self.journal.append(("topic", desired.name))
        refused = self.taken or self.refused
        generation = log.metadata.generation
        return LogReconcile(
            generation,
            desired.name,
            unreachable=self.unreachable,
            refused=refused,
            taken=self.taken,
        )

    async def delete(self, log: Log | None, topic: str) -> None:
        self.journal.append(("delete topic", topic))


@dataclass
class FakeRuntime:
    """Applications by name; each starts running at once, and fails when told to (`failing`:
    the revisions whose application has ended, until it is removed and started again)."""

    journal: Journal
    running: dict[str, int] = field(default_factory=dict)  # name -> revision
    failing: set[int] = field(default_factory=set)
    specs: list[RunnerSpec] = field(default_factory=list)  # every runner spec asked to run
    ended_as: str = "FAILED"  # the state of an ended application (COMPLETED: exit code 0)
    # Revisions submitted whose driver cannot start, and why (`plan.applications.driver_pods`).
    stuck: dict[int, Problem] = field(default_factory=dict)
    suspended: dict[str, int] = field(default_factory=dict)  # what `suspend` stopped, for `keep`

    def _app(self, namespace: str, name: str, revision: int) -> RevisionApp:
        def state() -> AppState:
            if revision in self.failing:
                return AppState(self.ended_as, ended=True, failed=True, message="it failed")
            if name in self.running and revision in self.stuck:
                return AppState("SUBMITTED", not_starting=self.stuck[revision])
            if name in self.running:
                return AppState("RUNNING", running=True)
            return AppState("ABSENT")

        def start() -> AppState:
            if name not in self.running:
                self.journal.append(("start", revision))
                self.running[name] = revision
            return state()

        def remove() -> None:
            self.journal.append(("remove", revision))
            self.running.pop(name, None)
            self.failing.discard(revision)

        return RevisionApp(namespace, name, state, start, remove)

    def view_app(self, view: DerivedView, runner: RunnerSpec) -> RevisionApp:
        self.journal.append(("runner", runner.revision, runner.checkpoint_location))
        self.specs.append(runner)
        name = f"{view.metadata.name}-r{runner.revision}"
        return self._app(view.metadata.namespace, name, runner.revision)

    def job_app(
        self,
        job: StreamJob,
        revision: int,
        launch: Application | None,
        manifest: dict[str, Any] | None,
    ) -> RevisionApp:
        return self._app(job.metadata.namespace, f"{job.metadata.name}-job-r{revision}", revision)

    def keep(self, owner: Owner, revisions: Sequence[int]) -> None:
        self.journal.append(("keep", tuple(revisions)))
        for name, revision in list(self.suspended.items()):
            if revision in revisions and name.startswith(owner.name):
                self.journal.append(("start", revision))
                self.running[name] = self.suspended.pop(name)

    def stop(self, owner: Owner, revisions: Sequence[int]) -> list[int]:
        stopped = []
        for name, revision in list(self.running.items()):
            if revision in revisions and name.startswith(owner.name):
                del self.running[name]
                stopped.append(revision)
        if stopped:
            self.journal.append(("stop", tuple(stopped)))
        return stopped

    def suspend(self, owner: Owner, revisions: Sequence[int]) -> list[int]:
        names = {n: r for n, r in self.running.items() if r in revisions}
        self.suspended.update(names)
        return self.stop(owner, revisions)

    def stopped(self, owner: Owner, revision: int) -> bool:
        return not any(r == revision and n.startswith(owner.name) for n, r in self.running.items())

    def retire_others(self, owner: Owner, keep: int) -> list[str]:
        gone = [n for n, r in self.running.items() if n.startswith(owner.name) and r != keep]
        for name in gone:
            del self.running[name]
            self.journal.append(("stop", name))
        return gone

    def orphans(self, namespace: str | None, alive: set[tuple[str, str, str]]) -> list[str]:
        return []

    def watches_applications(self) -> bool:
        return False


@dataclass
class FakeAdmin:
    """Consumer groups' offsets and topics' end offsets (one partition each)."""

    journal: Journal
    groups: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)
    ends: dict[str, int] = field(default_factory=dict)
    marks: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)  # wins over ends
    metadata: dict[str, str] = field(default_factory=dict)  # committed with each group's offsets
    by_time: dict[str, dict[int, int]] = field(default_factory=dict)
    left: set[str] = field(default_factory=set)  # topics nothing reads or writes

    def committed(self, group: str) -> dict[str, dict[int, int]]:
        return self.groups.get(group, {})

    def watermarks(self, topics: Sequence[str]) -> dict[str, dict[int, tuple[int, int]]]:
        return {
            topic: self.marks.get(topic) or {0: (0, self.ends.get(topic, 0))} for topic in topics
        }

    def offsets_for_time(self, topics: Sequence[str], ms: int) -> dict[str, dict[int, int]]:
        return {topic: self.by_time.get(topic, {}) for topic in topics}

    def committed_metadata(self, group: str, topic: str | None = None) -> list[str]:
        return [self.metadata.get(group, "")] if group in self.groups else []

    def lag(self, group: str, topics: Sequence[str]) -> dict[str, dict[int, int]]:
        held = self.groups.get(group, {})
        return {t: {0: max(self.ends.get(t, 0) - held.get(t, {}).get(0, 0), 0)} for t in topics}

    def list_partitions(self, topics: Collection[str]) -> dict[str, int]:
        return {t: 1 for t in topics if t in {*self.ends, *self.marks}}

    def fence(self, transactional_id: str) -> None:
        self.journal.append(("fence", transactional_id))

    def commit(
        self, group: str, offsets: Mapping[str, Mapping[int, int]], metadata: str = ""
    ) -> None:
        self.metadata[group] = metadata
        self.journal.append(("commit", group, {t: dict(o) for t, o in offsets.items()}))
        found = self.groups.setdefault(group, {})
        for topic, partitions in offsets.items():
            found.setdefault(topic, {}).update(partitions)

    def delete_group(self, group: str) -> None:
        self.journal.append(("delete group", group))
        self.groups.pop(group, None)

    def describe_group(self, group: str) -> Any:
        return None

    def topic_names(self, max_age: float = 0.0) -> set[str]:
        return {*self.ends, *self.marks, *self.left}

    def group_names(self, max_age: float = 0.0) -> set[str]:
        return set(self.groups)


@dataclass
class FakeSinks:
    """Sinks' processes by Sink name: each runs once started, until a test ends it (`ended`:
    its exit, as the runtime says it); `secrets` holds the passwords there are."""

    journal: Journal
    runs: dict[str, SinkRun] = field(default_factory=dict)  # the spec each was last given
    running: set[str] = field(default_factory=set)
    ended: dict[str, str] = field(default_factory=dict)
    secrets: set[str] | None = None  # None: every Secret exists

    def last_run(self, namespace: str, name: str) -> SinkRun | None:
        return self.runs.get(name)

    def sink_app(self, sink: Sink, run: SinkRun, owner: Mapping[str, Any]) -> RevisionApp:
        name = sink.metadata.name
        store = sink.spec.postgres or sink.spec.redis
        secret = store.password_secret if store is not None else None
        if secret is not None and self.secrets is not None and secret.name not in self.secrets:
            raise SecretMissingError(f"spec.postgres.passwordSecret: no Secret {secret.name!r}")

        def state() -> AppState:
            if name in self.ended:
                return AppState("FAILED", ended=True, failed=True, message=self.ended[name])
            if name in self.running:
                return AppState("RUNNING", running=True)
            return AppState("ABSENT")

        def start() -> AppState:
            if name in self.running and self.runs.get(name) == run:
                return state()
            self.journal.append(("start sink", name, run.topic))
            self.runs[name] = run
            self.ended.pop(name, None)
            self.running.add(name)
            return AppState("SUBMITTED")

        def remove() -> None:
            self.journal.append(("remove sink", name))
            self.running.discard(name)
            self.ended.pop(name, None)

        return RevisionApp(sink.metadata.namespace, f"{name}-sink", state, start, remove)

    def stop(self, namespace: str, name: str) -> None:
        self.journal.append(("stop sink", name))
        self.running.discard(name)

    def exit(self, name: str, why: str) -> None:
        """The process of Sink `name` exits."""
        self.running.discard(name)
        self.ended[name] = why


@dataclass
class FakeConnectors:
    """Connect: connectors by name, each running once applied unless a test fails it; committed
    offsets as a test gives them (`lists`: whether Connect can list them at all)."""

    journal: Journal
    lists: bool = True
    known: dict[str, dict[str, Any]] = field(default_factory=dict)  # offsets by connector
    applied: dict[str, bool] = field(default_factory=dict)  # connector -> paused
    failed: set[str] = field(default_factory=set)
    where: str = "Connect at http://connect:8083"

    @property
    def lists_offsets(self) -> bool:
        return self.lists

    def apply(
        self, name: str, config: Mapping[str, str], paused: bool, owner: Any, namespace: str
    ) -> None:
        if self.applied.get(name) != paused:
            self.journal.append(("connector", name, "paused" if paused else "running"))
        self.applied[name] = paused

    def state(self, name: str, namespace: str) -> ConnectorState | None:
        if name not in self.applied:
            return None
        if name in self.failed:
            return ConnectorState("FAILED", ("FAILED",), "it broke")
        return ConnectorState("PAUSED" if self.applied[name] else "RUNNING", ("RUNNING",))

    def restart(self, name: str, namespace: str) -> None:
        self.journal.append(("restart connector", name))
        self.failed.discard(name)

    def delete(self, name: str, namespace: str) -> None:
        self.journal.append(("delete connector", name))
        self.applied.pop(name, None)

    def offsets(self, name: str, namespace: str) -> dict[str, Any] | None:
        return self.known.get(name) if self.lists else None


@dataclass
class FakeCaptures:
    """A Source's database: its tables' shapes, the rights, a slot per revision."""

    journal: Journal
    shapes: dict[str, TableShape | None] = field(default_factory=dict)
    rights: CaptureRights = field(default_factory=lambda: CaptureRights("logical", True, True))
    confirmed: int = 900
    down: str | None = None  # why the database does not answer

    def read(self, source: Source, password: str, revisions: Sequence[int]) -> CaptureReading:
        if self.down is not None:
            raise DatabaseError(self.down, "spec.postgres.host")
        reading = (SlotReading(True, True, 100, 0, confirmed=self.confirmed), 0.0)
        return CaptureReading(self.shapes, self.rights, dict.fromkeys(revisions, reading))

    def drop(self, source: Source, password: str, revision: int) -> list[str]:
        slot = source.revision_identifier(revision)
        self.journal.append(("drop", slot))
        return [f"slot {slot}", f"publication {slot}"]


@dataclass
class FakeProgress:
    """The runners' last progress record per revision, as a test sets them."""

    latest: dict[str, dict[str, Any]] = field(default_factory=dict)

    def poll(self, timeout: float = 0.2) -> dict[str, dict[str, Any]]:
        return dict(self.latest)

    def close(self) -> None:
        pass


@dataclass
class Parts:
    """One namespace's parts, sharing one journal."""

    journal: Journal
    store: FakeStore
    events: FakeEvents
    world: FakeWorld
    topics: FakeTopics
    runtime: FakeRuntime
    admin: FakeAdmin
    lost: list[str]  # what the retention guard answers: the first element, if any
    progress: FakeProgress = field(default_factory=FakeProgress)
    sinks: FakeSinks | None = None
    connectors: FakeConnectors | None = None
    captures: FakeCaptures | None = None
    secrets: set[str] | None = None  # the Secrets there are (None: every one)
    topics_made: list[str] = field(default_factory=list)
    memory: RoundMemory = field(default_factory=RoundMemory)  # kept as long as the "operator"
    policy: RestartPolicy = field(default_factory=RestartPolicy)  # of applications and Sinks
    asked: list[tuple[dict[str, str], set[str]]] = field(default_factory=list)  # of the guard

    def services(self) -> Services:
        def lost_history(topics: Mapping[str, str], tables: Collection[str]) -> str | None:
            self.asked.append((dict(topics), set(tables)))
            return self.lost[0] if self.lost else None

        return Services(
            checkpoint_root="file:///ck",
            bootstrap_servers="kafka:9092",
            admin=cast(Any, self.admin),
            progress=cast(Any, self.progress),
            topics=self.topics,
            runtime=self.runtime,
            lost_history=lost_history,
            sinks=self.sinks,
            restart_policy=self.policy,
            connectors=self.connectors,
            captures=self.captures,
            secret=self._secret,
            make_topics=lambda wanted: self.topics_made.extend(t.name for t in wanted),
            memory=self.memory,
        )

    def _secret(self, namespace: str, secret: SecretKey, field: str) -> str:
        if self.secrets is not None and secret.name not in self.secrets:
            raise SecretMissingError(f"{field}: Secret {secret.name!r} in namespace {namespace}")
        return "pw"

    def since(self, mark: int) -> Journal:
        """What happened after the journal held `mark` entries."""
        return self.journal[mark:]


def parts(logs: list[dict[str, Any]], writers: list[dict[str, Any]]) -> Parts:
    journal: Journal = []
    return Parts(
        journal,
        FakeStore(journal),
        FakeEvents(journal),
        FakeWorld(journal, logs, writers),
        FakeTopics(journal),
        FakeRuntime(journal),
        FakeAdmin(journal),
        [],
        sinks=FakeSinks(journal),
        connectors=FakeConnectors(journal),
        captures=FakeCaptures(journal),
    )
