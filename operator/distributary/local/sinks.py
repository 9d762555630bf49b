"""The Sinks of a `distributary run`: where their processes run and where their statuses live.

A Sink's reconcile is `reconcile.sink`, the operator's; the run drives it at every round in the
pipeline's order (`local.run`). Here are the two things the run gives it that differ from a
cluster: the `SinkRuntime` (`LocalSinks`: one process each, `python -m distributary.sinks`,
started as a child of the run that dies with it, its spec, pid and log under
`<state>/sinks/<namespace>.<name>.*`, the store's password read by the process from the secrets
folder, never written anywhere), and the status store (`SinkStatuses`: `<state>/sinks.json`, the
reconcile's status with the table, whether it runs and why it is Stalled, for people and the
summary). A run starts with no status of its Sinks: a Sink whose process refused its store in an
earlier run is given one more try.

A Sink's process keeps its table and its position in one database transaction, so it can be
killed at any point and started again: it carries on from the position the table holds. A Log
whose serving topic changes under a Sink (a view's cutover) gets a new process on the new topic:
it fills the new revision's table beside the one readers read (`<table>__r<N>`) and, once whole,
switches readers to it in one transaction (`sinks.postgres.switch`; a Redis Sink fills keys
beside and switches them in one script, `sinks.redis.SWITCH`); readers never see a half-built
revision.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distributary import processes
from distributary.api.sink import Sink
from distributary.backends.base import RevisionApp, SecretMissingError
from distributary.graph import Pipeline
from distributary.local.sources import SourceError, secret_file
from distributary.local.state import MergedStatus, write_json
from distributary.plan.applications.spark_state import AppState
from distributary.plan.sinks.sink_plan import SinkRun
from distributary.plan.status.status_patch import merged

SINKS_FILE = "sinks.json"


@dataclass
class _Process:
    """One Sink's process, and the spec it was started with."""

    run: SinkRun
    process: processes.Supervised | None = None


@dataclass
class LocalSinks:
    """The Sinks' processes of one run (the `SinkRuntime` of `backends.base`)."""

    state_dir: Path
    secrets_dir: Path | None
    processes: dict[str, _Process] = field(default_factory=dict)  # by namespace/name

    @property
    def folder(self) -> Path:
        """Where the Sinks' specs, logs and pids are."""
        return self.state_dir / "sinks"

    def last_run(self, namespace: str, name: str) -> SinkRun | None:
        """The spec the Sink's process was last given, in this run or an earlier one."""
        try:
            text = self._file(namespace, name, "json").read_text("utf-8")
            return SinkRun.model_validate_json(text)
        except (OSError, ValueError):
            return None

    def sink_app(self, sink: Sink, run: SinkRun, owner: Mapping[str, Any]) -> RevisionApp:
        """The Sink's process running `run`, reading its password from the secrets folder."""
        namespace, name = sink.metadata.namespace, sink.metadata.name
        run = run.model_copy(update={"password_file": self._password_file(sink)})
        key = f"{namespace}/{name}"

        def state() -> AppState:
            entry = self.processes.get(key)
            process = entry.process if entry is not None else None
            if entry is None or process is None:
                return AppState("ABSENT")
            code = process.poll()
            if code is None:
                return AppState("RUNNING", running=True)
            last = _last_line(self._file(namespace, name, "log"))
            said = f"code {code}: {last or 'no reason'}"
            return AppState("FAILED", ended=True, failed=True, message=said)

        def start() -> AppState:
            entry = self.processes.get(key)
            if entry is not None and entry.run == run and state().running:
                return AppState("RUNNING", running=True)
            if entry is not None:
                self._end(entry)  # a new spec (a new serving topic): it finishes its transaction
            entry = self.processes[key] = _Process(run)
            self._start(namespace, name, entry)
            return AppState("SUBMITTED")

        def remove() -> None:
            entry = self.processes.get(key)
            if entry is not None:
                self._end(entry)
                entry.process = None

        return RevisionApp(namespace, f"{name}-sink", state, start, remove)

    def _password_file(self, sink: Sink) -> str | None:
        store = sink.spec.postgres or sink.spec.redis
        secret = store.password_secret if store is not None else None
        if secret is None:
            return None
        field_name = "postgres" if sink.spec.postgres is not None else "redis"
        try:
            path = secret_file(self.secrets_dir, secret, f"sink {sink.metadata.name}",
                               f"spec.{field_name}.passwordSecret")  # fmt: skip
        except SourceError as exc:
            raise SecretMissingError(str(exc)) from None
        return str(path.resolve())

    def _file(self, namespace: str, name: str, suffix: str) -> Path:
        """The Sink's spec (`json`), process id (`pid`) or log (`log`) in the state folder."""
        return self.folder / f"{namespace}.{name}.{suffix}"

    def _start(self, namespace: str, name: str, entry: _Process) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        spec = self._file(namespace, name, "json")
        spec.write_text(entry.run.model_dump_json(indent=2))
        entry.process = processes.start(
            [sys.executable, "-m", "distributary.sinks", "--spec", str(spec)],
            log=self._file(namespace, name, "log"),
        )
        self._file(namespace, name, "pid").write_text(f"{entry.process.pid}\n")

    @staticmethod
    def _end(entry: _Process) -> None:
        """Stop an entry's process (it finishes its transaction)."""
        if entry.process is not None and entry.process.poll() is None:
            entry.process.stop(30)

    def stop(self, namespace: str, name: str) -> None:
        """Stop the Sink's process (it finishes its transaction)."""
        entry = self.processes.pop(f"{namespace}/{name}", None)
        if entry is not None:
            self._end(entry)

    def stop_all(self) -> None:
        """Stop every Sink's process (each finishes its transaction)."""
        running = [e.process for e in self.processes.values() if e.process is not None]
        for process in running:
            process.ask_to_stop(15)
        for process in running:
            process.stop(15)


