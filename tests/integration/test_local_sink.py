"""Sinks under `distributary run`: PostgreSQL tables and a Redis cache kept equal to a log, exactly
once, while the Sinks' processes are killed with SIGKILL ten times and records keep arriving.

One keyed Log of accounts feeds three Sinks: `accounts` (upsert: a row per key, the latest
record, deleted by a tombstone), `account-events` (append: a row per record) and `account-cache`
(Redis: a key `account:<id>` per account holding its latest record). A writer appends
updates and tombstones without pause while both Sink processes are killed ten times; the run
starts them again each time. Afterwards each table is compared exactly with what the log implies:
the upsert table with the latest record of each key (tombstoned keys absent), the append table
with every record as a multiset (a record applied twice or never would show), the cache's keys
with the latest records. The offsets each
table holds are the log's end offsets. The password is in no file of the state folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import redis
from tests.integration.spark_pipelines import latest_table, produce, read_topic, wait_for_run

from distributary.devtools.postgres import PostgresServer
from distributary.devtools.redis import RedisServer
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.records import Record
from distributary.local.broker import EmbeddedBroker
from distributary.plan.kafka_topics.topics import CreateTopic
from distributary.plan.sinks.sink_plan import SinkRun
from distributary.sinks.postgres import apply, connect_sink, prepare

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "serving"
PASSWORD = "sink-Secret-5521"
TOPIC = "sink-accounts"
KILLS = int(os.environ.get("DISTRIBUTARY_TEST_SINK_KILLS", "10"))
PIPELINE = f"""
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {{name: accounts}}
spec:
  topicName: {TOPIC}
  partitions: 3
  compaction: true
  key: [id]
  schema: "id INT, owner STRING, balance DECIMAL(12,2), tags ARRAY<STRING>"
---
apiVersion: distributary.dev/v1alpha1
kind: Sink
metadata: {{name: accounts}}
spec:
  log: accounts
  postgres:
    host: 127.0.0.1
    port: {{port}}
    database: {DATABASE}
    user: server
    passwordSecret: {{name: serving-db}}
    sslMode: disable
    table: public.accounts
---
apiVersion: distributary.dev/v1alpha1
kind: Sink
metadata: {{name: account-events}}
spec:
  log: accounts
  postgres:
    host: 127.0.0.1
    port: {{port}}
    database: {DATABASE}
    user: server
    passwordSecret: {{name: serving-db}}
    sslMode: disable
    table: public.account_events
    mode: append
---
apiVersion: distributary.dev/v1alpha1
kind: Sink
metadata: {{name: account-cache}}
spec:
  log: accounts
  redis: {{host: 127.0.0.1, port: {{redis_port}}, keyPrefix: "account:"}}
