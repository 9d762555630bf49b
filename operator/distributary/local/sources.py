"""The Sources of a `distributary run`: their tables read from their databases, one Kafka Connect
worker carrying their connectors, and what became of them.

Before anything runs, each Source's tables are read from its database (`resolve_sources`): a
table's Log gets the table's columns and primary key, and a table that is missing, has no primary
key or has a column that cannot be carried exactly stops the run with a message naming the field
and the fix, as does a server or user that does not allow capture (`wal_level`, REPLICATION, the
right to make the publication). `validate --database` asks the same, in the same words. Then one
Connect worker (distributed mode, state under `<state dir>/connect`, its configs, offsets and
statuses in Kafka) runs one Debezium connector per Source; a second run finds the connectors and
their offsets and carries on from where the first stopped, in the same slot.

Each round (`LocalSources.reconcile`) applies a changed spec, pauses or resumes as the spec says,
restarts a failed task after the run's restart policy's back-off, reads the slot (its lag and the
WAL it keeps) and records the Source's status in `<state dir>/sources.json`. A Source no longer in
the files has its connector deleted and its slot and publication dropped; its Logs' topics stay.

A raised `spec.snapshot.epoch`, or a snapshot found interrupted, is a new revision beside the
serving one (`plan.source_revisions`): a second connector, slot and publication write new topics
while the first runs on; once caught up, the run's readers (views, Sinks, `tail`, `wait`) read
the new topics (`served`) and the old connector, slot and publication are dropped.

Passwords are read from a folder laid out as Kubernetes mounts a Secret (`<secrets>/<name>/<key>`)
and reach Connect as `${dir:...}` references it resolves itself: no password is written to Kafka,
the state folder or a log.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from distributary.api.source import SecretKey, Source
from distributary.backends.connect import ConnectClient, ConnectError
from distributary.databases.postgres import (
    DatabaseError,
    capture_rights,
    connect,
    drop_capture,
    slot_reading,
    table_shapes,
)
from distributary.errors import DistributaryError
from distributary.graph import Pipeline, Ref
from distributary.local.connect import ConnectWorker
from distributary.plan.kafka_connection import KafkaSecurity
from distributary.plan.pipeline import revision_topic
from distributary.plan.restarts import PartRestarts, RestartPolicy
from distributary.plan.source_plan import (
    CONNECTOR_FAILED,
    DATA_LOSS_RISK,
    DATABASE_UNREACHABLE,
    HEARTBEAT_RETENTION_MS,
    PAUSED,
    SNAPSHOTTING,
    ResolvedTable,
    SlotReading,
    TableShape,
    capture_problems,
    connector_config,
    connector_name,
    database_address,
    heartbeat_topic,
    resolve_table,
    resolved,
    wal_warning,
)
from distributary.plan.source_revisions import (
    CATCHING_UP,
    INTERRUPTED,
    RETIRED,
    SERVING,
    CapturePosition,
    RevisionStep,
    capture_position,
    interrupted,
    interrupted_message,
    revision_step,
    revision_topics,
    serving_topics,
)
from distributary.plan.source_revisions import catching_up as revision_catching_up
from distributary.plan.source_revisions import retired as retired_rows
from distributary.plan.topics import DesiredTopic, desired_topic
from distributary.sql import parse_ddl

SOURCES_FILE = "sources.json"
CONNECT_GROUP = "distributary-run-connect"
CONNECT_TOPICS = "distributary-run-connect"
SLOT_EVERY = 5.0  # seconds between readings of each slot
WORKER_RETRY = 10.0  # seconds before a worker that failed to start again is tried again
LOGGER = logging.getLogger("distributary.run")


class SourceError(DistributaryError, RuntimeError):
    """A Source cannot run; the message names the Source, the field and the fix."""


def secret_file(
    secrets_dir: Path | None,
    secret: SecretKey,
    label: str,
    field: str = "spec.postgres.passwordSecret",
) -> Path:
    """The file of a Secret's key in the secrets folder, laid out as Kubernetes mounts a
    Secret (`<dir>/<name>/<key>`); SourceError naming the resource, the field and the fix."""
    if secrets_dir is None:
        raise SourceError(
            f"{label}: {field} names Secret {secret.name!r}: give "
            f"--secrets DIR with the password in DIR/{secret.name}/{secret.key}"
        )
    path = secrets_dir / secret.name / secret.key
    if not path.is_file():
        raise SourceError(
            f"{label}: {field}: there is no file {path}: write the "
            f"password of Secret {secret.name!r}, key {secret.key!r}, there"
        )
    return path


def secret_value(secrets_dir: Path | None, secret: SecretKey, label: str) -> str:
    """The value of a Secret's key from the secrets folder, as Kubernetes would mount it."""
    path = secret_file(secrets_dir, secret, label)
    try:
        return path.read_text("utf-8").rstrip("\n")
    except OSError as exc:
        raise SourceError(f"{label}: spec.postgres.passwordSecret: {path}: {exc}") from None


