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
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from distributary.artifacts import SPARK_KAFKA_CONNECTOR, jars
from distributary.plan.runner_spec import RunnerSpec
from distributary.plan.spark import Application
from distributary.plan.spark_state import AppState


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
        self._children: dict[Path, subprocess.Popen[bytes]] = {}

    def application(self, spec: RunnerSpec) -> LocalApplication:
        """The folder of `spec`'s revision."""
        return self.revision(spec.namespace, spec.name, spec.revision)

    def revision(self, namespace: str, name: str, revision: int) -> LocalApplication:
        """The folder of a view's revision."""
        return LocalApplication(self.state_dir / namespace / name / f"r{revision}")

    def job(self, namespace: str, name: str, revision: int) -> LocalApplication:
        """The folder of a StreamJob's revision."""
        return LocalApplication(self.state_dir / namespace / name / f"job-r{revision}")

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
            "spark.jars": ",".join(str(j) for j in jars(SPARK_KAFKA_CONNECTOR, quiet=True)),
            "spark.ui.enabled": "false",
        }

    def local_spec(self, spec: RunnerSpec) -> RunnerSpec:
        """`spec` with the settings of local Spark: master, the connector's jars, no UI."""
        return spec.model_copy(update={"spark_conf": {**spec.spark_conf, **self._conf()}})

    def ensure(self, spec: RunnerSpec) -> AppState:
        """Start the revision's runner unless it runs with this very spec; its state."""
        wanted = self.local_spec(spec).model_dump_json(indent=1)
        return self._ensure(self.application(spec), wanted, "distributary.runner")

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
        with open(app.log_file, "ab") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", module, "--spec", str(app.spec_file)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            )
        self._children[app.folder] = child
        app.pid_file.write_text(f"{child.pid}\n")
        return AppState("SUBMITTED")

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
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while app.pid() is not None and time.monotonic() < deadline:
            child = self._children.get(app.folder)
            if child is not None and child.poll() is not None:
                break
            time.sleep(0.2)
        if app.pid() is not None:
            os.kill(pid, signal.SIGKILL)
        child = self._children.pop(app.folder, None)
        if child is not None:
            child.wait()
        app.pid_file.unlink(missing_ok=True)
