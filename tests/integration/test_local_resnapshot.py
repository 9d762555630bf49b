"""A re-snapshot under `distributary run`: a new revision of a Source's table Log taken beside the
serving one while orders keep changing, then cut over, its readers following.

The Source's table Log feeds a view (each order with its amount doubled, an upsert table) and a
Sink (a PostgreSQL copy of the table). A writer inserts, updates and deletes rows without pause
for the whole test. The first run is killed with SIGKILL while revision 1 takes its snapshot: the
connector takes it again from a later point, which can miss changes made in between, so the next
run finds it interrupted and takes a clean one beside it (revision 2), which replaces it. Then
`spec.snapshot.epoch` is raised from 0 to 1: revision 3 is taken beside revision 2 and replaces
it. Checked exactly, as committed readers see them:
- revision 3's topic holds the table as the database has it (latest per key), every row inserted
  during the test once (in the snapshot or as a change, never both);
- the Log then serves revision 3's topic: the view reprocesses it and its table is exact, the
  Sink reads it and its table equals the database's;
- the connectors, slots and publications of revisions 1 and 2 are gone; their topics stay,
  written no more; the status tells each revision's epoch and whether its snapshot was clean.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.integration.local_runs import Run
from tests.integration.spark_pipelines import Read, latest_table, read_topic

from distributary.devtools.postgres import PostgresServer
from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker
from distributary.local.state import RunStateError, read_run_state

DATABASE = "resnapshot"
PASSWORD = "resnap-Secret-2291"
TOPIC = "resnap-orders"
SOURCE = f"""
apiVersion: distributary.dev/v1alpha1
kind: Source
metadata: {{name: resnap}}
spec:
  postgres:
    host: 127.0.0.1
    port: {{port}}
    database: {DATABASE}
    user: rcdc
    passwordSecret: {{name: resnap-db}}
    sslMode: disable
  snapshot: {{epoch: {{epoch}}}}
  tables:
    - name: public.orders
      partitions: 2
"""
VIEW = f"""
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {{name: resnap-big}}
spec:
  # Every version, as the stream of changes it is, with the captured deletes' marker passed on:
  # what this test follows is the Source's revisions, not the table.
  inputs: [{{log: {TOPIC}, alias: o, read: changes}}]
  sql: SELECT id, customer, amount * 2 AS amount, __deleted FROM o
  output: {{mode: upsert, key: [id], partitions: 1}}
"""
SINK = f"""
apiVersion: distributary.dev/v1alpha1
kind: Sink
metadata: {{name: resnap-copy}}
spec:
  log: {TOPIC}
  postgres:
    host: 127.0.0.1
    port: {{port}}
    database: {DATABASE}
    user: rcdc
    passwordSecret: {{name: resnap-db}}
    sslMode: disable
    table: public.orders_copy
