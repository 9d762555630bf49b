"""The Sources of a `distributary run`: their tables read from their databases, one Kafka Connect
worker carrying their connectors, and their statuses in the state folder.

Before anything runs, each Source's tables are read from its database (`resolve_sources`): a
table's Log gets the table's columns and primary key, and a table that is missing, has no primary
key or has a column that cannot be carried exactly stops the run with a message naming the field
and the fix, as does a server or user that does not allow capture (`wal_level`, REPLICATION, the
right to make the publication). `validate --database` asks the same, in the same words. Then one
Connect worker (distributed mode, state under `<state dir>/connect`, its configs, offsets and
statuses in Kafka) runs the Sources' Debezium connectors; a second run finds the connectors and
their offsets and carries on from where the first stopped, in the same slot.

What happens to each Source is decided by its one reconcile, `reconcile.source`, as under the
operator: the run gives it this worker's connectors, the databases, the secrets folder, and a
status store kept in `<state dir>/sources.json` (`SourceStatuses`), where the revisions' rows are
written ahead of a cutover or a retirement. What is the run's own is here: the worker (started
again when it dies; its connectors resume from their committed offsets), the Sources removed
from the files (their connectors deleted, their slots and publications dropped, their Logs'
topics kept), and a table that gains columns while the run goes on (said; its Log's schema gains
them when the run starts again).

Passwords are read from a folder laid out as Kubernetes mounts a Secret (`<secrets>/<name>/<key>`)
and reach Connect as `${dir:...}` references it resolves itself: no password is written to Kafka,
the state folder or a log.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distributary.api.source import SecretKey, Source
from distributary.backends.base import SecretMissingError
from distributary.backends.captures import PostgresCaptures
from distributary.backends.connect import ConnectError, RestConnectors
from distributary.databases.postgres import DatabaseError, capture_rights, connect, table_shapes
from distributary.errors import DistributaryError
from distributary.graph import Pipeline, Ref
from distributary.local.connect import ConnectWorker
from distributary.local.state import MergedStatus, write_json
from distributary.plan.access.kafka_connection import KafkaSecurity
from distributary.plan.applications.restarts import RoundMemory
from distributary.plan.pipelines.pipeline import SOURCE_LABEL
from distributary.plan.sources.source_plan import (
    CONNECTOR_FAILED,
    DATABASE_UNREACHABLE,
    PAUSED,
    SNAPSHOTTING,
    ResolvedTable,
    capture_problems,
    database_address,
    resolve_table,
    resolved,
)
from distributary.plan.sources.source_revisions import RETIRED, serving_topics
from distributary.plan.sources.source_revisions import catching_up as revision_catching_up
from distributary.plan.status.status_patch import merged
from distributary.sql import parse_ddl

SOURCES_FILE = "sources.json"
CONNECT_GROUP = "distributary-run-connect"
CONNECT_TOPICS = "distributary-run-connect"
# What a run says of a Source's conditions (reasons), besides Ready: whatever makes it Stalled;
# of its work under way, what people wait for or act on.
SAID: dict[str, tuple[str, ...] | None] = {
    "Stalled": None,
    "Reconciling": (DATABASE_UNREACHABLE, SNAPSHOTTING, CONNECTOR_FAILED),
}
ROUND_EVERY = 2.0  # seconds between reconciles of the Sources (each asks the database)
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


def secret_value(
    secrets_dir: Path | None,
    secret: SecretKey,
    label: str,
    field_name: str = "spec.postgres.passwordSecret",
) -> str:
    """The value of a Secret's key from the secrets folder, as Kubernetes would mount it."""
    path = secret_file(secrets_dir, secret, label, field_name)
    try:
        return path.read_text("utf-8").rstrip("\n")
    except OSError as exc:
        raise SourceError(f"{label}: {field_name}: {path}: {exc}") from None


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
    rebuilt.declared_captures = {**pipeline.captures, **pipeline.declared_captures}
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
class LocalSources:
    """The Sources of one run, the Connect worker that carries them, and their statuses."""

    pipeline: Pipeline
    state_dir: Path
    secrets_dir: Path | None
    say: Callable[[str], None]
    security: KafkaSecurity | None = None
    worker: ConnectWorker | None = None
    connectors: RestConnectors | None = None
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)  # sources.json, by key
    # Connectors restarted, topics made: what no status keeps (`Services.memory`).
    memory: RoundMemory = field(default_factory=RoundMemory)
    said: set[str] = field(default_factory=set)
    ready: dict[str, str] = field(default_factory=dict)  # the Ready reason said, by key
    worker_due: float = 0.0  # when a worker that failed to start again is tried again
    next_round: float = 0.0  # when the Sources are reconciled next

    @property
    def path(self) -> Path:
        """Where the Sources' statuses are kept."""
        return self.state_dir / SOURCES_FILE

    def start(self, bootstrap: str) -> None:
        """Start the worker (when a Source, or one removed since the last run, needs it) and
        drop what removed Sources left."""
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
        self.connectors = RestConnectors(self.worker.url)
        self.say(f"Kafka Connect serves on {self.worker.url}")
        self._started_worker()
        for key, entry in sorted(removed.items()):
            self._remove(key, entry)

    @property
    def connect_secrets(self) -> str:
        """How the worker reads a password: the secrets folder (`password_reference`)."""
        return str(self.secrets_dir.resolve()) if self.secrets_dir is not None else ""

    def secret(self, namespace: str, secret: SecretKey, field_name: str) -> str:
        """The value of a Secret's key from the secrets folder (`Services.secret`)."""
        try:
            return secret_value(self.secrets_dir, secret, f"Source in {namespace}", field_name)
        except SourceError as exc:
            raise SecretMissingError(str(exc)) from None

    def _started_worker(self) -> None:
        """The worker (re)started: its connectors start again, and a snapshot one was taking
        is not to be trusted."""
        self.memory.restarted |= {
            str(row.get("connector"))
            for entry in self.statuses.values()
            for row in (entry.get("status") or {}).get("revisions") or []
            if row.get("connector")
        }

    def due(self) -> bool:
        """Whether the Sources are reconciled this round: every `ROUND_EVERY` seconds, with a
        worker that serves (one that died is started again first)."""
        if self.worker is None or not self.pipeline.captures:
            return False
        now = time.monotonic()
        if now < self.next_round:
            return False
        self.next_round = now + ROUND_EVERY
        code = self.worker.exit_code()
        if code is None and not self.worker_due:
            return True
        if now < self.worker_due:
            return False
        if code is not None:
            self.say(f"Kafka Connect exited (code {code}; see {self.worker.log_file}); "
                     "starting it again")  # fmt: skip
        self.worker.stop()
        try:
            self.worker.start()
        except ConnectError as exc:  # tried again after a while; the views run on
            self.worker_due = now + WORKER_RETRY
            self.say(f"{exc}; trying again in {WORKER_RETRY:.0f}s")
            return False
        self.worker_due = 0.0
        self._started_worker()
        return True

    def read(self, source: Source) -> dict[str, Any]:
        """The Source as its reconcile reads it: its spec as the files declare it (the
        reconcile reads the tables' columns from the database, as the operator's does), its
        status from the state folder."""
        source = self.pipeline.declared_captures.get(Ref.of(source), source)
        meta = source.metadata
        key = f"{meta.namespace}/{meta.name}"
        return {
            "apiVersion": source.api_version,
            "kind": source.kind,
            "metadata": {
                "name": meta.name,
                "namespace": meta.namespace,
                "uid": f"local:{key}",
                "generation": 1,
            },
            "spec": source.model_dump(mode="json", by_alias=True, exclude_none=True)["spec"],
            "status": self.status(key),
        }

    def status(self, key: str) -> dict[str, Any]:
        """A Source's status as recorded."""
        return dict((self.statuses.get(key) or {}).get("status") or {})

    def store(self, source: Source) -> SourceStatus:
        """The status store of `source`."""
        return SourceStatus(self, source)

    def write(self, source: Source, update: Mapping[str, Any]) -> None:
        """Merge `update` into the Source's status and save the file."""
        meta = source.metadata
        key = f"{meta.namespace}/{meta.name}"
        status = merged(self.status(key), update)
        self.statuses[key] = {
            "namespace": meta.namespace,
            "name": meta.name,
            "connector": status.get("connector"),
            "spec": source.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
            "status": status,
        }
        self._save()

    def say_new_columns(self, manifests: Sequence[Mapping[str, Any]]) -> None:
        """Say once of each table Log whose table has columns its schema has not (added while
        the run goes on): its records carry them, its schema gains them at the next start."""
        for manifest in manifests:
            meta = manifest.get("metadata") or {}
            ref = Ref.log(str(meta.get("name")), str(meta.get("namespace")))
            log = self.pipeline.logs.get(ref)
            columns = str((manifest.get("spec") or {}).get("schema") or "")
            if log is None or not log.spec.record_schema or not columns:
                continue
            known = {c.name.lower() for c in parse_ddl(log.spec.record_schema)}
            new = [c.name for c in parse_ddl(columns) if c.name.lower() not in known]
            source = str((meta.get("labels") or {}).get(SOURCE_LABEL) or "")
            table = self._table_of(ref, source)
            if new and table:
                self._say_once(
                    f"source {source}: table {table} has new column(s) {', '.join(new)}: its "
                    f"records carry them from the first change on; Log {ref.name}'s schema "
                    "gains them when the run starts again (views reading it then reprocess)"
                )

    def _table_of(self, log: Ref, source_name: str) -> str | None:
        source = self.pipeline.captures.get(Ref("Source", log.namespace, source_name))
        if source is None:
            return None
        tables = self.pipeline.table_logs(source)
        return next((t for t, found in tables.items() if found.metadata.name == log.name), None)

    def say_state(self, source: Source) -> None:
        """Say when a Source starts reading changes or is paused, what new snapshot it takes,
        and (once each) why it is Stalled or its database does not answer."""
        name = source.metadata.name
        key = f"{source.metadata.namespace}/{name}"
        conditions = {c.get("type"): c for c in self.status(key).get("conditions") or []}
        ready = conditions.get("Ready") or {}
        if ready.get("status") == "True" and self.ready.get(key) != ready.get("reason"):
            self.ready[key] = str(ready.get("reason"))
            doing = "paused" if ready.get("reason") == PAUSED else "reading changes"
            self.say(f"source {name}: {doing}")
        elif ready.get("status") != "True":
            self.ready.pop(key, None)
        for kind in ("Stalled", "Reconciling"):
            condition = conditions.get(kind) or {}
            reason, allowed = condition.get("reason"), SAID[kind]
            if condition.get("status") != "True" or (allowed is not None and reason not in allowed):
                continue
            message = str(condition.get("message") or reason)
            self._say_once(f"source {name}: {reason}: {message}")

    def _remove(self, key: str, entry: Mapping[str, Any]) -> None:
        """A Source gone from the files: its connectors deleted, their slots and publications
        dropped (its Logs' topics stay)."""
        assert self.connectors is not None
        source = _recorded_source(entry)
        rows = (entry.get("status") or {}).get("revisions") or [{"revision": 1}]
        for row in rows:
            if row.get("phase") == RETIRED:
                continue
            revision = int(row.get("revision") or 1)
            name = str(row.get("connector") or entry.get("connector") or "")
            if name:
                self.connectors.delete(name, key.split("/", 1)[0])
            if source is None:
                continue
            try:
                password = secret_value(
                    self.secrets_dir, source.spec.postgres.password_secret, f"Source/{key}"
                )
                dropped = PostgresCaptures().drop(source, password, revision)
            except (SourceError, DatabaseError) as exc:
                slot = source.revision_identifier(revision)
                self.say(f"source {key}: removed from the files, but {exc}; drop its slot "
                         f"{slot!r} by hand or it keeps the server's WAL")  # fmt: skip
                return
            what = " and ".join(dropped) if dropped else "nothing left to drop"
            self.say(f"source {key}: removed from the files: {what} dropped; its Logs stay")
        self.statuses.pop(key, None)
        self._save()

    def served(self) -> dict[str, str]:
        """The topic each table Log serves now, by Log name (a re-snapshot's, once caught up)."""
        found = {}
        for ref, source in self.pipeline.captures.items():
            status = self.status(f"{ref.namespace}/{ref.name}")
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
        write_json(self.path, self.statuses)

    def stop(self) -> None:
        """Stop the worker (its connectors commit their offsets; the slots stay)."""
        if self.worker is not None:
            self.say("Stopping Kafka Connect ...")
            self.worker.stop()
            self.worker = None
            self.connectors = None


@dataclass
class SourceStatus(MergedStatus):
    """One Source's status in `sources.json` (the `StatusStore` of `reconcile.ports`)."""

    sources: LocalSources
    source: Source

    @property
    def status(self) -> dict[str, Any]:
        """The status as recorded."""
        meta = self.source.metadata
        return self.sources.status(f"{meta.namespace}/{meta.name}")

    def write(self, update: Mapping[str, Any]) -> None:
        """Merge `update` into the Source's status and save the file."""
        self.sources.write(self.source, update)


def _recorded_source(entry: Mapping[str, Any]) -> Source | None:
    """The Source a status entry was recorded from (to find its database again)."""
    metadata = {"namespace": entry.get("namespace"), "name": entry.get("name")}
    try:
        return Source.model_validate({"metadata": metadata, "spec": entry.get("spec")})
    except ValueError:
        LOGGER.debug("an unreadable Source entry in %s", SOURCES_FILE)
        return None
