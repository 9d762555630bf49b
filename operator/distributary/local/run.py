"""`distributary run`: a whole pipeline on one machine, no Kubernetes.

This is the second front end of the one reconcile (`reconcile/`): every round, each view, job and
Sink goes, in the pipeline's order, through the same reconcile as under the operator, with the
state folder as its status store (`local.revisions`; a Sink's, `local.sinks`), the pipeline files
as its world, and lines on stderr as its events. So reprocessing beside the serving revision and
the cutover, the retention guard, rewinds, write-ahead records and retirement behave here as they
do in a cluster. The Spark runtime is `local.runtime`: every view revision in one runner process on
local Spark (one Spark application is kinder to a small machine than one per view), each StreamJob
its own file in a process of its own. The `direct` backend makes the topics. Everything lives under
the state folder: the embedded broker's data, the checkpoints, the statuses and the runner's log,
so a second run resumes where the first stopped. Positions are read the way any Kafka tool reads
them, from the revisions' consumer groups, and records/s from the progress topic.

A view whose query fails is reported and restarted with back-off like any other application
(`plan.applications.restarts`: the history is in its status in the state folder), the other views
running on; one that keeps failing is Stalled (`ApplicationFailing`) and said so on stderr, and
retried at the longest back-off. So does a view or job whose reconcile fails unexpectedly: it is
reported on stderr and in its status (Stalled, `ReconcileError`), and tried again in later rounds
with back-off (`reconcile.failures`), while the others are reconciled as usual.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from distributary import processes
from distributary.api.job import StreamJob
from distributary.api.log import LogStatus
from distributary.api.sink import Sink
from distributary.api.source import Source
from distributary.api.view import DerivedView
from distributary.backends.captures import PostgresCaptures
from distributary.backends.direct import DirectTopics
from distributary.backends.local_spark import LocalRuntime, LocalSparkRuntime
from distributary.backends.topic_batches import DirectTopicBackend, EnsuredRecently
from distributary.errors import DistributaryError
from distributary.graph import Pipeline, Ref
from distributary.jvm_operators import runner_jars
from distributary.kafka.connection import check_connection, client_settings
from distributary.kafka.history import lost_input_history
from distributary.kafka.progress import ProgressReader
from distributary.kafka.rounds import RoundAdmin
from distributary.local.broker import EmbeddedBroker
from distributary.local.revisions import LocalRevisions, refused, resource_key
from distributary.local.runtime import PipelineRuntime
from distributary.local.sinks import LocalSinks, SinkStatuses
from distributary.local.sources import LocalSources
from distributary.local.state import RunState, ServedLog, StatusFile, write_run_state
from distributary.local.status import (
    EndRow,
    Snapshot,
    ViewNote,
    ViewRow,
    observe,
    problem_line,
    sink_row,
    source_row,
)
from distributary.plan.access.kafka_connection import KafkaSecurity
from distributary.plan.applications.restarts import APPLICATION_FAILING, RestartPolicy
from distributary.plan.applications.runner_spec import RunnerSpec
from distributary.plan.applications.spark_state import QUERY_REFUSED
from distributary.plan.kafka_topics.topics import DesiredTopic
from distributary.plan.logs.log_status import LogReconcile
from distributary.plan.pipelines.pipeline import PipelinePlan, PlanSettings, plan_pipeline
from distributary.plan.revisions.lifecycle import read_topics
from distributary.plan.revisions.progress import PROGRESS_TOPIC
from distributary.plan.sources.source_plan import HEARTBEAT_RETENTION_MS, heartbeat_topic
from distributary.plan.status.conditions import SUSPENDED, Problem
from distributary.plan.views.view_plan import reprocessing_outputs
from distributary.reconcile.failures import (
    failure_line,
    failure_message,
    failure_status,
    retry_delay,
)
from distributary.reconcile.job import reconcile_job
from distributary.reconcile.log import reconcile_log
from distributary.reconcile.ports import Lineage, Services, StatusStore, TryAgain
from distributary.reconcile.sink import reconcile_sink
from distributary.reconcile.source import reconcile_source
from distributary.reconcile.view import reconcile_view

IDLE_SECONDS = 3.0  # inputs unchanged this long, and no lag: caught up
WINDOW_SECONDS = 30.0  # the longest a view with a watermark is waited for to write its windows
POLL_SECONDS = 1.0
LOGS_FILE = "logs.json"  # the declared Logs' statuses
LOGGER = logging.getLogger("distributary.run")
WORDS = {
    "Log": "log",
    "DerivedView": "view",
    "StreamJob": "job",
    "Source": "source",
    "Sink": "sink",
}  # each kind, in lines for people


class RunError(DistributaryError, RuntimeError):
    """The pipeline could not be run; the message says why and what to do."""


@dataclass(frozen=True)
class LocalEvents:
    """A view's, job's or Sink's events, as lines for people."""

    kind: str
    name: str
    say: Callable[[str], None]

    def info(self, reason: str, message: str) -> None:
        """`view NAME: what happened`."""
        what = WORDS.get(self.kind, "job")
        self.say(f"{what} {self.name}: {message[:1].lower()}{message[1:].rstrip('.')}")

    def warn(self, reason: str, message: str) -> None:
        """`view NAME: warning: what went wrong`."""
        self.info(reason, f"warning: {message}")


