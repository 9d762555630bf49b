"""The Sinks of a `distributary run`: one process each (`python -m distributary.sinks`), started
once their topic exists, started again when they die, and observed through their consumer groups.

A Sink's process keeps its table and its position in one database transaction, so it can be
killed at any point and started again: it carries on from the position the table holds. A process
that refuses its table (a column of another type, another key) exits with code 3 and is not
started again: the Sink is Stalled, saying why, until its spec or its table changes. A Log whose
serving topic changes under a Sink (a view's cutover) gets a new process on the new topic: it
fills the new revision's table beside the one readers read (`<table>__r<N>`) and, once whole,
switches readers to it in one transaction (`sinks.postgres.switch`; a Redis Sink fills keys
beside and switches them in one script, `sinks.redis.SWITCH`); readers never see a half-built
revision.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distributary import processes
from distributary.api.sink import Sink
from distributary.graph import Pipeline, Ref
from distributary.kafka.admin import KafkaAdmin
from distributary.local.sources import SourceError, secret_file
from distributary.plan.kafka_connection import KafkaSecurity
from distributary.plan.sink_plan import SinkRun, sink_run
from distributary.sql import SqlError

SINKS_FILE = "sinks.json"
REFUSED = 3  # a Sink process's exit code when it refuses its table
RESTART_AFTER = (1.0, 5.0, 15.0, 60.0)  # while a process fails without making progress
OBSERVE_EVERY = 2.0


@dataclass
class _Process:
    """One Sink's process and what the run keeps of it between rounds."""

    run: SinkRun
    process: processes.Supervised | None = None
    failures: int = 0
    due: float = 0.0
    stalled: str | None = None
    position: dict[int, int] = field(default_factory=dict)  # last observed