"""
FIRST = 30_000  # rows before the Source starts: its snapshot takes a few seconds
SLOT = "distributary_default_resnap"


@pytest.fixture(scope="module")
def database(postgres: PostgresServer) -> PostgresServer:
    postgres.create_database(DATABASE)
    postgres.execute(f"CREATE ROLE rcdc LOGIN REPLICATION PASSWORD '{PASSWORD}'")
    postgres.execute(f"GRANT CREATE ON DATABASE {DATABASE} TO rcdc", database=DATABASE)
    postgres.execute("GRANT CREATE ON SCHEMA public TO rcdc", database=DATABASE)
    with _connect(postgres) as db:
        db.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, amount int NOT NULL)"
        )
        db.execute(
            "INSERT INTO orders SELECT g, 'c' || (g %% 7), g %% 30 FROM generate_series(1, %s) g",
            (FIRST,),
        )
    return postgres


def _connect(postgres: PostgresServer) -> psycopg.Connection[Any]:
    return psycopg.connect(postgres.dsn(DATABASE, user="rcdc", password=PASSWORD), autocommit=True)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, database: PostgresServer) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("local-resnapshot")
    pipeline = root / "pipeline"
    pipeline.mkdir()
    _write_source(pipeline, database, 0)
    (pipeline / "view.yaml").write_text(VIEW)
    (pipeline / "sink.yaml").write_text(SINK.replace("{port}", str(database.port)))
    secret = root / "secrets" / "resnap-db"
    secret.mkdir(parents=True)
    (secret / "password").write_text(PASSWORD)
    return {"pipeline": pipeline, "secrets": root / "secrets", "state": root / "state"}


def _write_source(pipeline: Path, database: PostgresServer, epoch: int) -> None:
    text = SOURCE.replace("{port}", str(database.port)).replace("{epoch}", str(epoch))
    (pipeline / "source.yaml").write_text(text)


class Writer:
    """Inserts new orders, updates and deletes old ones, without pause, until stopped."""

    def __init__(self, database: PostgresServer) -> None:
        self.database = database
        self.inserted: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._write, daemon=True)
        self.thread.start()

    def _write(self) -> None:
        pick = random.Random(7)
        with _connect(self.database) as db:
            next_id = 1_000_000
            while not self.stop.is_set():
                db.execute(
                    "INSERT INTO orders VALUES (%s, %s, %s)",
                    (next_id, f"c{next_id % 7}", next_id % 30),
                )
                self.inserted.append(next_id)
                next_id += 1
                old = pick.randint(1, FIRST)
                if pick.random() < 0.2:
                    db.execute("DELETE FROM orders WHERE id = %s", (old,))
                else:
                    db.execute("UPDATE orders SET amount = %s WHERE id = %s",
                               (pick.randint(0, 40), old))  # fmt: skip
                time.sleep(0.02)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(10)


def _log(broker: EmbeddedBroker, topic: str) -> list[Read]:
    try:
        return read_topic(broker.bootstrap_servers, topic)
    except Exception:  # not made yet
        return []


def _rows(database: PostgresServer, table: str = "orders") -> dict[int, tuple[str, int]]:
    with _connect(database) as db:
        found = db.execute(f"SELECT id, customer, amount FROM {table}").fetchall()
    return {i: (c, int(a)) for i, c, a in found}


def _log_table(records: list[Read]) -> dict[int, tuple[str, int]]:
    return {
        json.loads(k)["id"]: (v["customer"], int(v["amount"]))
        for k, v in latest_table(records).items()
        if not v.get("__deleted")
    }


def _source_status(state: Path) -> dict[str, Any]:
    try:
        entries = json.loads((state / "sources.json").read_text())
    except (OSError, ValueError):
        return {}
    return dict((entries.get("default/resnap") or {}).get("status") or {})


def _served(state: Path, log: str) -> str | None:
    try:
        return read_run_state(state).logs[log].topic
    except (RunStateError, KeyError):
        return None


def _slots(database: PostgresServer) -> list[str]:
    found = database.execute("SELECT slot_name FROM pg_replication_slots ORDER BY 1")
    return [row[0] for row in found if row[0].startswith(SLOT)]


def _publications(database: PostgresServer) -> list[str]:
    found = database.execute("SELECT pubname FROM pg_publication ORDER BY 1", database=DATABASE)
    return [row[0] for row in found]


def test_an_interrupted_snapshot_and_a_raised_epoch_are_taken_beside_and_cut_over(
    folders: dict[str, Path], broker: EmbeddedBroker, database: PostgresServer
) -> None:
    state, pipeline = folders["state"], folders["pipeline"]
    writer = Writer(database)
    try:
        run = Run(folders, broker, pipeline)
        try:
            run.wait("revision 1's snapshot begins", lambda: _size(broker, TOPIC) > 0)
        finally:
            run.kill()  # while revision 1 takes its snapshot
        assert not _snapshot_done(state, 1), "the run was meant to die during the snapshot"
        run = Run(folders, broker, pipeline)
        try:
            run.wait(
                "revision 2 replaces revision 1, whose snapshot was interrupted",
                lambda: _serving(state) == 2 and _slots(database) == [f"{SLOT}_r2"],
            )
        finally:
            run.kill()  # as its readers begin to reprocess
        _write_source(pipeline, database, 1)  # a raised epoch: a new snapshot, revision 3
        run = Run(folders, broker, pipeline)
        try:
            run.wait(
                "revision 3 serves and revision 2's slot is dropped",
                lambda: _serving(state) == 3 and _slots(database) == [f"{SLOT}_r3"],
            )
            run.wait(
                "the view reads revision 3's topic and serves a revision of its own over it",
                lambda: _view_input(state) == f"{TOPIC}.r3",
            )
            run.wait(
                "the Sink reads revision 3's topic", lambda: _sink_topic(state) == f"{TOPIC}.r3"
            )
            # A deleted connector's task finishes its last transaction within Connect's
            # task.shutdown.graceful.timeout.ms (5 s); nothing is written after that.
            time.sleep(6)
            retired = _size(broker, f"{TOPIC}.r2")
        except BaseException:
            run.kill()
            raise
    finally:
        writer.finish()
    try:
        expected = _rows(database)
        doubled = {i: (c, a * 2) for i, (c, a) in expected.items()}
        _settle(run, "the Sink's copy", lambda: _rows(database, "orders_copy"), expected)
        revision_3 = f"{TOPIC}.r3"
        _settle(run, "revision 3's topic", lambda: _log_table(_log(broker, revision_3)), expected)
        _settle(run, "the view's table", lambda: _view_table(broker, state), doubled)
        said = run.stop()
    finally:
        if run.process.poll() is None:
            run.kill()
    assert "Traceback" not in said, said[-3000:]
    assert "revision 3 caught up" in said, said[-3000:]
    counts: dict[int, int] = {}
    for record in _log(broker, f"{TOPIC}.r3"):
        key = json.loads(record.key or b"null")["id"]
        counts[key] = counts.get(key, 0) + 1
    twice = [i for i in writer.inserted if counts.get(i) != 1]
    assert not twice, f"inserted rows not in revision 3's topic exactly once: {twice[:20]}"
    assert _size(broker, f"{TOPIC}.r2") == retired, (
        "revision 2's topic was written after it retired"
    )
    assert _size(broker, TOPIC) > 0  # the retired revisions' topics stay
    assert _slots(database) == [f"{SLOT}_r3"]
    assert _publications(database) == [f"{SLOT}_r3"]
    status = _source_status(state)
    rows = {
        r["revision"]: (r["phase"], r.get("epoch"), r.get("snapshot")) for r in status["revisions"]
    }
    assert rows == {
        1: ("Retired", 0, "Interrupted"),
        2: ("Retired", 0, "Clean"),
        3: ("Serving", 1, "Clean"),
    }
    assert status["tables"][0]["topic"] == f"{TOPIC}.r3"
    assert not [c for c in status["conditions"] if c["type"] == "SnapshotInterrupted"]


def _serving(state: Path) -> int | None:
    return _source_status(state).get("servingRevision")


def _view_input(state: Path) -> str | None:
    """The topic the view's serving revision reads."""
    try:
        views = json.loads((state / "revisions.json").read_text())["views"]
        status = views["default/resnap-big"]["status"]
    except (OSError, ValueError, KeyError):
        return None
    row = next((r for r in status.get("revisions") or []
                if r.get("revision") == status.get("servingRevision")), {})  # fmt: skip
    inputs = row.get("inputs") or []
    return str(inputs[0]["topic"]) if inputs else None