@dataclass
class PipelineFiles:
    """The pipeline files as a reconcile's world: the graph they make, the topic each view's
    output Log serves, and what the other views and jobs read (from their statuses)."""

    graph: Pipeline
    revisions: LocalRevisions
    served: dict[str, str] = field(default_factory=dict)  # a view's output Log -> its topic
    planned: dict[tuple[str, str], str] = field(default_factory=dict)  # every Log's own topic
    # Told of a Source's table Logs as its database has them now (`LocalSources`).
    table_logs: Callable[[Sequence[Mapping[str, Any]]], None] = lambda manifests: None

    def lineage(self, resource: Mapping[str, Any]) -> Lineage:
        """The files' graph, the topics the views' outputs serve now, and the outputs whose
        view, or a view upstream of it, has a revision catching up."""
        children = {name: LogStatus(topic_name=t) for name, t in self.served.items()}
        views = [
            {"kind": "DerivedView",
             "spec": {"output": {"log": output.metadata.name},
                      "inputs": [{"log": item.log} for item in view.spec.inputs]},
             "metadata": {"name": view.metadata.name},
             "status": self.revisions.status("DerivedView", resource_key(view))}
            for ref, view in self.graph.views.items()
            if (output := self.graph.output(ref)) is not None
        ]  # fmt: skip
        return Lineage(self.graph, children, reprocessing_outputs(views))

    async def serve(self, output: dict[str, Any], topic: str) -> None:
        """Readers of the output Log read `topic` from now on (run.json says so)."""
        self.served[output["metadata"]["name"]] = topic

    def adopt_logs(self, manifests: Sequence[dict[str, Any]], owner_uid: str) -> list[Problem]:
        """Nothing is applied: the files hold a Source's table Logs as its database had them
        when the run started (`local.sources.resolve_sources`); a table that gained columns
        since is said (`table_logs`)."""
        self.table_logs(manifests)
        return []

    def log(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The Log `name` of the files, serving its view's serving revision's topic (or the
        table Log its Source's serving revision's), else its own."""
        log = self.graph.logs.get(Ref.log(name, namespace))
        if log is None:
            return None
        topic = self.served.get(name) or self.planned.get((namespace, name))
        body = log.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {**body, "status": {"topicName": topic} if topic else {}}

    def read_elsewhere(self, namespace: str, name: str) -> set[str]:
        """The topics the other views' and jobs' live revisions read."""
        me = f"{namespace}/{name}"
        entries = [*self.revisions.views.items(), *self.revisions.jobs.items()]
        return read_topics({"status": e.get("status") or {}} for k, e in entries if k != me)


def pod_settings_left_aside(pipeline: Pipeline) -> list[str]:
    """A line for each view and job whose `spec.spark.pods`, or pod resources (CPU request and
    limit, memory overhead), a run leaves aside: its runners are processes here, with no pods
    to give variables, volumes, a node or resources to."""
    found = [("view", ref, v.spec.spark) for ref, v in pipeline.views.items()]
    found += [("job", ref, j.spec.spark) for ref, j in pipeline.jobs.items()]
    lines = []
    for kind, ref, spark in sorted(found, key=lambda item: (item[0], str(item[1]))):
        fields = [] if spark.pods.empty else ["spec.spark.pods"]
        for role, pod in (("driver", spark.driver), ("executor", spark.executor)):
            for name in ("cpuRequest", "cpuLimit", "memoryOverhead"):
                if getattr(pod, _SNAKE[name]) is not None:
                    fields.append(f"spec.spark.{role}.{name}")
        if fields:
            lines.append(
                f"{kind} {ref.name}: {', '.join(fields)} "
                f"{'is' if len(fields) == 1 else 'are'} for its pods on a cluster; "
                "distributary run has none and leaves "
                f"{'it' if len(fields) == 1 else 'them'} aside"
            )
    return lines


_SNAKE = {"cpuRequest": "cpu_request", "cpuLimit": "cpu_limit", "memoryOverhead": "memory_overhead"}


@dataclass
class LocalRun:
    """One `distributary run` of a validated pipeline."""

    pipeline: Pipeline
    paths: Sequence[Path]
    state_dir: Path
    bootstrap_servers: str | None = None
    kafka_security: KafkaSecurity | None = None  # how to reach the given Kafka; None: plaintext
    cores: int = 2
    say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)
    spark_conf: Mapping[str, str] = field(default_factory=dict)  # more settings, every revision
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)  # of failed applications
    secrets_dir: Path | None = None  # Secrets as Kubernetes mounts them: <dir>/<name>/<key>
    broker: EmbeddedBroker | None = None
    sources: LocalSources | None = None
    sinks: SinkStatuses | None = None
    sink_processes: LocalSinks | None = None
    plan: PipelinePlan | None = None
    bootstrap: str | None = None
    revisions: LocalRevisions | None = None
    services: Services | None = None
    admin: RoundAdmin | None = None  # the services' admin: its answers are kept for one round
    runtime: PipelineRuntime | None = None
    files: PipelineFiles | None = None
    said: set[str] = field(default_factory=set)  # problems told already (reconciled every second)
    failing: dict[str, tuple[int, float]] = field(default_factory=dict)  # failed tries, next due
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)

    @property
    def runner_log(self) -> Path:
        """Where the runner's (Spark's) output goes."""
        return self.state_dir / "runner.log"

    @property
    def specs(self) -> list[RunnerSpec]:
        """The runner specs of every view revision that runs (or will, from the next start)."""
        return self.runtime.specs if self.runtime is not None else []

    @property
    def runner(self) -> processes.Supervised | None:
        """The runner process, while there is one."""
        return self.runtime.process if self.runtime is not None else None

    @runner.setter
    def runner(self, process: processes.Supervised | None) -> None:
        assert self.runtime is not None
        self.runtime.process = process

    def start_kafka(self) -> str:
        """The bootstrap servers: given, or the embedded broker's once it serves. The state
        folder's statuses are read first, so a corrupt revisions.json is reported at once."""
        self.revisions = LocalRevisions.load(self.state_dir)
        if self.bootstrap_servers:
            # A refused password or certificate is said now, not as a timeout later.
            check_connection(self.bootstrap_servers, self.kafka_security)
            return self.bootstrap_servers
        self.say(f"Starting the embedded Kafka broker in {self.state_dir / 'kafka'} ...")
        self.broker = EmbeddedBroker(self.state_dir / "kafka").start()
        self.say(f"Kafka serves on {self.broker.bootstrap_servers}")
        return self.broker.bootstrap_servers

    def prepare(self, bootstrap: str) -> None:
        """Make the declared logs' topics and reconcile every view and job once (each view's
        revisions as the state folder records them, a changed one reprocessing beside its
        serving revision, rewinds due carried out), without starting Spark yet."""
        self.bootstrap = bootstrap
        if self.revisions is None:  # not read by start_kafka
            self.revisions = LocalRevisions.load(self.state_dir)
        checkpoints = (self.state_dir / "checkpoints").resolve().as_uri()
        settings = PlanSettings(
            "direct",
            checkpoint_root=checkpoints,
            bootstrap_servers=bootstrap,
            kafka_security=self.kafka_security,
        )
        self.plan = plan_pipeline(self.pipeline, settings)
        for note in pod_settings_left_aside(self.pipeline):
            self.say(note)
        client = client_settings(self.kafka_security)
        admin = self.admin = RoundAdmin(bootstrap, client=client)
        direct = DirectTopics(admin)
        self._make_internal_topics(direct)
        self.sources = LocalSources(
            self.pipeline, self.state_dir, self.secrets_dir, self.say, self.kafka_security
        )
        self.sources.start(bootstrap)
        self.sinks = SinkStatuses(self.state_dir)
        self.sink_processes = LocalSinks(self.state_dir, self.secrets_dir)
        planned = {(t.log.namespace, t.log.name): t.topic.name for t in self.plan.topics}
        self.files = PipelineFiles(
            self.pipeline,
            self.revisions,
            self._served(),
            planned,
            table_logs=self.sources.say_new_columns,
        )
        progress = ProgressReader(bootstrap, PROGRESS_TOPIC, client)
        jobs = LocalSparkRuntime(LocalRuntime(self.state_dir / "jobs", self.cores))
        self.runtime = PipelineRuntime(
            self.state_dir, jobs, self._local, lambda: progress.latest, lambda t: self.say(t)
        )
        self.services = Services(
            checkpoint_root=checkpoints,
            bootstrap_servers=bootstrap,
            admin=admin,
            progress=progress,
            # Reconciled every second: a topic ensured cleanly is not asked about for 30 s.
            topics=EnsuredRecently(DirectTopicBackend(admin)),
            runtime=self.runtime,
            lost_history=lambda topics, tables: lost_input_history(
                admin, topics, client, tables=tables
            ),
            restart_policy=self.restart_policy,
            kafka_security=self.kafka_security,
            sinks=self.sink_processes,
            connectors=self.sources.connectors,
            connect_secrets=self.sources.connect_secrets,
            secret=self.sources.secret,
            captures=PostgresCaptures(),
            make_topics=lambda wanted: self._apply_topics(direct, wanted),
            memory=self.sources.memory,
        )
        self.loop.run_until_complete(self._make_logs())
        self.reconcile()

    def _make_internal_topics(self, topics: DirectTopics) -> None:
        """The progress topic and each Source's heartbeat topic: no Log's."""
        compacted = {"cleanup.policy": "compact"}
        heartbeats = [
            DesiredTopic(heartbeat_topic(s), 1, None, {"retention.ms": str(HEARTBEAT_RETENTION_MS)})
            for s in self.pipeline.captures.values()
        ]
        self._apply_topics(topics, [*heartbeats, DesiredTopic(PROGRESS_TOPIC, 1, None, compacted)])

    async def _make_logs(self) -> None:
        """Each declared Log's topic through its one reconcile (`reconcile.log`), all at once,
        their statuses in `<state dir>/logs.json`, before anything reads or writes them. A Kafka
        that does not answer stops the run; a change Kafka refuses is said, and the topic is
        used as it is."""
        assert self.plan is not None
        statuses = StatusFile.load(self.state_dir / LOGS_FILE)
        declared = [t.log for t in self.plan.topics if not self.pipeline.is_derived(t.log)]
        results = await asyncio.gather(*(self._make_log(ref, statuses) for ref in declared))
        for ref, result in zip(declared, results, strict=True):
            if result.unreachable is not None:
                raise RunError(f"log {ref.name}: {result.unreachable}")

    async def _make_log(self, ref: Ref, statuses: StatusFile) -> LogReconcile:
        assert self.services is not None
        key = f"{ref.namespace}/{ref.name}"
        log = self.pipeline.logs[ref]
        body = log.model_dump(mode="json", by_alias=True, exclude_none=True)
        body["metadata"] = {**body["metadata"], "uid": f"local:{key}", "generation": 1}
        body["status"] = statuses.store(key).status
        events = LocalEvents("Log", ref.name, self.say)
        return await reconcile_log(body, self.services, statuses.store(key), events)

    def _apply_topics(self, topics: DirectTopics, wanted: Sequence[DesiredTopic]) -> None:
        for desired in wanted:
            for refusal in topics.apply(desired).refusals:
                self.say(f"warning: topic {desired.name}: {refusal.message}")

    def _served(self) -> dict[str, str]:
        """The topic each view's output Log and each table Log serves, as the statuses
        recorded."""
        assert self.revisions is not None
        served = self.sources.served() if self.sources is not None else {}
        for ref, view in self.pipeline.views.items():
            status = self.revisions.status("DerivedView", resource_key(view))
            serving = status.get("servingRevision")
            rows = status.get("revisions") or []
            row: Mapping[str, Any] = next((r for r in rows if r["revision"] == serving), {})
            output = self.pipeline.output(ref)
            if output is not None and row.get("topic"):
                served[output.metadata.name] = str(row["topic"])
        return served

    def reconcile(self) -> None:
        """One round: every Source, every view, job and Sink in the pipeline's order, then
        run.json. Kafka is asked each question once in a round (`kafka.rounds`), the snapshot
        after it included."""
        if self.admin is not None:
            self.admin.new_round()
        self.loop.run_until_complete(self._round())
        self._write_state()

    async def _round(self) -> None:
        assert self.services is not None
        assert self.revisions is not None
        assert self.files is not None
        if self.sources is not None and self.sources.due():
            for source in self.pipeline.captures.values():
                await self._reconcile_source(source)
            self.files.served.update(self.sources.served())
        for ref in self.pipeline.order:
            resource = (
                self.pipeline.views.get(ref)
                or self.pipeline.jobs.get(ref)
                or self.pipeline.sinks.get(ref)
            )
            if resource is None:
                continue
            key = f"{resource.kind}/{resource.metadata.namespace}/{resource.metadata.name}"
            tries, due = self.failing.get(key, (0, 0.0))
            if time.monotonic() < due:  # failed unexpectedly: tried again after its back-off
                continue
            store = self._store(resource)
            try:
                events = LocalEvents(resource.kind, resource.metadata.name, self.say)
                if isinstance(resource, Sink):
                    assert self.sinks is not None
                    body = self.sinks.read(resource)
                    await reconcile_sink(body, self.services, store, self.files, events)
                    self.failing.pop(key, None)
                    continue
                resource = self._localized(ref, resource)
                body, old = self.revisions.read(resource)
                store = self.revisions.store(resource)
                reconcile = reconcile_view if resource.kind == "DerivedView" else reconcile_job
                await reconcile(body, self.services, store, self.files, events, old)
            except TryAgain:
                pass  # its status says what it waits for; the next round tries again
            except Exception as exc:  # one resource's failure never stops the others
                delay = retry_delay(tries)
                self.failing[key] = (tries + 1, time.monotonic() + delay)
                await self._record_failure(resource, store, exc, delay)
                continue
            self.failing.pop(key, None)
            if not isinstance(resource, Sink):
                self._say_problem(resource, store.status)

    async def _reconcile_source(self, source: Source) -> None:
        """One Source through its reconcile (`reconcile.source`), as under the operator."""
        assert self.sources is not None
        assert self.services is not None
        assert self.files is not None
        meta = source.metadata
        key = f"Source/{meta.namespace}/{meta.name}"
        tries, due = self.failing.get(key, (0, 0.0))
        if time.monotonic() < due:
            return
        store = self.sources.store(source)
        events = LocalEvents(source.kind, meta.name, self.say)
        try:
            await reconcile_source(self.sources.read(source), self.services, store, self.files,
                                   events)  # fmt: skip
        except Exception as exc:  # one resource's failure never stops the others
            delay = retry_delay(tries)
            self.failing[key] = (tries + 1, time.monotonic() + delay)
            await self._record_failure(source, store, exc, delay)
            return
        self.failing.pop(key, None)
        self.sources.say_state(source)

    def _store(self, resource: DerivedView | StreamJob | Sink) -> StatusStore:
        """Where the status of `resource` lives in the state folder."""
        assert self.revisions is not None
        if isinstance(resource, Sink):
            assert self.sinks is not None
            return self.sinks.store(resource)
        return self.revisions.store(resource)

    async def _record_failure(
        self,
        resource: DerivedView | StreamJob | Source | Sink,
        store: StatusStore,
        exc: Exception,
        delay: float,
    ) -> None:
        """Say on stderr and in the status (Stalled, `ReconcileError`) that the reconcile of
        `resource` failed; the traceback goes to the debug log."""
        what = WORDS[resource.kind]
        name = resource.metadata.name
        LOGGER.debug("the reconcile of %s %s failed", what, name, exc_info=exc)
        message = failure_message(what, name, exc, "it is tried again with back-off")
        line = failure_line(exc)
        self.say(f"{what} {name}: the reconcile failed unexpectedly ({line}); the others run on, "
                 f"it is tried again in {delay:.0f}s")  # fmt: skip
        try:
            status = store.status
            entry = (
                {"generation": 1}
                if isinstance(resource, Sink | Source)
                else self._entry_of(resource)
            )
            generation = int(entry.get("generation") or 0)
            patch = failure_status(status, message, generation, datetime.now(UTC))
            if patch is not None:
                await store.record_ahead(patch)
        except Exception as failed:  # the next try writes it
            LOGGER.debug("recording the failure of %s %s: %s", what, name, failed)

    def _entry_of(self, resource: DerivedView | StreamJob) -> Mapping[str, Any]:
        """The state folder's entry of `resource` (empty before its first round)."""
        assert self.revisions is not None
        return self.revisions.section(resource.kind).get(resource_key(resource)) or {}

    def _localized(self, ref: Ref, resource: DerivedView | StreamJob) -> DerivedView | StreamJob:
        """A job whose file is a relative path runs the file beside its pipeline file."""
        if not isinstance(resource, StreamJob):
            return resource
        main = resource.spec.main_application_file
        source = self.pipeline.source(ref)
        if "://" in main or Path(main).is_absolute() or source is None:
            return resource
        path = (Path(source).parent / main).resolve()
        spec = resource.spec.model_copy(update={"main_application_file": str(path)})
        return resource.model_copy(update={"spec": spec})

    def _say_problem(self, resource: DerivedView | StreamJob, status: Mapping[str, Any]) -> None:
        problem = refused(status)
        if problem is not None and resource.kind == "DerivedView":
            serving = int(status.get("servingRevision") or 1)
            found = Problem(problem["reason"], problem["message"])
            self._say_once(problem_line(resource.metadata.name, found, serving))
        failing = [
            c
            for c in status.get("conditions") or []
            if c.get("type") == "Stalled" and c.get("reason") == APPLICATION_FAILING
        ]
        if failing:  # said again at each failure: the message names the next retry
            what = "view" if resource.kind == "DerivedView" else "job"
            message = str(failing[0].get("message") or "")
            self._say_once(
                f"{what} {resource.metadata.name}: Stalled ({APPLICATION_FAILING}): {message}"
            )

    def _say_once(self, text: str) -> None:
        if text not in self.said:
            self.said.add(text)
            self.say(text)

    def ends(self) -> tuple[EndRow, ...]:
        """The Sources' and Sinks' rows of the live table, from what was last recorded."""
        sources = self.sources.statuses if self.sources is not None else {}
        sinks = self.sinks.statuses if self.sinks is not None else {}
        return (
            *(source_row(key.split("/", 1)[-1], entry) for key, entry in sorted(sources.items())),
            *(sink_row(key.split("/", 1)[-1], entry) for key, entry in sorted(sinks.items())),
        )

    def notes(self) -> dict[str, ViewNote]:
        """Each view's note (by name): the change refused, if any, and the rewinds done."""
        assert self.revisions is not None
        notes = {}
        failing = self.revisions.keep_failing("DerivedView")
        suspended = self.revisions.suspended("DerivedView")
        for view in self.pipeline.views.values():
            status = self.revisions.status("DerivedView", resource_key(view))
            problem = status.get("problem")
            notes[view.metadata.name] = ViewNote(
                serving=int(status.get("servingRevision") or 1),
                problem=Problem(problem["reason"], problem["message"]) if problem else None,
                rewinds=tuple(r for r in status.get("rewinds") or [] if r.get("phase") == "Done"),
                failing=failing.get(resource_key(view)),
                suspended=suspended.get(resource_key(view)),
            )
        return notes

    def keep_failing(self) -> list[str]:
        """The views and jobs whose Spark application keeps failing (Stalled,
        `ApplicationFailing`), a line each: what `--until-caught-up` does not wait for, and
        what the exit status names."""
        assert self.revisions is not None
        return [
            f"{what} {key.split('/', 1)[-1]} keeps failing: {message}"
            for kind, what in (("DerivedView", "view"), ("StreamJob", "job"))
            for key, message in sorted(self.revisions.keep_failing(kind).items())
        ]

    def _write_state(self) -> None:
        """run.json: the broker, the files, each log's serving topic, each view's state."""
        assert self.plan is not None
        assert self.files is not None
        assert self.bootstrap is not None
        served = {
            t.log.name: ServedLog(self.files.served.get(t.log.name, t.topic.name), t.log.namespace)
            for t in self.plan.topics
        }
        views: dict[str, dict[str, Any]] = {}
        for name, note in self.notes().items():
            view = next(v for v in self.pipeline.views.values() if v.metadata.name == name)
            state: dict[str, Any] = {
                "namespace": view.metadata.namespace,
                "servingRevision": note.serving,
            }
            if note.problem is not None:
                state["problem"] = {"reason": note.problem.reason, "message": note.problem.message}
            if note.rewinds:
                state["rewinds"] = [str(r["requestId"]) for r in note.rewinds]
            views[name] = state
        paths = tuple(map(str, self.paths))
        write_run_state(self.state_dir, RunState(self.bootstrap, paths, logs=served, views=views))

    def serving_plan(self) -> PipelinePlan:
        """The plan with each view's output Log at the topic it serves now."""
        assert self.plan is not None
        assert self.files is not None
        served = self.files.served
        return replace(
            self.plan,
            topics=tuple(
                replace(t, topic=replace(t.topic, name=served.get(t.log.name, t.topic.name)))
                for t in self.plan.topics
            ),
        )

    def _local(self, spec: RunnerSpec) -> RunnerSpec:
        conf = {
            **spec.spark_conf,
            "spark.master": f"local[{self.cores}]",
            "spark.jars": ",".join(str(j) for j in runner_jars()),
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "2g",
            **self.spark_conf,
        }
        return spec.model_copy(update={"spark_conf": conf})

    def start_runner(self) -> None:
        """Start Spark on every view revision asked for (rewinds due were carried out by the
        reconcile, while it did not run)."""
        assert self.runtime is not None
        self.runtime.flush()

    def runner_failed(self) -> str | None:
        """Why the runner exited before it was asked to, or None while it runs."""
        return self.runtime.failure() if self.runtime is not None else None

    def stop(self) -> None:
        """Stop the runner (gracefully, then by force), the jobs and the embedded broker."""
        if self.runtime is not None:
            self.runtime.stop_runner()
            for _namespace, _name, app in self.runtime.jobs.local.running("job-r*"):
                self.runtime.jobs.local.stop(app)
        if self.services is not None:
            self.services.progress.close()
            self.services = None
        if self.sink_processes is not None:
            self.sink_processes.stop_all()
        if self.sources is not None:
            self.sources.stop()
        if self.admin is not None:  # destroyed while its broker answers, not at exit
            self.admin.close()
            self.admin = None
        if self.broker is not None:
            self.say("Stopping Kafka ...")
            self.broker.stop()
            self.broker = None
        if not self.loop.is_closed():
            self.loop.close()