"""


@pytest.fixture(scope="module")
def database(postgres: PostgresServer) -> PostgresServer:
    postgres.create_database(DATABASE)
    postgres.execute(f"CREATE ROLE server LOGIN PASSWORD '{PASSWORD}'")
    postgres.execute("GRANT CREATE ON SCHEMA public TO server", database=DATABASE)
    return postgres


@pytest.fixture(scope="module")
def folders(
    tmp_path_factory: pytest.TempPathFactory, database: PostgresServer, redis_server: RedisServer
) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("local-sink")
    (root / "pipeline").mkdir()
    text = PIPELINE.replace("{port}", str(database.port))
    (root / "pipeline" / "pipeline.yaml").write_text(
        text.replace("{redis_port}", str(redis_server.port))
    )
    (root / "secrets" / "serving-db").mkdir(parents=True)
    (root / "secrets" / "serving-db" / "password").write_text(PASSWORD)
    return {"pipeline": root / "pipeline", "secrets": root / "secrets", "state": root / "state"}


def _record(account: int, version: int) -> tuple[int, bytes, bytes | None]:
    key = json.dumps({"id": account}, separators=(",", ":")).encode()
    if version % 11 == 10:
        return account % 3, key, None  # a tombstone: the account is closed
    value = {"id": account, "owner": f"o{account}", "balance": f"{version}.{account % 100:02d}",
             "tags": [f"v{version}"] * (version % 3)}  # fmt: skip
    return account % 3, key, json.dumps(value).encode()


def _rows(database: PostgresServer, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in database.execute(sql, database=DATABASE)]


def _expected(
    broker: EmbeddedBroker,
) -> tuple[dict[int, tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    records = read_topic(broker.bootstrap_servers, TOPIC)
    table = {
        json.loads(k)["id"]: (v["id"], v["owner"], Decimal(v["balance"]), v["tags"])
        for k, v in latest_table(records).items()
    }
    events = Counter(
        (v["id"], v["owner"], Decimal(v["balance"]), tuple(v["tags"]))
        for r in records
        if r.value is not None and (v := r.json()) is not None
    )
    return table, events


def _tables(
    database: PostgresServer,
) -> tuple[dict[int, tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    table = {r[0]: r for r in _rows(database, "SELECT id, owner, balance, tags FROM accounts")}
    events = Counter(
        (i, o, b, tuple(t))
        for i, o, b, t in _rows(database, "SELECT id, owner, balance, tags FROM account_events")
    )
    return table, events


def _sink_pids(state: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted((state / "sinks").glob("*.pid"))]


def _positions(database: PostgresServer) -> dict[str, dict[int, int]]:
    found: dict[str, dict[int, int]] = {}
    with contextlib.suppress(Exception):
        for sink, partition, offset in _rows(
            database, "SELECT sink, partition, next_offset FROM distributary_sink_offsets"
        ):
            found.setdefault(sink, {})[partition] = offset
    return found


def test_tables_equal_the_log_after_ten_kills_while_records_arrive(
    folders: dict[str, Path],
    broker: EmbeddedBroker,
    database: PostgresServer,
    redis_server: RedisServer,
) -> None:
    admin = KafkaAdmin(broker.bootstrap_servers)
    said = folders["state"].parent / "run.err"
    err = said.open("w")
    run = subprocess.Popen(
        [sys.executable, "-m", "distributary.cli", "run", str(folders["pipeline"]),
         "--bootstrap-servers", broker.bootstrap_servers, "--state-dir", str(folders["state"]),
         "--secrets", str(folders["secrets"]), "--restart-delay", "1"],
        stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT,
    )  # fmt: skip
    stop, written = threading.Event(), [0]

    def write() -> None:
        rng, version = random.Random(7), 0
        while not stop.is_set():
            version += 1
            produce(broker.bootstrap_servers, TOPIC,
                    [_record(rng.randint(1, 40), version) for _ in range(20)])  # fmt: skip
            written[0] += 20
            time.sleep(0.05)

    writer = threading.Thread(target=write, daemon=True)
    try:
        wait_for_run("the topic exists", lambda: bool(admin.list_partitions([TOPIC]).get(TOPIC)),
                     run, said, 60)  # fmt: skip
        writer.start()
        wait_for_run("both Sinks apply records", lambda: len(_positions(database)) == 2,
                     run, said, 120)  # fmt: skip
        for kill in range(KILLS):
            before = _positions(database)
            wait_for_run(
                f"kill {kill}: both Sinks have moved on",
                lambda before=before: all(  # type: ignore[misc]
                    sum(_positions(database).get(s, {}).values()) > sum(p.values())
                    for s, p in before.items()
                ),
                run, said, 90,
            )  # fmt: skip
            time.sleep(random.uniform(0.0, 1.0))
            for pid in _sink_pids(folders["state"]):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        stop.set()
        writer.join(30)
        ends = admin.end_offsets([TOPIC])[TOPIC]
        wait_for_run(
            "both tables hold the whole log",
            lambda: all(p == ends for p in _positions(database).values()),
            run, said, 120,
        )  # fmt: skip
        cache = redis.Redis(port=redis_server.port)
        wait_for_run(
            "the cache holds the whole log",
            lambda: {int(p): int(o) for p, o in cache.hgetall(
                f"distributary:sink:default/account-cache:{TOPIC}").items()} == ends,
            run, said, 120,
        )  # fmt: skip
        table, events = _tables(database)
        want_table, want_events = _expected(broker)
        assert table == want_table
        cached = {
            int(k.decode().removeprefix("account:")): json.loads(v)
            for k in cache.keys("account:*")
            if (v := cache.get(k)) is not None
        }
        assert {
            i: (v["id"], v["owner"], Decimal(v["balance"]), v["tags"]) for i, v in cached.items()
        } == want_table
        assert sum(events.values()) == sum(want_events.values())
        assert events == want_events, "records applied twice or never"
        assert written[0] > 1000
        restarts = said.read_text().count("its process exited")
        assert restarts >= KILLS, said.read_text()[-3000:]
        _read_your_writes(folders["state"], broker, database)
    finally:
        stop.set()
        run.send_signal(signal.SIGINT)
        try:
            run.wait(60)
        finally:
            if run.poll() is None:
                run.kill()
            err.close()
    text = said.read_text()
    assert "Traceback" not in text, text[-3000:]
    for path in folders["state"].rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            assert PASSWORD.encode() not in path.read_bytes(), f"the password is in {path}"


def test_a_replayed_batch_is_skipped_and_an_aborted_one_leaves_nothing(
    database: PostgresServer, tmp_path: Path
) -> None:
    """The two halves of exactly once, without waiting for a kill to land in the right place:
    a batch applied again (a crash after the commit, before the reader moved on) changes
    nothing; a batch whose transaction fails (a crash before the commit) leaves neither rows
    nor position, and the next try applies it once."""
    password = tmp_path / "password"
    password.write_text(PASSWORD)
    run = SinkRun(name="default/replays", group="g", bootstrap_servers="unused:9092",
                  topic="replays", columns=[("id", "INT"), ("owner", "STRING")], mode="append",
                  table="public.replays", host=database.host, port=database.port,
                  database=DATABASE, user="server", ssl_mode="disable",
                  password_file=str(password))  # fmt: skip
    batch = [Record("replays", 0, offset, 0, b'{"id":%d}' % offset,
                    json.dumps({"id": offset, "owner": f"o{offset}"}).encode())
             for offset in range(5)]  # fmt: skip
    with connect_sink(run) as db:
        prepare(db, run)
        assert apply(db, run, batch) == 5
        assert apply(db, run, batch) == 0  # replayed: skipped
        assert apply(db, run, [*batch, *_more(5, 7)]) == 2  # overlapping: only the new ones
        with pytest.raises(RuntimeError, match="dies before the commit"):
            _dies_before_commit(db, run, _more(7, 9))
        assert apply(db, run, _more(7, 9)) == 2
    rows = _rows(database, "SELECT id FROM replays ORDER BY id")
    assert rows == [(i,) for i in range(9)]
    assert _rows(database, "SELECT next_offset FROM distributary_sink_offsets WHERE "
                           "sink = 'default/replays'") == [(9,)]  # fmt: skip


def _more(first: int, last: int) -> list[Record]:
    return [Record("replays", 0, o, 0, b'{"id":%d}' % o,
                   json.dumps({"id": o, "owner": f"o{o}"}).encode())
            for o in range(first, last)]  # fmt: skip


def _dies_before_commit(db: Any, run: SinkRun, batch: list[Record]) -> None:
    with db.transaction():
        apply(db, run, batch)  # its own transaction is a savepoint of this one
        raise RuntimeError("the process dies before the commit")


def _read_your_writes(state: Path, broker: EmbeddedBroker, database: PostgresServer) -> None:
    """`distributary wait SINK --covers` returns once the record is in the table, so a reader of
    the table that waits first sees its own write."""
    for n in range(3):
        account = 1000 + n
        [(partition, offset)] = produce(broker.bootstrap_servers, TOPIC, [_record(account, 1)])
        result = subprocess.run(
            [sys.executable, "-m", "distributary.cli", "wait", "accounts", "--covers",
             f"accounts:{partition}:{offset}", "--state-dir", str(state), "--timeout", "60"],
            capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.startswith("accounts: done (table public.accounts"), result.stdout
        assert _rows(database, f"SELECT owner FROM accounts WHERE id = {account}") == [
            (f"o{account}",)
        ]


def test_a_run_until_caught_up_waits_for_its_sinks(
    tmp_path: Path, broker: EmbeddedBroker, database: PostgresServer
) -> None:
    """`run --until-caught-up` exits once every Sink's store holds its whole log, not when the
    views alone have caught up; its summary says each Sink's position and lag."""
    topic = "sink-backlog"
    pipeline = tmp_path / "pipeline"
    pipeline.mkdir()
    (pipeline / "p.yaml").write_text(f"""
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {{name: backlog}}
spec: {{topicName: {topic}, partitions: 2, key: [id], schema: "id INT, n INT"}}
---
apiVersion: distributary.dev/v1alpha1
kind: Sink
metadata: {{name: backlog}}
spec:
  log: backlog
  postgres: {{host: 127.0.0.1, port: {database.port}, database: {DATABASE}, user: server,
             passwordSecret: {{name: serving-db}}, sslMode: disable, table: public.backlog,
             mode: append}}
""")  # fmt: skip
    (tmp_path / "secrets" / "serving-db").mkdir(parents=True)
    (tmp_path / "secrets" / "serving-db" / "password").write_text(PASSWORD)
    admin = KafkaAdmin(broker.bootstrap_servers)
    admin.create_topic(CreateTopic(topic, 2, None, {}))
    count = 60_000
    records = [(i % 2, b'{"id":%d}' % i, b'{"id":%d,"n":%d}' % (i, i)) for i in range(count)]
    produce(broker.bootstrap_servers, topic, records)
    result = subprocess.run(
        [sys.executable, "-m", "distributary.cli", "run", str(pipeline), "--until-caught-up",
         "--bootstrap-servers", broker.bootstrap_servers, "--state-dir", str(tmp_path / "state"),
         "--secrets", str(tmp_path / "secrets")],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["sinks"]["default/backlog"]["lag"] == 0
    assert _rows(database, "SELECT count(*), count(DISTINCT id) FROM backlog") == [(count, count)]
