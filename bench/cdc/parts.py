"""The real parts bench/cdc runs on, set up as tests/integration/test_local_source.py and
test_local_sink.py set them up: PostgreSQL 15 (`devtools.postgres`) with a source database whose
tables a REPLICATION role owns and a serving database a second role writes, the pipeline files
and secrets folder of a `distributary run`, the run as a process of its own, a committed reader
that notes when each row reaches a Log, and the two writers (bulk and paced). The backlog
appliers are in backlog.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, KafkaError, TopicPartition
from figures import PAYLOAD_BYTES

from distributary.devtools.postgres import PostgresServer
from distributary.kafka.cluster import client_config

ROOT = Path(__file__).resolve().parent.parent.parent
SOURCE_DB, SERVING_DB = "shop", "serving"
CDC_PASSWORD, SERVER_PASSWORD = "bench-cdc-4417", "bench-serving-9083"
BULK, TICKS = "bulk", "ticks"  # the source tables; their Logs are shop-bulk and shop-ticks
PARTITIONS = 2
PROGRESS_EVERY = 5.0
PIPELINE = """\
apiVersion: distributary.dev/v1alpha1
kind: Source
metadata: {{name: shop}}
spec:
  postgres: {{host: 127.0.0.1, port: {port}, database: shop, user: cdc,
             passwordSecret: {{name: shop-db}}, sslMode: disable}}
  tables:
    - {{name: public.bulk, partitions: {partitions}}}
    - {{name: public.ticks, partitions: {partitions}}}
---
apiVersion: distributary.dev/v1alpha1
kind: Sink
metadata: {{name: ticks}}
spec:
  log: shop-ticks
  postgres: {{host: 127.0.0.1, port: {port}, database: serving, user: server,
             passwordSecret: {{name: serving-db}}, sslMode: disable, table: public.ticks,
             mode: upsert}}
"""
SOURCE_TABLE = (
    "CREATE TABLE {name} (id bigint PRIMARY KEY, payload text NOT NULL, "
    "created_at timestamptz NOT NULL DEFAULT clock_timestamp())"
)
# The serving table in the shape the Sink makes from the Log (bigint, text, timestamptz; key
# id), plus arrived_at, which the Sink does not know of: it adds missing columns and refuses
# other types or keys, but leaves extra columns alone.
SERVING_TABLE = (
    "CREATE TABLE ticks (id bigint PRIMARY KEY, payload text, created_at timestamptz, "
    "arrived_at timestamptz)"
)
ARRIVED_TRIGGER = """
CREATE FUNCTION stamp_arrival() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.arrived_at := clock_timestamp(); RETURN NEW; END $$;
CREATE TRIGGER stamp_arrival BEFORE INSERT OR UPDATE ON ticks
FOR EACH ROW EXECUTE FUNCTION stamp_arrival();
"""


def say(message: str) -> None:
    """A progress line for people, on stderr."""
    print(f"[cdc] {message}", file=sys.stderr, flush=True)


def payload(sql_id: str) -> str:
    """The SQL of a row's payload (about PAYLOAD_BYTES) from its id's SQL."""
    return f"'row-' || {sql_id} || '-' || repeat('x', {PAYLOAD_BYTES - 12})"


def prepare_databases(postgres: PostgresServer, snapshot_rows: int) -> None:
    """The source database (cdc owns bulk, with its snapshot rows, and ticks) and the serving
    one (server owns ticks, stamped on arrival)."""
    postgres.create_database(SOURCE_DB)
    postgres.create_database(SERVING_DB)
    postgres.execute(f"CREATE ROLE cdc LOGIN REPLICATION PASSWORD '{CDC_PASSWORD}'")
    postgres.execute(f"CREATE ROLE server LOGIN PASSWORD '{SERVER_PASSWORD}'")
    postgres.execute(f"GRANT CREATE ON DATABASE {SOURCE_DB} TO cdc", database=SOURCE_DB)
    postgres.execute("GRANT CREATE ON SCHEMA public TO cdc", database=SOURCE_DB)
    postgres.execute("GRANT CREATE ON SCHEMA public TO server", database=SERVING_DB)
    with source(postgres) as db:
        db.execute(SOURCE_TABLE.format(name=BULK))
        db.execute(SOURCE_TABLE.format(name=TICKS))
        db.execute(
            f"INSERT INTO {BULK} (id, payload) SELECT g, {payload('g')} "
            "FROM generate_series(1, %s) g",
            (snapshot_rows,),
        )
    with psycopg.connect(postgres.dsn(SERVING_DB), autocommit=True) as db:
        db.execute(SERVING_TABLE)
        db.execute(ARRIVED_TRIGGER)
        db.execute("ALTER TABLE ticks OWNER TO server")


def source(postgres: PostgresServer) -> psycopg.Connection[Any]:
    """A connection to the source database as the Source's user."""
    return psycopg.connect(
        postgres.dsn(SOURCE_DB, user="cdc", password=CDC_PASSWORD), autocommit=True
    )


