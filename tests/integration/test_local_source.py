"""A Source under `distributary run`: a PostgreSQL table's changes as a Log, and a view over it.

The database is the Debian package's PostgreSQL 15 with `wal_level=logical`; the Source's user is
an ordinary one with REPLICATION that owns the table, its password in a secrets folder laid out as
Kubernetes mounts a Secret. `distributary run` reads the table's columns and primary key, makes
the Log (compacted, keyed by `id`), starts a Kafka Connect worker with Debezium's connector and a
view that keeps the orders of 10 or more as a table, deletes included (`__deleted`).

Checked exactly, as committed readers see them: the rows that existed before (the snapshot); an
INSERT, an UPDATE, a DELETE (its `__deleted` record, then a tombstone) and a column added, each
in the Log as the database made it; the view's table equal to what the table implies. Then the
run is killed with SIGKILL while a writer inserts rows without pause, and a new run carries on:
every row is in the Log once, in order, and the view's table is exact (the Connect worker
killed alone, and runs killed again and again while orders change: `test_shop_example.py`).
The password appears in no file of the state folder. Removing the Source from the files drops
its slot and its publication and keeps its Log.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.integration.local_runs import Run
from tests.integration.spark_pipelines import Read, latest_table, read_topic

from distributary.devtools.postgres import PostgresServer
from distributary.local.broker import EmbeddedBroker
from distributary.local.state import RunStateError, read_run_state

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "shop_run"
PASSWORD = "cdc-Secret-7431"
SOURCE = f"""
apiVersion: distributary.dev/v1alpha1
kind: Source
metadata: {{name: shop}}
spec:
  postgres:
    host: 127.0.0.1
    port: {{port}}
    database: {DATABASE}
    user: cdc
    passwordSecret: {{name: shop-db}}
    sslMode: disable
  tables:
    - name: public.orders
      partitions: 2
"""
VIEW = """
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: big-orders}
spec:
  inputs: [{log: shop-orders, alias: o}]
  sql: SELECT id, customer, amount, __deleted FROM o WHERE amount >= 10 OR __deleted
  output: {mode: upsert, key: [id], partitions: 1}
"""
TOPIC = "shop-orders"


@pytest.fixture(scope="module")
def database(postgres: PostgresServer) -> Iterator[PostgresServer]:
    postgres.create_database(DATABASE)
    postgres.execute(f"CREATE ROLE cdc LOGIN REPLICATION PASSWORD '{PASSWORD}'")
    postgres.execute(f"GRANT CREATE ON DATABASE {DATABASE} TO cdc", database=DATABASE)
    postgres.execute("GRANT CREATE ON SCHEMA public TO cdc", database=DATABASE)
    with _as_cdc(postgres) as db:
        db.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, "
            "amount numeric(10,2) NOT NULL, placed timestamptz NOT NULL DEFAULT now())"
        )
        db.execute(
            "INSERT INTO orders (id, customer, amount) VALUES "
            "(1, 'ada', 12.50), (2, 'bob', 3.00), (3, 'cy', 40.00)"
        )
    return postgres


def _as_cdc(postgres: PostgresServer) -> psycopg.Connection[Any]:
    return psycopg.connect(postgres.dsn(DATABASE, user="cdc", password=PASSWORD), autocommit=True)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, database: PostgresServer) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("local-source")
    pipeline = root / "pipeline"
    pipeline.mkdir()
    (pipeline / "source.yaml").write_text(SOURCE.replace("{port}", str(database.port)))
    (pipeline / "view.yaml").write_text(VIEW)
    secret = root / "secrets" / "shop-db"
    secret.mkdir(parents=True)
    (secret / "password").write_text(PASSWORD)
    return {"pipeline": pipeline, "secrets": root / "secrets", "state": root / "state"}


def _log(broker: EmbeddedBroker, topic: str = TOPIC) -> list[Read]:
    try:
        return read_topic(broker.bootstrap_servers, topic)
    except Exception:  # not made yet
        return []


def _changes(records: list[Read]) -> list[tuple[Any, Any]]:
    """(key, value) of each record in partition order, keys and values decoded."""
    return [
        (json.loads(r.key or b"null"), json.loads(r.value) if r.value is not None else None)
        for r in records
    ]


def _by_id(records: list[Read]) -> dict[int, list[Any]]:
    """Each id's values in the order they were written (a key's records share a partition)."""
    found: dict[int, list[Any]] = {}
    for key, value in _changes(records):
        found.setdefault(key["id"], []).append(value)
    return found


def _table(db: psycopg.Connection[Any], least: float) -> dict[str, dict[str, Any]]:
    """The orders of at least `least`, as the view's upsert topic should hold them."""
    rows = db.execute(
        "SELECT id, customer, amount FROM orders WHERE amount >= %s", (least,)
    ).fetchall()
    return {
        json.dumps({"id": i}, separators=(",", ":")): {
            "id": i, "customer": c, "amount": float(a)
        }
        for i, c, a in rows
    }  # fmt: skip


def _view_table(broker: EmbeddedBroker, state: Path) -> dict[str, Any]:
    """The view's table as readers of its serving topic see it (the table's new column makes
    the view reprocess on the next run, and readers follow the revision that serves)."""
    try:
        topic = read_run_state(state).logs["big-orders"].topic
    except (RunStateError, KeyError):
        return {}
    table = latest_table(_log(broker, topic))
    return {
        json.dumps(json.loads(k), separators=(",", ":")): {**v, "amount": float(v["amount"])}
        for k, v in table.items()
    }