def _last_line(path: Path) -> str:
    """The last line a Sink's process wrote, for people."""
    try:
        lines = path.read_text("utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def _stalled(status: Mapping[str, Any]) -> str | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Stalled" and condition.get("status") == "True":
            return str(condition.get("message") or condition.get("reason") or "Stalled")
    return None


@dataclass
class SinkStatuses:
    """The Sinks' statuses of one run (each Sink's `StatusStore`), kept in `sinks.json` with
    what people read first: the table, whether its process runs, why it is Stalled."""

    state_dir: Path
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)  # by namespace/name

    def read(self, sink: Sink) -> dict[str, Any]:
        """The Sink as its reconcile reads it: its spec from the files, its status from here."""
        meta = sink.metadata
        key = f"{meta.namespace}/{meta.name}"
        return {
            "apiVersion": sink.api_version,
            "kind": sink.kind,
            "metadata": {
                "name": meta.name,
                "namespace": meta.namespace,
                "uid": f"local:{key}",
                "generation": 1,
            },
            "spec": sink.model_dump(mode="json", by_alias=True, exclude_none=True)["spec"],
            "status": dict(self.statuses.get(key) or {}),
        }

    def store(self, sink: Sink) -> SinkStatus:
        """The status store of `sink`."""
        return SinkStatus(self, sink)

    def caught_up(self, pipeline: Pipeline) -> bool:
        """Whether every Sink's store holds its whole log (as its mirrored group says), or the
        Sink cannot run (Stalled: it said why)."""
        for ref in pipeline.sinks:
            status = self.statuses.get(f"{ref.namespace}/{ref.name}") or {}
            if _stalled(status) is None and status.get("lag") != 0:
                return False
        return True

    def write(self, sink: Sink, update: Mapping[str, Any]) -> None:
        """Merge `update` into the Sink's status and save the file."""
        key = f"{sink.metadata.namespace}/{sink.metadata.name}"
        status = merged(self.statuses.get(key) or {}, update)
        status["table"] = sink.spec.postgres.table if sink.spec.postgres is not None else ""
        status["problem"] = _stalled(status)
        running = ((status.get("process") or {}).get("state")) == "RUNNING"
        status["ready"] = running and status["problem"] is None
        self.statuses[key] = status
        write_json(self.state_dir / SINKS_FILE, self.statuses)


@dataclass
class SinkStatus(MergedStatus):
    """One Sink's status in `sinks.json` (the `StatusStore` of `reconcile.ports`)."""

    statuses: SinkStatuses
    sink: Sink

    @property
    def status(self) -> dict[str, Any]:
        """The status as recorded."""
        meta = self.sink.metadata
        return dict(self.statuses.statuses.get(f"{meta.namespace}/{meta.name}") or {})

    def write(self, update: Mapping[str, Any]) -> None:
        """Merge `update` into the Sink's status and save the file."""
        self.statuses.write(self.sink, update)