def _settle(run: Run, what: str, read: Any, expected: dict[int, Any], timeout: float = 120) -> None:
    """Wait until `read()` equals `expected`; else fail showing how they differ."""
    deadline = time.monotonic() + timeout
    while True:
        found = read()
        if found == expected:
            return
        if time.monotonic() > deadline or run.process.poll() is not None:
            missing = sorted(set(expected) - set(found))[:10]
            extra = sorted(set(found) - set(expected))[:10]
            wrong = [(i, found[i], expected[i]) for i in set(found) & set(expected)
                     if found[i] != expected[i]][:10]  # fmt: skip
            raise AssertionError(f"{what} is not the table: missing {missing}, extra {extra}, "
                                 f"wrong {wrong}")  # fmt: skip
        time.sleep(1)


def _size(broker: EmbeddedBroker, topic: str) -> int:
    try:
        return sum(KafkaAdmin(broker.bootstrap_servers).end_offsets([topic])[topic].values())
    except Exception:  # not made yet
        return 0


def _snapshot_done(state: Path, revision: int) -> bool:
    rows = _source_status(state).get("revisions", [])
    return any(r.get("revision") == revision and r.get("snapshotDone") for r in rows)


def _has_revision(state: Path, revision: int) -> bool:
    return any(r.get("revision") == revision for r in _source_status(state).get("revisions", []))


def _sink_topic(state: Path) -> str | None:
    try:
        entries = json.loads((state / "sinks.json").read_text())
    except (OSError, ValueError):
        return None
    return (entries.get("default/resnap-copy") or {}).get("topic")


def _view_table(broker: EmbeddedBroker, state: Path) -> dict[int, tuple[str, int]]:
    topic = _served(state, "resnap-big")
    return _log_table(_log(broker, topic)) if topic else {}
