"""The `local` Spark runtime: the runner as a process on the operator's own machine.

For development clusters and tests, where no Spark operator runs. Each view revision is one
runner process (`python -m distributary.runner --spec FILE`, local Spark), each StreamJob revision
one process running the job's own file (`python -m distributary.runner.job --spec FILE`); the
spec, pid and log of each live in a folder of its own under the state folder
(`<namespace>/<name>/r<N>` for a view, `.../job-r<N>` for a job), so an operator that restarts
finds the processes it started (by pid and command line) instead of starting them twice.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distributary import processes
from distributary.api.job import StreamJob
from distributary.api.view import DerivedView
from distributary.backends.base import Owner, RevisionApp
from distributary.jvm_operators import runner_jars
from distributary.plan.applications.runner_spec import RunnerSpec, as_run_by
from distributary.plan.applications.spark import Application, application_name
from distributary.plan.applications.spark_state import AppState
from distributary.plan.sinks.sink_plan import SinkRun

RUNNER = "distributary.runner"  # the module a view revision's process runs
SUSPENDED_MARKER = "suspended"  # in a revision's folder: `suspend` stopped it, `keep` restarts it


@dataclass(frozen=True)
class LocalApplication:
    """Where one revision's runner keeps its spec, pid and log."""

    folder: Path

    @property
    def spec_file(self) -> Path:
        """The runner spec the process runs."""
        return self.folder / "runner-spec.json"

    @property
    def pid_file(self) -> Path:
        """The running process's pid."""
        return self.folder / "runner.pid"

    @property
    def log_file(self) -> Path:
        """The runner's (Spark's) output."""
        return self.folder / "runner.log"

    def pid(self) -> int | None:
        """The pid of this revision's runner if it runs, else None."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        return pid if str(self.spec_file).encode() in cmdline else None

    def last_line(self) -> str:
        """The last line the process wrote, for people."""
        try:
            lines = self.log_file.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].strip() if lines else ""

    def tail(self, lines: int = 5) -> str:
        """The end of the runner's log, for a condition's message."""
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        kept = [line for line in text.splitlines() if line.startswith("runner:")]
        return " | ".join(kept[-lines:])


class LocalRuntime:
    """Runs revisions as local processes under `state_dir`, `cores` Spark threads each."""

    def __init__(self, state_dir: Path, cores: int = 2) -> None:
        self.state_dir = state_dir
        self.cores = cores
        self._children: dict[Path, processes.Supervised] = {}

    def application(self, spec: RunnerSpec) -> LocalApplication:
        """The folder of `spec`'s revision."""
        return self.revision(spec.namespace, spec.name, spec.revision)

    def revision(self, namespace: str, name: str, revision: int) -> LocalApplication:
        """The folder of a view's revision."""
        return LocalApplication(self.state_dir / namespace / name / f"r{revision}")

    def job(self, namespace: str, name: str, revision: int) -> LocalApplication:
        """The folder of a StreamJob's revision."""
        return LocalApplication(self.state_dir / namespace / name / f"job-r{revision}")

    def sink(self, namespace: str, name: str) -> LocalApplication:
        """The folder of a Sink's process (`python -m distributary.sinks`)."""
        return LocalApplication(self.state_dir / namespace / name / "sink")

    def ensure_sink(self, run: SinkRun) -> AppState:
        """Start the Sink's process unless it runs with this very spec (a new spec, e.g. a new
        serving topic, stops the old process first: it finishes its transaction); its state."""
        namespace, name = run.name.split("/", 1)
        return self._ensure(self.sink(namespace, name), run.model_dump_json(indent=1),
                            "distributary.sinks")  # fmt: skip

    def running(self, pattern: str = "r*") -> list[tuple[str, str, LocalApplication]]:
        """(namespace, name, application) of every process that lives: views' runners, or with
        `pattern="job-r*"` jobs'."""
        found = []
        for pid_file in sorted(self.state_dir.glob(f"*/*/{pattern}/runner.pid")):
            app = LocalApplication(pid_file.parent)
            if app.pid() is not None:
                found.append((app.folder.parent.parent.name, app.folder.parent.name, app))
        return found

    def _conf(self) -> dict[str, str]:
        return {
            "spark.master": f"local[{self.cores}]",
            "spark.jars": ",".join(str(j) for j in runner_jars(quiet=True)),
            "spark.ui.enabled": "false",
        }

    def local_spec(self, spec: RunnerSpec) -> RunnerSpec:
        """`spec` with the settings of local Spark: master, the connector's jars, no UI."""
        return spec.model_copy(update={"spark_conf": {**spec.spark_conf, **self._conf()}})

    def ensure(self, spec: RunnerSpec) -> AppState:
        """Start the revision's runner unless it runs with this very spec; its state."""
        wanted = as_run_by(self.local_spec(spec), spec).model_dump_json(indent=1)
        return self._ensure(self.application(spec), wanted, RUNNER)

    def ensure_job(self, launch: Application) -> AppState:
        """Start a job revision's own file unless it runs with this very launch; its state."""
        wanted = {
            "namespace": launch.namespace,
            "name": launch.name,
            "revision": launch.revision,
            "specHash": launch.spec_hash,
            "mainFile": launch.main_file,
            "arguments": list(launch.arguments),
            "env": dict(launch.env),
            "sparkConf": {**launch.spark_conf, **self._conf()},
        }
        app = self.job(launch.namespace, launch.name, launch.revision)
        return self._ensure(app, json.dumps(wanted, indent=1), "distributary.runner.job")

    def _ensure(self, app: LocalApplication, wanted: str, module: str) -> AppState:
        pid = app.pid()
        if pid is not None and app.spec_file.read_text() == wanted:
            return AppState("RUNNING", running=True)
        if pid is not None:
            self._stop(app, pid)  # the spec changed in place (e.g. a new trigger): restart
        app.folder.mkdir(parents=True, exist_ok=True)
        app.spec_file.write_text(wanted)
        # SIGTERM to the process alone (its queries stop through its JVM); it outlives the
        # operator, whose successor adopts it by its pid file.
        child = processes.start(
            [sys.executable, "-m", module, "--spec", str(app.spec_file)],
            log=app.log_file,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            whole_group=False,
            outlive_parent=True,
        )
        self._children[app.folder] = child
        app.pid_file.write_text(f"{child.pid}\n")
        return AppState("SUBMITTED")

    def again(self, app: LocalApplication, module: str) -> AppState:
        """Start the revision's process again on the spec it last ran, unless it runs; its
        state (as it is when it never ran here)."""
        try:
            wanted = app.spec_file.read_text()
        except OSError:
            return self.state_of(app)
        return self._ensure(app, wanted, module)

    def state(self, spec: RunnerSpec) -> AppState:
        """RUNNING while the view revision's process lives; else how it ended."""
        return self.state_of(self.application(spec))

    def state_of(self, app: LocalApplication) -> AppState:
        """RUNNING while the process lives; else how it ended, as far as can be told."""
        if app.pid() is not None:
            return AppState("RUNNING", running=True)
        if not app.pid_file.exists():
            return AppState("ABSENT")
        child = self._children.get(app.folder)
        code = child.poll() if child is not None else None
        detail = app.tail()
        message = (
            f"the process exited with code {code}"
            if code is not None
            else "the process is not running"
        )
        return AppState(
            "FAILED" if code not in (None, 0) else "COMPLETED",
            ended=True,
            failed=True,
            message=f"{message}; {detail}" if detail else message,
        )

    def stop(self, app: LocalApplication) -> None:
        """Stop a revision's runner, gracefully (its queries checkpoint)."""
        pid = app.pid()
        if pid is not None:
            self._stop(app, pid)

    def _stop(self, app: LocalApplication, pid: int, grace: float = 60.0) -> None:
        child = self._children.pop(app.folder, None)
        if child is not None:
            child.stop(grace)
        else:  # adopted from an earlier operator: its keeper kills what it leaves
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while app.pid() is not None and time.monotonic() < deadline:
                time.sleep(0.2)
            if app.pid() is not None:
                os.killpg(pid, signal.SIGKILL)
        app.pid_file.unlink(missing_ok=True)