@dataclass
class LocalSinks:
    """The Sinks of one run and their processes."""

    pipeline: Pipeline
    state_dir: Path
    secrets_dir: Path | None
    say: Callable[[str], None]
    security: KafkaSecurity | None = None
    admin: KafkaAdmin | None = None
    processes: dict[Ref, _Process] = field(default_factory=dict)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    said: set[str] = field(default_factory=set)
    observed: float = 0.0
    blocked: set[Ref] = field(default_factory=set)  # cannot start until the files change

    @property
    def folder(self) -> Path:
        """Where the Sinks' specs, logs and pids are."""
        return self.state_dir / "sinks"

    def reconcile(self, bootstrap: str, served: Callable[[str, str], str]) -> None:
        """Start what should run and does not (its topic made), restart what died, observe.
        `served(namespace, log)` is the topic a Log serves now."""
        for ref, sink in sorted(self.pipeline.sinks.items()):
            topic = served(ref.namespace, sink.spec.log)
            entry = self.processes.get(ref)
            if entry is not None and entry.run.topic != topic and entry.stalled is None:
                # A new revision: its process fills the table (or keys) beside the ones readers
                # read, then switches them over at once (`sinks.postgres.switch`,
                # `sinks.redis.SWITCH`).
                where = entry.run.table if sink.spec.postgres else f"{entry.run.key_prefix}<key>"
                self._say_once(
                    f"sink {ref.name}: Log {sink.spec.log} now serves {topic}: filling it "
                    f"beside {where}, which readers read until it is whole"
                )
                self._end(entry)
                entry = None
            if entry is None:
                entry = self._prepare(ref, sink, topic, bootstrap)
                if entry is None:
                    continue
            self._keep_running(ref, entry)
        if time.monotonic() - self.observed >= OBSERVE_EVERY:
            self.observed = time.monotonic()
            self._observe()

    def caught_up(self) -> bool:
        """Whether every Sink's store holds its whole log (as its mirrored group says), or the
        Sink cannot run (it said why)."""
        for ref in self.pipeline.sinks:
            entry = self.processes.get(ref)
            if ref in self.blocked or (entry is not None and entry.stalled is not None):
                continue
            status = self.statuses.get(f"{ref.namespace}/{ref.name}") or {}
            if entry is None or status.get("lag") != 0:
                return False
        return True

    def _prepare(self, ref: Ref, sink: Sink, topic: str, bootstrap: str) -> _Process | None:
        log = self.pipeline.logs.get(Ref.log(sink.spec.log, ref.namespace))
        if log is None or self.admin is None:
            return None
        if not self.admin.list_partitions([topic]).get(topic):
            return None  # the topic is made by the reconcile of its writer; next round
        label = f"sink {ref.name}"
        if not log.spec.record_schema:
            self.blocked.add(ref)
            self._say_once(
                f"{label}: Log {log.metadata.name} has no schema: the table is made from the "
                "Log's columns; declare spec.schema on the Log"
            )
            return None
        store = sink.spec.postgres or sink.spec.redis
        secret = store.password_secret if store is not None else None
        field_name = "postgres" if sink.spec.postgres is not None else "redis"
        password = None
        if secret is not None:
            try:
                password = secret_file(self.secrets_dir, secret, label,
                                       f"spec.{field_name}.passwordSecret")  # fmt: skip
            except SourceError as exc:
                self._say_once(str(exc))
                self.blocked.add(ref)
                return None
        try:
            run = sink_run(sink, log.spec.record_schema, log.spec.key or [], topic, bootstrap,
                           str(password.resolve()) if password else None,
                           self.security)  # fmt: skip
        except SqlError as exc:
            self._say_once(f"{label}: Log {log.metadata.name}'s schema: {exc}")
            self.blocked.add(ref)
            return None
        if self.pipeline.is_derived(Ref.log(sink.spec.log, ref.namespace)):
            run = self._columns_of_topic(ref, run)
        entry = _Process(run)
        self.processes[ref] = entry
        return entry

    def _columns_of_topic(self, ref: Ref, run: SinkRun) -> SinkRun:
        """A view's output topic holds one revision's rows, of that revision's columns: a Sink
        that read the topic before keeps the columns it had then. The files may already define
        the next revision (edited, catching up beside), whose columns are for its own topic."""
        try:
            before = SinkRun.model_validate_json(self._file(ref, "json").read_text("utf-8"))
        except (OSError, ValueError):
            return run
        if before.topic != run.topic:
            return run
        return run.model_copy(update={"columns": before.columns, "key": before.key})

    def _file(self, ref: Ref, suffix: str) -> Path:
        """The Sink's spec (`json`), process id (`pid`) or log (`log`) in the state folder."""
        return self.folder / f"{ref.namespace}.{ref.name}.{suffix}"

    def _keep_running(self, ref: Ref, entry: _Process) -> None:
        if entry.stalled is not None:
            return
        process = entry.process
        if process is not None and process.poll() is None:
            return
        now = time.monotonic()
        if process is not None:  # it exited
            code = process.returncode
            entry.process = None
            last = _last_line(self._log(ref))
            if code == REFUSED:
                self._stall(ref, entry, last or "it refused its table")
                return
            delay = RESTART_AFTER[min(entry.failures, len(RESTART_AFTER) - 1)]
            entry.failures += 1
            entry.due = now + delay
            self.say(f"sink {ref.name}: its process exited (code {code}: {last or 'no reason'}); "
                     f"starting it again in {delay:.0f}s")  # fmt: skip
            return
        if now < entry.due:
            return
        self._start(ref, entry)

    def _start(self, ref: Ref, entry: _Process) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        spec = self._file(ref, "json")
        spec.write_text(entry.run.model_dump_json(indent=2))
        entry.process = processes.start(
            [sys.executable, "-m", "distributary.sinks", "--spec", str(spec)], log=self._log(ref)
        )
        self._file(ref, "pid").write_text(f"{entry.process.pid}\n")
        if entry.failures == 0:
            self.say(f"sink {ref.name}: {entry.run.topic} -> {entry.run.table} "
                     f"({entry.run.mode})")  # fmt: skip

    def _log(self, ref: Ref) -> Path:
        return self._file(ref, "log")

    def _stall(self, ref: Ref, entry: _Process, why: str) -> None:
        entry.stalled = why
        self._end(entry)
        self._say_once(f"sink {ref.name}: Stalled: {why}")

    @staticmethod
    def _end(entry: _Process) -> None:
        """Stop an entry's process (it finishes its transaction)."""
        if entry.process is not None and entry.process.poll() is None:
            entry.process.stop(30)

    def _observe(self) -> None:
        if self.admin is None:
            return
        for ref, entry in sorted(self.processes.items()):
            run = entry.run
            try:
                lag = self.admin.lag(run.group, [run.topic]).get(run.topic, {})
                position = self.admin.committed(run.group).get(run.topic, {})
            except Exception:  # observed again next round
                continue
            if position != entry.position:  # it makes progress: a later failure starts afresh
                entry.position, entry.failures = dict(position), 0
            ready = entry.stalled is None and entry.process is not None
            self.statuses[f"{ref.namespace}/{ref.name}"] = {
                "topic": run.topic,
                "table": run.table,
                "position": {str(p): o for p, o in sorted(position.items())},
                "lag": sum(lag.values()) if lag else None,
                "ready": ready,
                "problem": entry.stalled,
            }
        self._save()

    def _say_once(self, text: str) -> None:
        if text not in self.said:
            self.said.add(text)
            self.say(text)

    def _save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=self.state_dir, prefix=".sinks-")
        with os.fdopen(fd, "w") as out:
            json.dump(self.statuses, out, indent=2, sort_keys=True)
        os.replace(temporary, self.state_dir / SINKS_FILE)

    def stop(self) -> None:
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
