"""`distributary run`: a whole pipeline on one machine, no Kubernetes.

The same planners the operator uses decide the topics and the runner specs; the `direct` backend
creates the topics; one runner process runs every view on local Spark (one Spark application is
kinder to a small machine than one per view). Everything lives under the state folder: the
embedded broker's data, the checkpoints and the runner's log, so a second run resumes where the
first stopped. Positions are read the way any Kafka tool reads them, from the revisions' consumer
groups, and records/s from the progress topic the runner publishes.

The operator's two safeguards of a view's position hold here too: a reprocess whose inputs lost
history to retention is refused unless the spec allows partial history (`local.revisions`), and
a view's `spec.rewind` is carried out once per request id while the runner is stopped, just
before it starts (`local.rewinds`).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from distributary.artifacts import SPARK_KAFKA_CONNECTOR, jars
from distributary.backends.direct import DirectTopics
from distributary.graph import Pipeline
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.history import lost_input_history
from distributary.kafka.progress import ProgressReader
from distributary.local.broker import EmbeddedBroker, die_with_parent
from distributary.local.revisions import LocalPlan, LocalRevisions, plan_views, view_key
from distributary.local.rewinds import DONE, carry_out, describe, due_rewinds
from distributary.local.state import RunState, ServedLog, write_run_state
from distributary.local.status import Snapshot, ViewNote, observe, problem_line
from distributary.plan.pipeline import PipelinePlan, PlanSettings, plan_pipeline
from distributary.plan.progress import PROGRESS_TOPIC
from distributary.plan.runner_spec import RunnerSpec
from distributary.plan.topics import DesiredTopic

IDLE_SECONDS = 3.0  # inputs unchanged this long, and no lag: caught up
POLL_SECONDS = 1.0


class RunError(RuntimeError):
    """The pipeline could not be run; the message says why and what to do."""


@dataclass
class LocalRun:
    """One `distributary run` of a validated pipeline."""

    pipeline: Pipeline
    paths: Sequence[Path]
    state_dir: Path
    bootstrap_servers: str | None = None
    cores: int = 2
    say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)
    broker: EmbeddedBroker | None = None
    runner: subprocess.Popen[bytes] | None = None
    plan: PipelinePlan | None = None
    specs: list[RunnerSpec] = field(default_factory=list)
    bootstrap: str | None = None
    revisions: LocalRevisions | None = None
    local_plan: LocalPlan | None = None
    said: set[str] = field(default_factory=set)  # problems told already (planned every second)

    @property
    def runner_log(self) -> Path:
        """Where the runner's (Spark's) output goes."""
        return self.state_dir / "runner.log"

    def start_kafka(self) -> str:
        """The bootstrap servers: given, or the embedded broker's once it serves."""
        if self.bootstrap_servers:
            return self.bootstrap_servers
        self.say(f"Starting the embedded Kafka broker in {self.state_dir / 'kafka'} ...")
        self.broker = EmbeddedBroker(self.state_dir / "kafka").start()
        self.say(f"Kafka serves on {self.broker.bootstrap_servers}")
        return self.broker.bootstrap_servers

    def prepare(self, bootstrap: str) -> None:
        """Plan the pipeline (each view at the revisions the state folder records, a changed
        one reprocessing beside its serving revision) and create or update its topics."""
        self.bootstrap = bootstrap
        self.revisions = LocalRevisions.load(self.state_dir)
        self._replan()

    def _replan(self) -> None:
        assert self.bootstrap is not None
        assert self.revisions is not None
        checkpoints = (self.state_dir / "checkpoints").resolve()
        settings = PlanSettings(
            backend="direct", checkpoint_root=checkpoints.as_uri(), bootstrap_servers=self.bootstrap
        )
        planned = plan_pipeline(self.pipeline, settings)
        admin = KafkaAdmin(self.bootstrap)
        self.local_plan = plan_views(
            self.pipeline,
            self.revisions,
            checkpoint_root=checkpoints.as_uri(),
            bootstrap_servers=self.bootstrap,
            localize=self._local,
            lost_history_of=functools.partial(lost_input_history, admin),
        )
        serving = self.local_plan.serving
        self.plan = replace(
            planned,
            topics=tuple(
                replace(t, topic=replace(t.topic, name=serving.get(t.log.name, t.topic.name)))
                for t in planned.topics
            ),
        )
        self.specs = list(self.local_plan.specs)
        topics = DirectTopics(admin)
        for desired in self._topics():
            result = topics.apply(desired)
            for refusal in result.refusals:
                self.say(f"warning: topic {desired.name}: {refusal.message}")
        served = {t.log.name: ServedLog(t.topic.name, t.log.namespace) for t in self.plan.topics}
        paths = tuple(map(str, self.paths))
        state = RunState(self.bootstrap, paths, logs=served, views=self._view_states())
        write_run_state(self.state_dir, state)
        self.revisions.save()
        for name, plan in self.local_plan.views.items():
            for problem in plan.problems:
                self._say_once(problem_line(name, problem, plan.revision))

    def _say_once(self, text: str) -> None:
        if text not in self.said:
            self.said.add(text)
            self.say(text)

    def notes(self) -> dict[str, ViewNote]:
        """Each view's note (by name): the change refused, if any, and the rewinds done."""
        assert self.local_plan is not None
        assert self.revisions is not None
        notes = {}
        for ref in self.pipeline.views:
            plan = self.local_plan.views.get(ref.name)
            rewinds = self.revisions.rewinds(view_key(ref))
            notes[ref.name] = ViewNote(
                serving=plan.revision if plan is not None else 1,
                problem=plan.problems[0] if plan is not None and plan.problems else None,
                rewinds=tuple(r for r in rewinds if r.get("phase") == DONE),
            )
        return notes

    def _view_states(self) -> dict[str, dict[str, Any]]:
        """What run.json tells of each view: the revision serving, a refused change, rewinds."""
        states: dict[str, dict[str, Any]] = {}
        notes = self.notes()
        for ref in self.pipeline.views:
            note = notes[ref.name]
            state: dict[str, Any] = {"namespace": ref.namespace, "servingRevision": note.serving}
            if note.problem is not None:
                state["problem"] = {"reason": note.problem.reason, "message": note.problem.message}
            if note.rewinds:
                state["rewinds"] = [str(r["requestId"]) for r in note.rewinds]
            states[ref.name] = state
        return states

    def rewind(self) -> None:
        """Carry out the rewinds the views' specs ask for and no earlier run did (the runner
        must be stopped), then plan again, so the rewound revisions run on fresh checkpoints."""
        assert self.local_plan is not None
        assert self.revisions is not None
        assert self.bootstrap is not None
        due = due_rewinds(self.pipeline, self.local_plan.views, self.revisions)
        if not due:
            return
        admin = KafkaAdmin(self.bootstrap)
        for rewind in due:
            self.say(f"view {rewind.name}: rewinding for request {rewind.request_id} ...")
            # A Pending record (a run stopped mid-way) is finished with the offsets it holds.
            now = datetime.now(UTC)
            done = carry_out(admin, rewind, self.revisions, now)
            self.say(describe(rewind.name, done))
        self._replan()

    def advance(self, snapshot: Snapshot) -> bool:
        """Carry the revisions on from what `snapshot` shows (cutover of a caught-up revision,
        retirement); True when the runner must restart on other specs."""
        assert self.revisions is not None
        self.revisions.record_lags({(v.name, v.revision): v.lag for v in snapshot.views})
        before = [s.model_dump_json() for s in self.specs]
        self._replan()
        admin = KafkaAdmin(self.bootstrap or "")
        assert self.local_plan is not None
        for name, plan in self.local_plan.views.items():
            lifecycle = plan.lifecycle
            if lifecycle is None:
                continue
            if lifecycle.cut_over is not None:
                self.say(f"view {name}: revision {lifecycle.cut_over} caught up and serves now")
            if lifecycle.delete_topics:
                for topic in lifecycle.delete_topics:
                    admin.delete_topic(topic)
                self.revisions.topics_deleted(name, list(lifecycle.delete_topics))
                self.revisions.save()
        return [s.model_dump_json() for s in self.specs] != before

    def _topics(self) -> list[DesiredTopic]:
        assert self.plan is not None
        desired = [t.topic for t in self.plan.topics]
        by_log = {t.log.name: t.topic for t in self.plan.topics}
        for spec in self.specs:  # every running revision's own topic (one may catch up)
            if spec.output is not None and spec.output.log in by_log:
                desired.append(replace(by_log[spec.output.log], name=spec.output.topic))
        compacted = {"cleanup.policy": "compact"}
        desired.append(DesiredTopic(PROGRESS_TOPIC, 1, None, compacted))
        for spec in self.specs:
            partitions = max(i.partitions for i in spec.inputs)
            desired.append(DesiredTopic(spec.dead_letter_topic, partitions, None, {}))
        return list({d.name: d for d in desired}.values())

    def restart_runner(self) -> None:
        """Stop the runner (its queries checkpoint) and start it on the current specs."""
        self._stop_runner()
        self.start_runner()

    def _stop_runner(self) -> None:
        """Stop the runner gracefully (SIGTERM), by force after a minute."""
        runner, self.runner = self.runner, None
        if runner is not None and runner.poll() is None:
            self.say("Stopping Spark (the queries finish their batch and checkpoint) ...")
            runner.send_signal(signal.SIGTERM)
            try:
                runner.wait(60)
            except subprocess.TimeoutExpired:
                runner.kill()
                runner.wait()

    def _local(self, spec: RunnerSpec) -> RunnerSpec:
        conf = {
            **spec.spark_conf,
            "spark.master": f"local[{self.cores}]",
            "spark.jars": ",".join(str(j) for j in jars(SPARK_KAFKA_CONNECTOR)),
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "2g",
        }
        return spec.model_copy(update={"spark_conf": conf})

    def start_runner(self) -> None:
        """Start the runner on every view's spec, its output in the runner log; rewinds due are
        carried out first, while it does not run."""
        self.rewind()
        spec_file = self.state_dir / "runner-specs.json"
        spec_file.write_text(json.dumps([s.model_dump(mode="json") for s in self.specs], indent=1))
        if not self.specs:
            return
        names = ", ".join(s.name for s in self.specs)
        self.say(f"Starting Spark for {len(self.specs)} view(s) ({names}); log: {self.runner_log}")
        with open(self.runner_log, "ab") as log:
            self.runner = subprocess.Popen(
                [sys.executable, "-m", "distributary.runner", "--spec", str(spec_file)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
                env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            )

    def runner_failed(self) -> str | None:
        """Why the runner exited before it was asked to, or None while it runs."""
        if self.runner is None or self.runner.poll() is None:
            return None
        lines = self.runner_log.read_text(errors="replace").splitlines()[-12:]
        tail = "\n".join(f"  {line}" for line in lines)
        code = self.runner.returncode
        return f"Spark stopped (exit code {code}); the end of {self.runner_log}:\n{tail}"

    def stop(self) -> None:
        """Stop the runner (gracefully, then by force) and the embedded broker."""
        self._stop_runner()
        if self.broker is not None:
            self.say("Stopping Kafka ...")
            self.broker.stop()
            self.broker = None


class CaughtUp:
    """Decides when a pipeline has caught up: no view lags and no input moved for a while."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._ends: dict[str, dict[int, int]] | None = None
        self._since = time.monotonic()

    def __call__(self, snapshot: Snapshot) -> bool:
        """True when every view is running with no lag and the logs have been still long enough."""
        ends = snapshot.all_end_offsets()
        if ends != self._ends:
            self._ends, self._since = ends, time.monotonic()
            return False
        still = time.monotonic() - self._since >= self.idle_seconds
        return still and all(v.state == "Running" and v.lag == 0 for v in snapshot.views)


def watch(
    run: LocalRun,
    bootstrap: str,
    show: Callable[[Snapshot], None],
    until_caught_up: bool,
    stopping: Callable[[], bool],
) -> Snapshot:
    """Refresh the snapshot until asked to stop, the runner fails, or (optionally) caught up."""
    admin = KafkaAdmin(bootstrap)
    reader = ProgressReader(bootstrap, PROGRESS_TOPIC)
    caught_up = CaughtUp()
    try:
        while True:
            assert run.plan is not None
            snapshot = observe(run.plan, run.specs, admin, reader.poll(), run.notes())
            if run.advance(snapshot):
                run.restart_runner()
                continue
            show(snapshot)
            failure = run.runner_failed() or (until_caught_up and _failed_view(snapshot, run))
            if failure:
                raise RunError(failure)
            settled = caught_up(snapshot) and not (run.revisions and run.revisions.catching_up())
            if stopping() or (until_caught_up and settled):
                return snapshot
            time.sleep(POLL_SECONDS)
    finally:
        reader.close()


def _failed_view(snapshot: Snapshot, run: LocalRun) -> str | None:
    """Why a view failed (it can never catch up), or None."""
    for view in snapshot.views:
        if view.state == "Failed":
            return f"view {view.name} failed: {view.error}; the whole story is in {run.runner_log}"
    return None