class LocalSparkRuntime:
    """The `local` runtime behind the `SparkRuntime` contract: each revision a process of
    `local` (a `LocalRuntime`). An ended process is simply started again: nothing to remove."""

    def __init__(self, local: LocalRuntime) -> None:
        self.local = local

    def view_app(self, view: DerivedView, runner: RunnerSpec) -> RevisionApp:
        """The view revision's runner process."""
        name = application_name(view.metadata.name, runner.revision)
        return RevisionApp(
            view.metadata.namespace,
            name,
            lambda: self.local.state(runner),
            lambda: self.local.ensure(runner),
            lambda: None,
        )

    def job_app(
        self,
        job: StreamJob,
        revision: int,
        launch: Application | None,
        manifest: dict[str, Any] | None,
    ) -> RevisionApp:
        """The job revision's process, running the job's own file as `launch` says (None: a
        refused change, the running revision is left as it is)."""
        namespace = job.metadata.namespace
        folder = self.local.job(namespace, job.metadata.name, revision)

        def start() -> AppState:
            if launch is None:  # a refused change: the revision runs on as it last ran
                return self.local.again(folder, "distributary.runner.job")
            return self.local.ensure_job(launch)

        name = application_name(job.metadata.name, revision, "StreamJob")
        return RevisionApp(
            namespace, name, lambda: self.local.state_of(folder), start, lambda: None
        )

    def _folder(self, owner: Owner, revision: int) -> LocalApplication:
        if owner.kind == "StreamJob":
            return self.local.job(owner.namespace, owner.name, revision)
        return self.local.revision(owner.namespace, owner.name, revision)

    def keep(self, owner: Owner, revisions: Sequence[int]) -> None:
        """Nothing for a revision's process, which runs on until it is stopped; one `suspend`
        stopped starts again on the spec it ran."""
        for revision in revisions:
            app = self._folder(owner, revision)
            marker = app.folder / SUSPENDED_MARKER
            if marker.exists():
                module = "distributary.runner.job" if owner.kind == "StreamJob" else RUNNER
                self.local.again(app, module)
                marker.unlink()

    def suspend(self, owner: Owner, revisions: Sequence[int]) -> list[int]:
        """Stop the revisions' processes, each folder marked for `keep` to start again."""
        for revision in revisions:
            app = self._folder(owner, revision)
            if app.pid() is not None:
                (app.folder / SUSPENDED_MARKER).touch()
        return self.stop(owner, revisions)

    def stop(self, owner: Owner, revisions: Sequence[int]) -> list[int]:
        """Stop the revisions' processes (their queries checkpoint); those that ran."""
        stopped = []
        for revision in revisions:
            app = self._folder(owner, revision)
            if app.pid() is not None:
                self.local.stop(app)
                stopped.append(revision)
        return stopped

    def stopped(self, owner: Owner, revision: int) -> bool:
        """Whether the revision's process is gone (`stop` waits for it)."""
        return self._folder(owner, revision).pid() is None

    def retire_others(self, owner: Owner, keep: int) -> list[str]:
        """Stop the job's processes of every revision but `keep`."""
        kept = self._folder(owner, keep).folder.name
        pattern = "job-r*" if owner.kind == "StreamJob" else "r*"
        stopped = []
        for namespace, name, app in self.local.running(pattern):
            if (namespace, name) == (owner.namespace, owner.name) and app.folder.name != kept:
                self.local.stop(app)
                stopped.append(app.folder.name)
        return stopped

    def orphans(self, namespace: str | None, alive: set[tuple[str, str, str]]) -> list[str]:
        """Stop processes whose view or job is gone (deleted, even while the operator was
        down); the folders of those stopped."""
        stopped = []
        for kind, pattern in (("DerivedView", "r*"), ("StreamJob", "job-r*")):
            for owner_namespace, name, app in self.local.running(pattern):
                if (
                    namespace in (None, owner_namespace)
                    and (kind, owner_namespace, name) not in alive
                ):
                    self.local.stop(app)
                    stopped.append(str(app.folder))
        return stopped

    def watches_applications(self) -> bool:
        """Processes, looked at on each round: nothing to watch."""
        return False
