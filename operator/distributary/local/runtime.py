"""The Spark runtime of `distributary run`: every view revision in one runner process.

One Spark application is kinder to a small machine than one per view, so the revisions the
reconciles start are gathered, and one runner process (`python -m distributary.runner --spec
FILE --follow`, local Spark) runs them all. Starting a revision only asks for it; `flush()`, once
per round, writes what the process should run when that changed, and the running process takes
it: it stops the revisions no longer asked for between batches, starts the new ones and
acknowledges the file's generation, while the other queries run on (a cutover of one view does
not pause the others). The process starts again only when the change needs other process
settings (`plan.applications.runner_spec.process_settings`) or the process does not acknowledge it.
Stopping a revision waits for the acknowledgement: a rewind moves a group's offsets only after the
old query can no longer commit. A revision fails alone: the runner keeps the others running and
publishes the failed one's state, which is read here from the progress records of the process that
runs now. A failed revision is not run again until the reconcile starts it after its back-off
(`plan.applications.restarts`): until then a restart of the process, for another view or because it
exited, leaves it out, and it is reported failed. A revision whose query Spark refused at start
(QueryRefused) is left out of every later start of the process while its spec stays the same: the
same query would be refused again, so it is not restarted at all; the spec the process ran is the
one refused, so an edit that keeps the revision but changes its spec is started again. StreamJobs
run their own files, each as a process of its own (`LocalRuntime`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from distributary import processes
from distributary.api.job import StreamJob
from distributary.api.view import DerivedView
from distributary.backends.base import Owner, RevisionApp
from distributary.backends.local_spark import LocalSparkRuntime
from distributary.plan.applications.runner_spec import (
    FOLLOW_ARG,
    RUNNER_GENERATION,
    SPEC_FILE_ARG,
    FollowedSpecs,
    RunnerSpec,
    applied_file,
    as_run_by,
    process_settings,
)
from distributary.plan.applications.spark import Application, application_name
from distributary.plan.applications.spark_state import CHECKPOINT_LOST, QUERY_REFUSED, AppState
from distributary.plan.revisions.progress import progress_key

Key = tuple[str, str, int]  # namespace, view, revision
STOP_GRACE = 60.0  # seconds the runner's queries get to finish their batch
FOLLOW_TIMEOUT = 120.0  # seconds a running process gets to take a change (stops, then starts)


def _names(specs: Mapping[Key, RunnerSpec] | Sequence[Key]) -> str:
    keys = list(specs.keys()) if isinstance(specs, Mapping) else list(specs)
    return ", ".join(f"{name} r{revision}" for _, name, revision in keys)


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
        self.process: processes.Supervised | None = None
        self.known = self._load_known()  # every live revision's spec, across runs
        self.generation = 0  # of the specs file, across the processes of this run
        self.since: dict[Key, int] = {}  # the generation each revision was (re)started at
        self.settings: dict[str, Any] = {}  # the running process's (`process_settings`)

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
        if int(record.get(RUNNER_GENERATION) or 0) < self.since.get(key, 0):
            record = {}  # said of an earlier start of the revision in this process
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
            # Not restarted: the view rebuilds it as a new revision (`plan.revisions.lifecycle`).
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
        return self._leave(owner, revisions, forget=True)

    def suspend(self, owner: Owner, revisions: Sequence[int]) -> list[int]:
        """Stop revisions as `stop` does, keeping the specs they ran, so that `keep` (or a
        resumed reconcile) runs them again as they were."""
        if owner.kind == "StreamJob":
            return self.jobs.suspend(owner, revisions)
        return self._leave(owner, revisions, forget=False)

    def _leave(self, owner: Owner, revisions: Sequence[int], forget: bool) -> list[int]:
        """A view's revisions out of the runner process; what they ran forgotten too (`forget`,
        for good) or kept for `keep`. Those that ran."""
        keys = [(owner.namespace, owner.name, r) for r in revisions]
        for key in keys:
            self.wanted.pop(key, None)
            self.failed.pop(key, None)
            if forget:
                self.refused.pop(key, None)
        if forget and any(self.known.pop(key, None) is not None for key in keys):
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
        """Bring the runner to what it should run when that changed; whether anything changed.
        A running process takes the change itself (`_follow`); it starts again only when it
        cannot (other Spark settings), did not say it took it, or when nothing is left to run."""
        alive = self.process is not None and self.process.poll() is None
        wanted = self.runnable(self.wanted)
        if alive and wanted == self.runnable(self.running):
            return False
        if not alive and not wanted:
            return False
        same = bool(wanted) and process_settings(list(wanted.values())) == self.settings
        if alive and same and self._follow(wanted):
            return True
        self.stop_runner()
        self.start_runner()
        return True

    @property
    def spec_file(self) -> Path:
        """The specs the runner process runs (`plan.applications.runner_spec.FollowedSpecs`), which
        it reads again whenever they change."""
        return self.state_dir / "runner-specs.json"

    def _write_specs(self, wanted: dict[Key, RunnerSpec]) -> None:
        """Write the next generation of the specs file: a revision new to the process, started
        again after it ended, or with another spec is (re)started at this generation."""
        self.generation += 1
        for key, spec in wanted.items():
            if self.running.get(key) != spec:
                self.since[key] = self.generation
        followed = FollowedSpecs(
            self.generation, tuple((self.since[key], spec) for key, spec in wanted.items())
        )
        temporary = self.spec_file.with_suffix(".tmp")
        temporary.write_text(followed.to_json())
        temporary.replace(self.spec_file)

    def _follow(self, wanted: dict[Key, RunnerSpec]) -> bool:
        """Have the running process run `wanted` instead of what it runs: stopped revisions end
        between batches (and write nothing after), new ones start. Whether it said it did within
        `FOLLOW_TIMEOUT`."""
        assert self.process is not None
        started = [k for k, s in wanted.items() if self.running.get(k) != s]
        stopped = [k for k, s in self.running.items() if wanted.get(k) != s]
        self._write_specs(wanted)
        changes = [f"starting {_names(started)}"] if started else []
        changes += [f"stopping {_names(stopped)}"] if stopped else []
        self.say(f"Spark (running): {'; '.join(changes)}")
        deadline = time.monotonic() + FOLLOW_TIMEOUT
        while time.monotonic() < deadline and self.process.poll() is None:
            if self._applied() >= self.generation:
                self.running = wanted
                return True
            time.sleep(0.1)
        self.say(f"Spark did not take the change within {FOLLOW_TIMEOUT:.0f}s; starting it again")
        return False

    def _applied(self) -> int:
        """The generation of the specs file the running process said it runs (-1: none)."""
        try:
            said = json.loads(applied_file(self.spec_file).read_text())
        except (OSError, ValueError):
            return -1
        if self.process is None or said.get("pid") != self.process.pid:
            return -1
        return int(said.get("generation") or 0)

    def start_runner(self) -> None:
        """Start the runner on the specs asked for, but failed ones waiting for their restart
        (none: nothing runs)."""
        wanted = self.runnable(self.wanted)
        self.running = {}
        self._write_specs(wanted)
        self.running = wanted
        if not wanted:
            return
        self.settings = process_settings(list(wanted.values()))
        command = ["-m", "distributary.runner", SPEC_FILE_ARG, str(self.spec_file), FOLLOW_ARG]
        self.say(f"Starting Spark for {len(wanted)} view(s) ({_names(wanted)}); "
                 f"log: {self.log_file}")  # fmt: skip
        # SIGTERM to the runner alone: it stops its queries through its JVM, which must live.
        self.process = processes.start(
            [sys.executable, *command],
            log=self.log_file,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            whole_group=False,
        )

    def stop_runner(self) -> None:
        """Stop the runner gracefully (SIGTERM: its queries checkpoint), by force after a
        minute."""
        process, self.process = self.process, None
        self.running = {}
        if process is None or process.poll() is not None:
            return
        self.say("Stopping Spark (the queries finish their batch and checkpoint) ...")
        process.stop(STOP_GRACE)

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