class CaughtUp:
    """Decides when a pipeline has caught up: no view or job lags and no input moved for a
    while; a view that failed is done with, and the run says so.

    A view with a watermark writes the windows its last records closed in the micro-batch after
    them, which reads nothing (Spark runs it because the watermark moved): it has caught up once
    such a batch ran, or after `WINDOW_SECONDS` without lag when none comes."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._ends: dict[str, dict[int, int]] | None = None
        self._since = time.monotonic()
        self._level: dict[str, float] = {}  # when each view with a watermark reached lag 0

    def __call__(self, snapshot: Snapshot) -> bool:
        """True when every view runs with no lag (or failed, keeps failing: it is retried only
        at the longest back-off, or is suspended) and the logs have been still."""
        for view in snapshot.views:
            if view.lag:
                self._level.pop(view.name, None)
        ends = snapshot.all_end_offsets()
        if ends != self._ends:
            self._ends, self._since = ends, time.monotonic()
            return False
        still = time.monotonic() - self._since >= self.idle_seconds
        views = all(
            (v.state == "Running" and v.lag == 0 and self._windows_written(v))
            or v.state in ("Failed", QUERY_REFUSED)
            or v.note.failing is not None
            or v.note.suspended is not None
            for v in snapshot.views
        )
        jobs = all(j.lag == 0 or j.state in (APPLICATION_FAILING, SUSPENDED) for j in snapshot.jobs)
        return still and views and jobs

    def _windows_written(self, view: ViewRow) -> bool:
        if not view.event_time or view.batch_rows == 0:
            return True
        since = self._level.setdefault(view.name, time.monotonic())
        return time.monotonic() - since >= WINDOW_SECONDS


def watch(
    run: LocalRun,
    bootstrap: str,
    show: Callable[[Snapshot], None],
    until_caught_up: bool,
    stopping: Callable[[], bool],
) -> Snapshot:
    """Reconcile and refresh the snapshot until asked to stop or (optionally) caught up."""
    assert run.services is not None
    assert run.revisions is not None
    caught_up = CaughtUp()
    while True:
        run.reconcile()
        run.start_runner()
        snapshot = observe(
            run.serving_plan(),
            run.specs,
            run.services.admin,
            run.services.progress.poll(),
            run.notes(),
            jobs=run.revisions.jobs,
        )
        snapshot = replace(snapshot, ends=run.ends())
        show(snapshot)
        for failure in _failures(snapshot, run):
            run._say_once(failure)
        settled = caught_up(snapshot) and not run.revisions.catching_up()
        settled = settled and (run.sinks is None or run.sinks.caught_up(run.pipeline))
        settled = settled and (run.sources is None or not run.sources.catching_up())
        if stopping() or (until_caught_up and settled):
            return snapshot
        time.sleep(POLL_SECONDS)


def _failures(snapshot: Snapshot, run: LocalRun) -> list[str]:
    """Why views failed (told once each; the others run on)."""
    found = [
        f"view {view.name} failed: {view.error}; the whole story is in {run.runner_log}"
        for view in snapshot.views
        if view.state == "Failed"
    ]
    crashed = run.runner_failed()
    return [crashed, *found] if crashed else found


def failed_views(snapshot: Snapshot) -> list[str]:
    """The views that failed, for the run's exit status."""
    return [view.name for view in snapshot.views if view.state == "Failed"]
