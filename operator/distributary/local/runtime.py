"""The Spark runtime of `distributary run`: every view revision in one runner process.

One Spark application is kinder to a small machine than one per view, so the revisions the
reconciles start are gathered, and one runner process (`python -m distributary.runner --spec
FILE`, local Spark) runs them all. Starting a revision only asks for it; `flush()`, once per
round, restarts the process when what it should run changed (the queries finish their batch and
checkpoint first), so a round that starts three views restarts Spark once. Stopping a revision
restarts the process without it at once: a rewind moves a group's offsets only after the old
query can no longer commit. A revision fails alone: the runner keeps the others running and
publishes the failed one's state, which is read here from the progress records of the process
that runs now. A failed revision is not run again until the reconcile starts it after its
back-off (`plan.restarts`): until then a restart of the process, for another view or because it
exited, leaves it out, and it is reported failed. A revision whose query Spark refused at start
(QueryRefused) is left out of every later start of the process while its spec stays the same: the
same query would be refused again, so it is not restarted at all; the spec the process ran is the
one refused, so an edit that keeps the revision but changes its spec is started again. StreamJobs
run their own files, each as a process of its own (`LocalRuntime`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from distributary.api.job import StreamJob
from distributary.api.view import DerivedView
from distributary.backends.base import Owner, RevisionApp
from distributary.backends.local_spark import LocalSparkRuntime
from distributary.local.broker import die_with_parent
from distributary.plan.progress import progress_key
from distributary.plan.runner_spec import RunnerSpec, as_run_by
from distributary.plan.spark import Application, application_name
from distributary.plan.spark_state import CHECKPOINT_LOST, QUERY_REFUSED, AppState

Key = tuple[str, str, int]  # namespace, view, revision
STOP_GRACE = 60.0  # seconds the runner's queries get to finish their batch


class PipelineRuntime:
    """Runs the view revisions asked for in one runner process under `state_dir`; jobs through
    `jobs`. `localize(spec)` adds this machine's Spark settings; `progress()` gives the latest
    progress record of every revision; `say` tells people what happens."""

    def __init__(
        self,
        state_dir: Path,
        jobs: LocalSparkRuntime,
        localize: Callable[[RunnerSpec], RunnerSpec],
        progress: Callable[[], Mapping[str, Mapping[str, Any]]],
        say: Callable[[str], None],
    ) -> None:
        self.state_dir = state_dir
        self.jobs = jobs
        self.localize = localize
        self.progress = progress
        self.say = say
        self.wanted: dict[Key, RunnerSpec] = {}
        self.running: dict[Key, RunnerSpec] = {}
        self.failed: dict[Key, AppState] = {}  # failed revisions waiting for their restart
        self.refused: dict[Key, tuple[RunnerSpec, AppState]] = {}  # Spark refused that spec
        self.process: subprocess.Popen[bytes] | None = None
        self.known = self._load_known()  # every live revision's spec, across runs

    @property
    def known_file(self) -> Path:
        """Every live view revision's spec, so a later run can carry one over (`keep`)."""
        return self.state_dir / "revision-specs.json"

    def _load_known(self) -> dict[Key, RunnerSpec]:
        try:
            found = json.loads(self.known_file.read_text())
        except (OSError, ValueError):
            return {}
        return {
            (item["namespace"], item["name"], int(item["revision"])): RunnerSpec.model_validate(
                item
            )
            for item in found.values()
        }

    def _save_known(self) -> None:
        known = {f"{n}/{v}/r{r}": s.model_dump(mode="json") for (n, v, r), s in self.known.items()}
        temporary = self.known_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(known, indent=1, sort_keys=True))
        temporary.replace(self.known_file)

    @property
    def log_file(self) -> Path:
        """Where the runner's (Spark's) output goes."""
        return self.state_dir / "runner.log"

    @property
    def specs(self) -> list[RunnerSpec]:
        """The specs the runner runs, or will from the next `flush`."""
        return list(self.wanted.values())

    def view_app(self, view: DerivedView, runner: RunnerSpec) -> RevisionApp:
        """The view revision's query in the runner process."""
        key = (view.metadata.namespace, view.metadata.name, runner.revision)
        spec = as_run_by(self.localize(runner), runner)

        def state() -> AppState:
            found = self.failed.get(key) or self.state_of(key)
            if found.ended:  # not run again until started after its back-off
                self.failed[key] = found
            return found

        def start() -> AppState:
            self.failed.pop(key, None)
            refused = self.refused.get(key)
            if refused is not None and refused[0] != spec:
                self.refused.pop(key)  # a changed spec is worth a start
            self.wanted[key] = spec
            if self.known.get(key) != spec:
                self.known[key] = spec
                self._save_known()
            return self.state_of(key)

        def remove() -> None:  # an ended query starts again with the process
            self.running.pop(key, None)

        name = application_name(view.metadata.name, runner.revision)
        return RevisionApp(key[0], name, state, start, remove)

    def state_of(self, key: Key) -> AppState:
        """The revision's state: RUNNING while the process runs it and it has not failed."""
        refused = self.refused.get(key)
        if refused is not None and refused[0] == self.wanted.get(key):
            return refused[1]
        if key not in self.running or self.process is None:
            return AppState("SUBMITTED" if key in self.wanted else "ABSENT")
        spec = self.running[key]
        record = self.progress().get(progress_key(spec.kind, *key)) or {}
        if record.get("runnerPid") == self.process.pid and record.get("state") == QUERY_REFUSED:
            # Not run again with the spec the process ran: Spark would refuse the same query
            # again (`runner.main`). An edit of the revision's spec is started (`view_app`).
            said = AppState(QUERY_REFUSED, message=str(record.get("error") or ""))
            self.refused[key] = (spec, said)
            return said
        if record.get("runnerPid") == self.process.pid and record.get("state") == "Failed":
            message = f"the query failed: {record.get('error') or 'no error given'}"
            return AppState("FAILED", ended=True, failed=True, message=message)
        code = self.process.poll()
        if code is not None:
            message = f"Spark stopped (exit code {code}); see {self.log_file}"
            return AppState("FAILED", ended=True, failed=True, message=message)
        if record.get("runnerPid") == self.process.pid and record.get("state") == CHECKPOINT_LOST:
            # Not restarted: the view rebuilds it as a new revision (`plan.lifecycle`).
            return AppState(CHECKPOINT_LOST, message=str(record.get("error") or ""))
        return AppState("RUNNING", running=True)

    def job_app(
        self,
        job: StreamJob,
        revision: int,
        launch: Application | None,
        manifest: dict[str, Any] | None,
    ) -> RevisionApp:
        """The job revision's own process."""
        return self.jobs.job_app(job, revision, launch, manifest)

    def keep(self, owner: Owner, revisions: Sequence[int]) -> None:
        """A view's revisions run on: from the spec they ran with, kept across runs. One that
        failed while it was the view's running revision runs again with the process's next
        start: no reconcile restarts a kept revision after a back-off."""
        for revision in revisions:
            key = (owner.namespace, owner.name, revision)
            self.failed.pop(key, None)
            if key not in self.wanted and key in self.known:
                self.wanted[key] = self.localize(self.known[key])

    def stop(self, owner: Owner, revisions: Sequence[int]) -> list[int]:
        """Stop revisions: a view's leave the runner process (restarted without them at once),
        a job's processes are stopped."""
        if owner.kind == "StreamJob":
            return self.jobs.stop(owner, revisions)
        keys = [(owner.namespace, owner.name, r) for r in revisions]
        for key in keys:
            self.wanted.pop(key, None)
            self.failed.pop(key, None)
            self.refused.pop(key, None)
        if any(self.known.pop(key, None) is not None for key in keys):
            self._save_known()
        stopped = [key[2] for key in keys if key in self.running]
        if stopped:
            self.flush()
        return stopped

    def stopped(self, owner: Owner, revision: int) -> bool:
        """A job's process is gone; a view's revision is not in the runner process (a stop
        restarts the process without it at once)."""
        if owner.kind == "StreamJob":
            return self.jobs.stopped(owner, revision)
        return (owner.namespace, owner.name, revision) not in self.running

    def retire_others(self, owner: Owner, keep: int) -> list[str]:
        """A job's other revisions' processes stopped."""
        return self.jobs.retire_others(owner, keep)

    def orphans(self, namespace: str | None, alive: set[tuple[str, str, str]]) -> list[str]:
        """Jobs' processes whose job is gone from the pipeline files."""
        return self.jobs.orphans(namespace, alive)

    def watches_applications(self) -> bool:
        """Processes, looked at on each round."""
        return False

    def runnable(self, specs: Mapping[Key, RunnerSpec]) -> dict[Key, RunnerSpec]:
        """`specs` but the failed revisions that wait for their restart and those whose query
        Spark refused."""
        return {
            key: spec
            for key, spec in specs.items()
            if key not in self.failed and (self.refused.get(key) or (None,))[0] != spec
        }

    def flush(self) -> bool:
        """Restart the runner when what it should run changed; whether it did."""
        alive = self.process is not None and self.process.poll() is None
        wanted = self.runnable(self.wanted)
        if alive and wanted == self.runnable(self.running):
            return False
        if not alive and not wanted:
            return False
        self.stop_runner()
        self.start_runner()
        return True

    def start_runner(self) -> None:
        """Start the runner on the specs asked for, but failed ones waiting for their restart
        (none: nothing runs)."""
        self.running = self.runnable(self.wanted)
        spec_file = self.state_dir / "runner-specs.json"
        specs = [s.model_dump(mode="json") for s in self.running.values()]
        spec_file.write_text(json.dumps(specs, indent=1))
        if not specs:
            return
        names = ", ".join(s.name for s in self.running.values())
        self.say(f"Starting Spark for {len(specs)} view(s) ({names}); log: {self.log_file}")
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "distributary.runner", "--spec", str(spec_file)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
                env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            )

    def stop_runner(self) -> None:
        """Stop the runner gracefully (SIGTERM: its queries checkpoint), by force after a
        minute."""
        process, self.process = self.process, None
        self.running = {}
        if process is None or process.poll() is not None:
            return
        self.say("Stopping Spark (the queries finish their batch and checkpoint) ...")
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def failure(self) -> str | None:
        """Why the runner exited before it was asked to, or None while it runs."""
        if self.process is None or self.process.poll() is None:
            return None
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()[-12:]
        except OSError:
            lines = []
        tail = "\n".join(f"  {line}" for line in lines)
        code = self.process.returncode
        return f"Spark stopped (exit code {code}); the end of {self.log_file}:\n{tail}"