def password_reference(secrets_dir: Path, secret: SecretKey) -> str:
    """What a connector config says instead of the password: Connect reads the file itself."""
    return f"${{dir:{(secrets_dir / secret.name).resolve()}:{secret.key}}}"


def resolve_sources(
    pipeline: Pipeline,
    secrets_dir: Path | None,
    *,
    say: Callable[[str], None] | None = None,
) -> tuple[Pipeline, list[str]]:
    """The pipeline with every Source's tables as their databases have them, and every problem
    found (each names the file, the Source, the field and the fix), including whether each
    server and user allow capture (`wal_level`, REPLICATION, making the publication), which a
    run would otherwise meet as a failing connector. `say` is told of each database asked."""
    if not pipeline.captures:
        return pipeline, []
    problems: list[str] = []
    replaced: dict[Ref, Source] = {}
    for ref, source in sorted(pipeline.captures.items()):
        file = pipeline.source(ref)
        label = f"{file}: {ref}" if file else str(ref)
        if say is not None:
            who = source.spec.postgres.user
            say(f"Source {ref.name}: reading {database_address(source)} as {who!r} ...")
        tables, found = _read_source(source, label, secrets_dir)
        problems.extend(found)
        if tables is not None:
            replaced[ref] = resolved(source, tables)
    rebuilt = pipeline.rebuilt(replaced)
    problems.extend(str(p) for p in rebuilt.problems if p not in pipeline.problems)
    return rebuilt, problems


def _read_source(
    source: Source, label: str, secrets_dir: Path | None
) -> tuple[list[ResolvedTable] | None, list[str]]:
    """One Source's tables as its database has them (None: it could not be asked), and the
    problems found, each opening with `label`."""
    try:
        password = secret_value(secrets_dir, source.spec.postgres.password_secret, label)
        with connect(source.spec.postgres, password) as db:
            shapes = table_shapes(db, [t.name for t in source.spec.tables])
            names = [t.name for t in source.spec.tables]
            rights = capture_rights(db, source.identifier, names)
    except SourceError as exc:
        return None, [str(exc)]
    except DatabaseError as exc:
        return None, [f"{label} {exc.field}: {exc}"]
    tables = [
        resolve_table(source, index, table, shapes.get(table.name))
        for index, table in enumerate(source.spec.tables)
    ]
    problems = [f"{label} {problem}" for t in tables for problem in t.problems]
    problems.extend(f"{label} {problem}" for problem in capture_problems(source, rights))
    return tables, problems


@dataclass
class _Watch:
    """What a run keeps in memory of one Source between rounds."""

    applied: dict[str, str] | None = None
    paused: bool | None = None
    restarts: PartRestarts = field(default_factory=PartRestarts)
    slot_due: float = 0.0
    slot: dict[str, Any] | None = None