def test_changes_arrive_exactly_and_a_killed_run_loses_and_repeats_nothing(
    folders: dict[str, Path], broker: EmbeddedBroker, database: PostgresServer
) -> None:
    # A writer that inserts without pause once started.
    stop, written = threading.Event(), []

    def write() -> None:
        with _as_cdc(database) as db:
            next_id = 100
            while not stop.is_set():
                db.execute(
                    "INSERT INTO orders (id, customer, amount) VALUES (%s, %s, %s)",
                    (next_id, f"c{next_id % 7}", next_id % 30),
                )
                written.append(next_id)
                next_id += 1
                time.sleep(0.01)

    writer = threading.Thread(target=write, daemon=True)
    run = Run(folders, broker, folders["pipeline"])
    try:
        run.wait("the snapshot is in the Log", lambda: len(_log(broker)) >= 3)
        snapshot = _by_id(_log(broker))
        assert sorted(snapshot) == [1, 2, 3]
        assert snapshot[1][0]["customer"] == "ada"
        assert snapshot[1][0]["amount"] == "12.50"
        assert snapshot[1][0]["__deleted"] is False
        with _as_cdc(database) as db:
            db.execute("INSERT INTO orders (id, customer, amount) VALUES (4, 'dee', 15.00)")
            db.execute("UPDATE orders SET amount = 25.00 WHERE id = 2")
            db.execute("DELETE FROM orders WHERE id = 3")
            db.execute("ALTER TABLE orders ADD COLUMN note text")
            db.execute("INSERT INTO orders (id, customer, amount, note) VALUES (5, 'eve', 9, 'hi')")
        run.wait("the changes are in the Log", lambda: len(_log(broker)) >= 8)
        log = _by_id(_log(broker))
        assert [v["amount"] for v in log[2]] == ["3.00", "25.00"]
        assert log[4] == [{**log[4][0], "id": 4, "customer": "dee", "amount": "15.00"}]
        assert log[3][1]["__deleted"] is True
        assert log[3][2] is None
        assert log[5][0]["note"] == "hi"
        assert log[5][0]["amount"] == "9.00"
        assert len(_log(broker)) == 8  # nothing more than those changes
        run.wait(
            "the run tells of the new column",
            lambda: "table public.orders has new column(s) note" in run.said.read_text(),
            timeout=30,
        )
        with _as_cdc(database) as db:
            run.wait(
                "the view's table is exact",
                lambda: _view_table(broker, folders["state"]) == _table(db, 10),
            )
        # The writer inserts without pause while this run is killed with SIGKILL and the next
        # run carries on. (The Connect worker killed alone, and the run killed again and again
        # while orders change: `test_shop_example.py`.)
        writer.start()
        before = len(_log(broker))
        run.wait("new rows reach the Log", lambda: len(_log(broker)) > before + 20)
    except BaseException:
        stop.set()
        raise
    finally:
        run.kill(worker=False)  # the next run finds the worker this one left and waits for it
    run = Run(folders, broker, folders["pipeline"])
    try:
        # The worker the killed run left may still commit a few records before it stops.
        run.wait("its own worker serves", lambda: "Kafka Connect serves on" in run.said.read_text())
        before = len(_log(broker))
        run.wait("new rows reach the Log again", lambda: len(_log(broker)) > before + 20)
        stop.set()
        writer.join(10)
        last = written[-1]
        run.wait("every row written is in the Log", lambda: last in _by_id(_log(broker)))
        log = _by_id(_log(broker))
        inserted = [i for i in log if i >= 100]
        assert sorted(inserted) == written, "rows lost or invented"
        repeated = {i: len(v) for i, v in log.items() if i >= 100 and len(v) != 1}
        assert not repeated, f"rows written more than once: {repeated}"
        with _as_cdc(database) as db:
            run.wait(
                "the view's table is exact",
                lambda: _view_table(broker, folders["state"]) == _table(db, 10),
            )
        said = run.stop()
    finally:
        stop.set()
        if run.process.poll() is None:
            run.kill()
    assert "Traceback" not in said, said[-3000:]
    for path in folders["state"].rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            assert PASSWORD.encode() not in path.read_bytes(), f"the password is in {path}"


def test_a_source_removed_from_the_files_drops_its_slot_and_keeps_its_log(
    folders: dict[str, Path], broker: EmbeddedBroker, database: PostgresServer
) -> None:
    slot = "distributary_default_shop"
    assert database.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                            (slot,))[0][0] == 1  # fmt: skip
    records = len(_log(broker))
    empty = folders["pipeline"].parent / "no-source"
    empty.mkdir(exist_ok=True)
    (empty / "log.yaml").write_text(
        "apiVersion: distributary.dev/v1alpha1\nkind: Log\nmetadata: {name: other}\n"
    )
    run = Run(folders, broker, empty)
    try:
        run.wait(
            "the slot is dropped",
            lambda: database.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            )[0][0] == 0,
        )  # fmt: skip
        said = run.stop()
    finally:
        if run.process.poll() is None:
            run.kill()
    assert "source default/shop: removed from the files" in said, said[-2000:]
    publications = database.execute(
        "SELECT count(*) FROM pg_publication WHERE pubname = %s", (slot,), database=DATABASE
    )
    assert publications[0][0] == 0
    assert len(_log(broker)) == records  # the Log's topic and records stay