def serving(postgres: PostgresServer) -> psycopg.Connection[Any]:
    """A connection to the serving database as the superuser (to read and count)."""
    return psycopg.connect(postgres.dsn(SERVING_DB), autocommit=True)


def write_pipeline(folder: Path, port: int) -> tuple[Path, Path]:
    """The pipeline folder and the secrets folder (laid out as Kubernetes mounts Secrets)."""
    pipeline, secrets = folder / "pipeline", folder / "secrets"
    pipeline.mkdir(parents=True)
    (pipeline / "pipeline.yaml").write_text(PIPELINE.format(port=port, partitions=PARTITIONS))
    for name, password in (("shop-db", CDC_PASSWORD), ("serving-db", SERVER_PASSWORD)):
        (secrets / name).mkdir(parents=True)
        (secrets / name / "password").write_text(password)
    return pipeline, secrets


class Run:
    """`distributary run` in the background, its stderr in a file, in a session of its own."""

    def __init__(self, pipeline: Path, secrets: Path, state: Path, bootstrap: str) -> None:
        self.state, self.said = state, state.parent / "run.err"
        with open(self.said, "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "distributary.cli", "run", str(pipeline),
                 "--bootstrap-servers", bootstrap, "--state-dir", str(state),
                 "--secrets", str(secrets), "--cores", "1"],
                stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT, start_new_session=True,
            )  # fmt: skip
        self.started = time.time()

    def text(self) -> str:
        """What the run said so far."""
        return self.said.read_text(errors="replace") if self.said.exists() else ""

    def until(self, what: str, done: Callable[[], bool], timeout: float) -> float:
        """Wait until `done()` while the run goes on; when it was done (wall clock)."""
        started = shown = time.monotonic()
        while not done():
            if self.process.poll() is not None:
                raise RuntimeError(f"the run exited while {what}: {self.text()[-2000:]}")
            now = time.monotonic()
            if now - started > timeout:
                raise TimeoutError(f"{what}: not done within {timeout:.0f}s")
            if now - shown >= PROGRESS_EVERY:
                shown = now
                say(f"  {what}: {now - started:.0f}s")
            time.sleep(0.05)
        return time.time()

    def tables(self) -> dict[str, str]:
        """Each captured table's Log columns (Spark DDL), as the run recorded them."""
        statuses = json.loads((self.state / "sources.json").read_text())
        found = statuses["default/shop"]["status"]["tables"]
        return {t["name"]: t["columns"] for t in found}

    def stop(self) -> None:
        """SIGINT (the run stops its Sinks and its Connect worker), SIGKILL if it hangs, then
        the worker by its pid if it outlived the run."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(30)
        pid_file = self.state / "connect" / "worker.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            if b"ConnectDistributed" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)


class LogTail:
    """A committed reader of a Log's topic from its start, on a thread of its own, noting when
    each record arrived (wall clock) and the record's value."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.arrivals: list[tuple[float, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: str | None = None

    def start(self) -> LogTail:
        """Start reading (waiting for the topic to exist)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def count(self, keep: Callable[[dict[str, Any]], bool] = lambda _v: True) -> int:
        """Records seen whose value `keep` holds."""
        return sum(1 for _t, v in list(self.arrivals) if keep(v))

    def _run(self) -> None:
        settings: dict[str, str | int | float | bool] = {
            "group.id": f"bench-cdc-{os.getpid()}-{self.topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
        }
        consumer = Consumer(client_config(self.bootstrap, **settings))
        try:
            partitions = self._partitions(consumer)
            consumer.assign([TopicPartition(self.topic, p, -2) for p in partitions])
            while not self._stop.is_set():
                messages = consumer.consume(10_000, 0.2)
                at = time.time()
                for message in messages:
                    error, value = message.error(), message.value()
                    if error is not None and error.code() != KafkaError._PARTITION_EOF:
                        self.error = str(error)
                    elif error is None and value:
                        self.arrivals.append((at, json.loads(value)))
        except Exception as exc:  # said by the waits that read `error`
            self.error = str(exc)
        finally:
            consumer.close()

    def _partitions(self, consumer: Consumer) -> list[int]:
        while not self._stop.is_set():
            topic = consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
            if topic is not None and topic.error is None and topic.partitions:
                return sorted(topic.partitions)
            time.sleep(0.2)
        return []


def bulk_insert(postgres: PostgresServer, first: int, rows: int, batch: int) -> dict[str, Any]:
    """Insert ids first..first+rows-1 in transactions of `batch` rows, as fast as they go;
    when it began and when each transaction committed (wall clock)."""
    commits = []
    with source(postgres) as db:
        started = time.time()
        for low in range(first, first + rows, batch):
            high = min(low + batch, first + rows) - 1
            db.execute(
                f"INSERT INTO {BULK} (id, payload) SELECT g, {payload('g')} "
                "FROM generate_series(%s::bigint, %s::bigint) g",
                (low, high),
            )
            commits.append(time.time())
    return {"started": started, "commits": commits}


class PacedInserter:
    """Commits rows into `ticks` at `rate` rows a second on a schedule, one row per
    transaction, or the rows due at once (a small transaction) when it fell behind."""

    MAX_PER_TRANSACTION = 50

    def __init__(self, postgres: PostgresServer, rate: float) -> None:
        self.postgres, self.rate = postgres, rate
        self.rows = self.transactions = self.largest = 0
        self.marks: list[tuple[float, int]] = []  # (moment, rows so far), to find the warm-up
        self.started = self.ended = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PacedInserter:
        """Start inserting."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop inserting."""
        self._stop.set()
        self._thread.join(30)

    def rows_by(self, moment: float) -> int:
        """Rows committed by `moment`: the ids after it were inserted later."""
        return max((n for t, n in self.marks if t <= moment), default=0)

    def _run(self) -> None:
        with source(self.postgres) as db:
            self.started = time.time()
            while not self._stop.is_set():
                due = int((time.time() - self.started) * self.rate) - self.rows
                if due <= 0:
                    time.sleep(max(0.0, (self.rows + 1) / self.rate - (time.time() - self.started)))
                    continue
                count = min(due, self.MAX_PER_TRANSACTION)
                low = self.rows + 1
                if count == 1:
                    db.execute(
                        f"INSERT INTO {TICKS} (id, payload) VALUES (%s, {payload('%s::text')})",
                        (low, low),
                    )
                else:
                    db.execute(
                        f"INSERT INTO {TICKS} (id, payload) SELECT g, {payload('g')} "
                        "FROM generate_series(%s::bigint, %s::bigint) g",
                        (low, low + count - 1),
                    )
                self.rows += count
                self.transactions += 1
                self.largest = max(self.largest, count)
                self.marks.append((time.time(), self.rows))
            self.ended = time.time()