@dataclass
class LocalSources:
    """The Sources of one run and the Connect worker that carries them."""

    pipeline: Pipeline
    state_dir: Path
    secrets_dir: Path | None
    say: Callable[[str], None]
    security: KafkaSecurity | None = None
    make_topics: Callable[[list[DesiredTopic]], None] = lambda topics: None
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)  # of failed connectors
    worker: ConnectWorker | None = None
    client: ConnectClient | None = None
    watches: dict[str, _Watch] = field(default_factory=dict)  # by connector
    made: set[str] = field(default_factory=set)  # revision topics made by this run
    # Connectors (re)started since their Source's last step: by this run's worker, or restarted
    # after a failure. One whose snapshot was not whole takes it again: not to be trusted.
    fresh: set[str] = field(default_factory=set)
    first_round: bool = True
    said: set[str] = field(default_factory=set)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    worker_due: float = 0.0  # when a worker that failed to start again is tried again

    @property
    def path(self) -> Path:
        """Where the Sources' statuses are kept."""
        return self.state_dir / SOURCES_FILE

    def start(self, bootstrap: str) -> None:
        """Start the worker (when a Source, or one removed since the last run, needs it), drop
        what removed Sources left, and apply every Source's connector."""
        self.statuses = self._load()
        current = {f"{r.namespace}/{r.name}" for r in self.pipeline.captures}
        removed = {k: v for k, v in self.statuses.items() if k not in current}
        if not self.pipeline.captures and not removed:
            return
        folder = self.state_dir / "connect"
        folder.mkdir(parents=True, exist_ok=True)
        self.say(f"Starting a Kafka Connect worker in {folder} ...")
        self.worker = ConnectWorker(
            folder,
            bootstrap,
            group_id=CONNECT_GROUP,
            topic_prefix=CONNECT_TOPICS,
            security=self.security,
            secrets_dir=self.secrets_dir,
        ).start()
        self.client = ConnectClient(self.worker.url)
        self.say(f"Kafka Connect serves on {self.worker.url}")
        for key, entry in sorted(removed.items()):
            self._remove(key, entry)
        self.reconcile()

    def _remove(self, key: str, entry: Mapping[str, Any]) -> None:
        """A Source gone from the files: its connectors deleted, their slots and publications
        dropped (its Logs' topics stay)."""
        assert self.client is not None
        source = _recorded_source(entry)
        rows = (entry.get("status") or {}).get("revisions") or [{"revision": 1}]
        for row in rows:
            if row.get("phase") == RETIRED:
                continue
            revision = int(row.get("revision") or 1)
            name = str(row.get("connector") or entry.get("connector") or "")
            if name:
                self.client.delete(name)
            if source is None:
                continue
            try:
                dropped = self._drop(source, revision, f"Source/{key}")
            except (SourceError, DatabaseError) as exc:
                slot = source.revision_identifier(revision)
                self.say(f"source {key}: removed from the files, but {exc}; drop its slot "
                         f"{slot!r} by hand or it keeps the server's WAL")  # fmt: skip
                return
            what = " and ".join(dropped) if dropped else "nothing left to drop"
            self.say(f"source {key}: removed from the files: {what} dropped; its Logs stay")
        self.statuses.pop(key, None)
        self._save()

    def _drop(self, source: Source, revision: int, label: str) -> list[str]:
        """Drop a revision's slot and publication; what was dropped."""
        password = secret_value(self.secrets_dir, source.spec.postgres.password_secret, label)
        identifier = source.revision_identifier(revision)
        with connect(source.spec.postgres, password) as db:
            return drop_capture(db, identifier, identifier)

    def reconcile(self) -> None:
        """One round over every Source: apply, pause or resume, restart what failed, observe.
        A worker that died is started again first (its connectors resume from their committed
        offsets: exactly once)."""
        if self.client is None or self.worker is None:
            return
        code = self.worker.exit_code()
        if code is not None or self.worker_due:
            if time.monotonic() < self.worker_due:
                return
            if code is not None:
                self.say(f"Kafka Connect exited (code {code}; see {self.worker.log_file}); "
                         "starting it again")  # fmt: skip
            self.worker.stop()
            try:
                self.worker.start()
            except ConnectError as exc:  # tried again after a while; the views run on
                self.worker_due = time.monotonic() + WORKER_RETRY
                self.say(f"{exc}; trying again in {WORKER_RETRY:.0f}s")
                return
            self.worker_due = 0.0
            self.watches.clear()  # configs and pauses are applied again
            self.first_round = True  # its connectors start again
        if self.first_round:
            self.first_round = False
            self.fresh |= {
                str(row.get("connector"))
                for entry in self.statuses.values()
                for row in (entry.get("status") or {}).get("revisions") or []
            }
        for ref, source in sorted(self.pipeline.captures.items()):
            try:
                self._reconcile(ref, source)
            except (ConnectError, SourceError) as exc:
                self._say_once(f"source {ref.name}: {exc}")
        self._save()

    def _reconcile(self, ref: Ref, source: Source) -> None:
        assert self.client is not None
        step = self._step(ref, source)
        states = {revision: self._run_connector(ref, source, revision, step)
                  for revision in step.running}  # fmt: skip
        watch = self.watches.setdefault(connector_name(source, step.serving), _Watch())
        self._observe_slot(ref, source, step.serving, watch)
        connector_state, tasks = states[step.serving]
        self._record(ref, source, step, connector_state, tasks, watch)

    def _step(self, ref: Ref, source: Source) -> RevisionStep:
        """The revisions' next step, recorded before it is carried out; a revision retired is
        dropped here (and recorded so)."""
        assert self.client is not None
        key = f"{ref.namespace}/{ref.name}"
        status = (self.statuses.get(key) or {}).get("status") or {}
        recorded = list(status.get("revisions") or [])
        logs = self.pipeline.table_logs(source)
        positions: dict[int, CapturePosition | None] = {}
        slots: dict[int, int | None] = {}
        restarted = set()
        for row in recorded:
            if row.get("phase") in (SERVING, CATCHING_UP):
                revision, name = int(row["revision"]), str(row["connector"])
                try:
                    offsets = self.client.offsets(name)
                except ConnectError:  # not made yet
                    offsets = None
                positions[revision] = position = capture_position(offsets)
                if name in self.fresh:
                    restarted.add(revision)
                    self.fresh.discard(name)
                if revision in restarted or (position is not None and not position.streaming):
                    slots[revision] = self._confirmed(ref, source, revision)
        step = revision_step(source, logs, recorded, positions, _now(), slots, restarted)
        broken = interrupted(step.rows)
        if broken is not None:
            self._say_once(f"source {ref.name}: warning: {interrupted_message(broken)}")
        self._remember(ref, source, step.rows, step.serving)
        if step.problem is not None:
            self._say_once(f"source {ref.name}: {step.problem}")
        if step.cut_over:
            topics = ", ".join(serving_topics(step.rows).values())
            self.say(f"source {ref.name}: revision {step.serving} caught up: the table Logs "
                     f"serve {topics} from now on")  # fmt: skip
        rows = step.rows
        for revision in step.retire:
            self.client.delete(connector_name(source, revision))
            self.watches.pop(connector_name(source, revision), None)
            dropped = self._drop(source, revision, str(ref))
            rows = retired_rows(rows, revision)
            self._remember(ref, source, rows, step.serving)
            what = " and ".join(dropped) if dropped else "nothing left to drop"
            self.say(f"source {ref.name}: revision {revision} retired: its connector deleted, "
                     f"{what} dropped; its topics stay")  # fmt: skip
        return RevisionStep(rows, step.serving, step.catching_up, (), step.cut_over, step.problem)

    def _confirmed(self, ref: Ref, source: Source, revision: int) -> int | None:
        """The position a revision's slot confirmed (None: no slot, or it could not be read)."""
        try:
            password = secret_value(
                self.secrets_dir, source.spec.postgres.password_secret, str(ref)
            )
            with connect(source.spec.postgres, password) as db:
                reading, _ = slot_reading(db, source.revision_identifier(revision))
        except (SourceError, DatabaseError):
            return None
        return reading.confirmed

    def _remember(self, ref: Ref, source: Source, rows: Any, serving: int) -> None:
        key = f"{ref.namespace}/{ref.name}"
        entry = self.statuses.setdefault(key, {"namespace": ref.namespace, "name": ref.name})
        entry["spec"] = source.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        status = entry.setdefault("status", {})
        status["revisions"] = list(rows)
        status["servingRevision"] = serving
        self._save()

    def _run_connector(
        self, ref: Ref, source: Source, revision: int, step: RevisionStep
    ) -> tuple[str, list[Any]]:
        """Apply a revision's connector as the spec says (its topics made first), paused or
        running, a failed one restarted with back-off; its state and its tasks' as Connect
        reported them."""
        assert self.client is not None
        name = connector_name(source, revision)
        watch = self.watches.setdefault(name, _Watch())
        if revision > 1:
            self._make_revision_topics(source, revision)
        config = self._config(source, revision)
        if watch.applied != config:
            self.client.put_config(name, config)
            watch.applied = config
        wanted = source.spec.paused
        if watch.paused != wanted:
            (self.client.pause if wanted else self.client.resume)(name)
            watch.paused = wanted
            if revision == step.serving:
                self.say(f"source {ref.name}: {'paused' if wanted else 'reading changes'}")
            else:
                self.say(f"source {ref.name}: revision {revision} takes a new snapshot beside "
                         f"revision {step.serving}")  # fmt: skip
        state = self.client.status(name) or {}
        tasks = state.get("tasks") or []
        failed = [t for t in tasks if t.get("state") == "FAILED"]
        connector_state = str((state.get("connector") or {}).get("state") or "UNASSIGNED")
        if connector_state == "FAILED" or failed:
            self._restart_later(ref, watch, name, state, failed)
        elif (
            connector_state == "RUNNING"
            and tasks
            and all(t.get("state") == "RUNNING" for t in tasks)
        ):
            watch.restarts = PartRestarts()
        return connector_state, tasks

    def _make_revision_topics(self, source: Source, revision: int) -> None:
        """A revision's topics, as its Logs' own (compacted, keyed, partitioned), and its
        heartbeat topic: Connect waits for a topic that does not exist rather than fail."""
        heartbeat = heartbeat_topic(source, revision)
        if heartbeat in self.made:
            return
        logs = self.pipeline.table_logs(source)
        wanted = [desired_topic(log, topic=revision_topic(log, revision)) for log in logs.values()]
        retention = {"retention.ms": str(HEARTBEAT_RETENTION_MS)}
        wanted.append(DesiredTopic(heartbeat, 1, None, retention))
        self.make_topics(wanted)
        self.made.add(heartbeat)

    def _config(self, source: Source, revision: int = 1) -> dict[str, str]:
        assert self.secrets_dir is not None  # resolve_sources needed the password
        topics = revision_topics(source, self.pipeline.table_logs(source), revision)
        password = password_reference(self.secrets_dir, source.spec.postgres.password_secret)
        return connector_config(source, topics, password, revision)

    def served(self) -> dict[str, str]:
        """The topic each table Log serves now, by Log name (a re-snapshot's, once caught up)."""
        found = {}
        for ref, source in self.pipeline.captures.items():
            status = (self.statuses.get(f"{ref.namespace}/{ref.name}") or {}).get("status") or {}
            topics = serving_topics(status.get("revisions") or [])
            for table, log in self.pipeline.table_logs(source).items():
                found[log.metadata.name] = topics.get(table, log.topic)
        return found

    def catching_up(self) -> bool:
        """Whether a Source's new revision is still taking its snapshot or catching up."""
        return any(
            revision_catching_up((entry.get("status") or {}).get("revisions") or [])
            for entry in self.statuses.values()
        )

    def _restart_later(
        self, ref: Ref, watch: _Watch, name: str, state: Mapping[str, Any], failed: list[Any]
    ) -> None:
        assert self.client is not None
        trace = str((failed[0] if failed else state.get("connector") or {}).get("trace") or "")
        first = trace.strip().splitlines()[0] if trace.strip() else "no reason given"
        delay, now = watch.restarts.failed(time.monotonic(), self.restart_policy)
        if delay is not None:
            log = self.worker.log_file if self.worker else "the worker's log"
            self.say(f"source {ref.name}: the connector failed ({first}); restarting it in "
                     f"{delay:.0f}s (see {log})")  # fmt: skip
        elif now:
            self.client.restart(name)
            self.fresh.add(name)

    def _observe_slot(self, ref: Ref, source: Source, revision: int, watch: _Watch) -> None:
        now = time.monotonic()
        if now < watch.slot_due:
            return
        watch.slot_due = now + SLOT_EVERY
        try:
            password = secret_value(
                self.secrets_dir, source.spec.postgres.password_secret, str(ref)
            )
            with connect(source.spec.postgres, password) as db:
                reading, seconds = slot_reading(db, source.revision_identifier(revision))
                shapes = table_shapes(db, [t.name for t in source.spec.tables])
        except (SourceError, DatabaseError) as exc:
            watch.slot = {"error": str(exc)}
            self._say_once(f"source {ref.name}: {exc}")
            return
        watch.slot = {
            "name": source.revision_identifier(revision),
            "active": reading.active if reading.exists else None,
            "retainedWalBytes": reading.retained_bytes,
            "lagBytes": reading.lag_bytes,
            "lagSeconds": seconds,
        }
        warning = wal_warning(source, reading)
        if warning is not None:
            self._say_once(f"source {ref.name}: warning: {warning}")
        for table, log in self.pipeline.table_logs(source).items():
            self._say_drift(
                ref, table, log.metadata.name, log.spec.record_schema, shapes.get(table)
            )

    def _say_drift(
        self, ref: Ref, table: str, log: str, columns: str | None, shape: TableShape | None
    ) -> None:
        """Say once when a table has columns its Log's schema does not (added while running)."""
        if shape is None:
            self._say_once(f"source {ref.name}: warning: table {table} is gone from the database "
                           "(or may no longer be read): no more changes of it arrive")  # fmt: skip
            return
        known = {c.name.lower() for c in parse_ddl(columns)} if columns else set()
        new = [c.name for c in shape.columns if c.name.lower() not in known]
        if known and new:
            self._say_once(
                f"source {ref.name}: table {table} has new column(s) {', '.join(new)}: its "
                f"records carry them from the first change on; Log {log}'s schema gains them "
                "when the run starts again (views reading it then reprocess)"
            )

    def _record(
        self,
        ref: Ref,
        source: Source,
        step: RevisionStep,
        connector_state: str,
        tasks: list[Any],
        watch: _Watch,
    ) -> None:
        key = f"{ref.namespace}/{ref.name}"
        name = connector_name(source, step.serving)
        slot = watch.slot or {}
        running = (
            connector_state == "RUNNING"
            and bool(tasks)
            and all(t.get("state") == "RUNNING" for t in tasks)
        )
        if "error" in slot:
            ready = ("False", DATABASE_UNREACHABLE, str(slot["error"]))
        elif source.spec.paused:
            ready = ("False", PAUSED, "paused by spec.paused; changes wait in the slot")
        elif connector_state == "FAILED" or any(t.get("state") == "FAILED" for t in tasks):
            failed = "the connector failed; it is restarted with back-off"
            ready = ("False", CONNECTOR_FAILED, failed)
        elif step.problem is not None:
            ready = ("False", "EpochRefused", step.problem)
        elif step.catching_up is not None:
            ready = ("False", SNAPSHOTTING, f"revision {step.catching_up} takes a new snapshot "
                     f"beside revision {step.serving}, which serves")  # fmt: skip
        elif running:
            ready = ("True", "Capturing", "the connector reads the slot")
        else:
            ready = ("False", "Starting", f"the connector is {connector_state}")
        conditions = [_condition("Ready", *ready)]
        reading = slot.get("retainedWalBytes")
        if isinstance(reading, int):
            risk = wal_warning(source, SlotReading(True, bool(slot.get("active")), reading))
            if risk is not None:
                conditions.append(_condition(DATA_LOSS_RISK, "True", DATA_LOSS_RISK, risk))
        broken = interrupted(step.rows)
        if broken is not None:
            message = interrupted_message(broken)
            conditions.append(_condition(INTERRUPTED, "True", INTERRUPTED, message))
        topics = serving_topics(step.rows)
        tables = [
            {"name": table, "log": log.metadata.name, "topic": topics.get(table, log.topic),
             "columns": log.spec.record_schema, "key": list(log.spec.key or [])}
            for table, log in self.pipeline.table_logs(source).items()
        ]  # fmt: skip
        self.statuses[key] = {
            "namespace": ref.namespace,
            "name": ref.name,
            "connector": name,
            "spec": source.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
            "status": {
                "conditions": conditions,
                "connector": name,
                "connectorState": connector_state,
                "tables": tables,
                "servingRevision": step.serving,
                "revisions": list(step.rows),
                "slot": {k: v for k, v in slot.items() if k != "error"} or None,
                "publication": source.revision_identifier(step.serving),
            },
        }

    def _say_once(self, text: str) -> None:
        if text not in self.said:
            self.said.add(text)
            self.say(text)

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise SourceError(
                f"{self.path} cannot be read ({exc}): move it away to start the Sources afresh "
                "(their connectors and slots are found again)"
            ) from None
        return dict(data) if isinstance(data, dict) else {}

    def _save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.statuses, indent=2, sort_keys=True)
        fd, temporary = tempfile.mkstemp(dir=self.state_dir, prefix=".sources-")
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(temporary, self.path)

    def stop(self) -> None:
        """Stop the worker (its connectors commit their offsets; the slots stay)."""
        if self.worker is not None:
            self.say("Stopping Kafka Connect ...")
            self.worker.stop()
            self.worker = None
            self.client = None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
    now = _now()
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now}  # fmt: skip


def _recorded_source(entry: Mapping[str, Any]) -> Source | None:
    """The Source a status entry was recorded from (to find its database again)."""
    metadata = {"namespace": entry.get("namespace"), "name": entry.get("name")}
    try:
        return Source.model_validate({"metadata": metadata, "spec": entry.get("spec")})
    except ValueError:
        LOGGER.debug("an unreadable Source entry in %s", SOURCES_FILE)
        return None
