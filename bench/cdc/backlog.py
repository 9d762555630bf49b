"""The two appliers bench/cdc compares on one Log's backlog: the Sink's own process
(`python -m distributary.sinks --spec FILE` on the spec `distributary run` would give it), whose
progress is read from its position in the serving database, and a plain consumer upserting with
the same driver, which notes its own commits. Both yield (moment, rows applied) samples.
"""

from __future__ import annotations

import bisect
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition
from parts import ROOT, SERVING_DB, serving

from distributary.devtools.postgres import PostgresServer
from distributary.kafka.cluster import client_config
from distributary.plan.sinks.sink_plan import SinkRun
from distributary.sql import parse_ddl

SAMPLE_EVERY = 0.02  # seconds between readings of a Sink's position


class SinkPosition:
    """Samples how many of a Log's rows a Sink has applied, every SAMPLE_EVERY seconds on a
    thread of its own: its position in `distributary_sink_offsets` (one indexed read, cheap
    beside the Sink's work), as rows through the Log's record offsets (a transaction's commit
    marker takes an offset too)."""

    def __init__(self, postgres: PostgresServer, sink: str, offsets: dict[int, list[int]]) -> None:
        self.postgres, self.sink, self.offsets = postgres, sink, offsets
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> SinkPosition:
        """Start sampling."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join(30)

    def last(self) -> int:
        """Rows applied, as last sampled."""
        return self.samples[-1][1] if self.samples else 0

    def _run(self) -> None:
        with serving(self.postgres) as db:
            while not self._stop.wait(SAMPLE_EVERY):
                rows = []
                if db.execute(
                    "SELECT to_regclass('public.distributary_sink_offsets')"
                ).fetchone() != (None,):
                    rows = db.execute(
                        "SELECT partition, next_offset FROM public.distributary_sink_offsets "
                        "WHERE sink = %s",
                        (self.sink,),
                    ).fetchall()
                applied = sum(
                    bisect.bisect_left(self.offsets.get(int(p), []), int(o)) for p, o in rows
                )
                self.samples.append((time.time(), applied))


def record_offsets(bootstrap: str, topic: str) -> tuple[dict[int, list[int]], dict[int, int]]:
    """The offsets of a topic's records (committed, in order) per partition, and its end
    offsets: the difference is the transactions' commit markers."""
    settings: dict[str, str | int | float | bool] = {
        "group.id": f"bench-cdc-offsets-{os.getpid()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
    }
    consumer = Consumer(client_config(bootstrap, **settings))
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
        found: dict[int, list[int]] = {p: [] for p in partitions}
        consumer.assign([TopicPartition(topic, p, -2) for p in partitions])
        left = {p for p in partitions if ends[p] > 0}
        while left:
            for message in consumer.consume(10_000, 1.0):
                error, partition = message.error(), message.partition() or 0
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    left.discard(partition)
                elif error is None:
                    found[partition].append(message.offset() or 0)
    finally:
        consumer.close()
    return {p: sorted(o) for p, o in found.items()}, ends


def log_columns(ddl: str) -> list[tuple[str, str]]:
    """A Log's columns as a Sink gets them (without `__deleted`)."""
    return [(c.name, c.type) for c in parse_ddl(ddl) if c.name.lower() != "__deleted"]


def sink_spec(
    postgres: PostgresServer, bootstrap: str, topic: str, columns: list[tuple[str, str]],
    table: str, password_file: Path,
) -> SinkRun:  # fmt: skip
    """The process spec `distributary run` would give a Sink of the Log into `table`."""
    return SinkRun(
        name=f"bench/{table}", group=f"distributary.bench.{table}.sink",
        bootstrap_servers=bootstrap, topic=topic, columns=columns, key=["id"], mode="upsert",
        table=f"public.{table}", host=postgres.host, port=postgres.port, database=SERVING_DB,
        user="server", ssl_mode="disable", password_file=str(password_file.resolve()),
    )  # fmt: skip


def start_sink(spec: SinkRun, folder: Path) -> subprocess.Popen[bytes]:
    """`python -m distributary.sinks --spec FILE`, as local/sinks.py starts it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{spec.table.split('.', 1)[1]}.json"
    path.write_text(spec.model_dump_json(indent=2))
    with open(path.with_suffix(".log"), "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "distributary.sinks", "--spec", str(path)],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a Sink finishes its transaction), SIGKILL if it hangs."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def plain_upsert(
    postgres: PostgresServer,
    bootstrap: str,
    topic: str,
    table: str,
    samples: list[tuple[float, int]],
) -> int:
    """The ceiling: a plain committed Kafka consumer reading the topic from its start and
    upserting each poll's records with psycopg 3's executemany (INSERT ... ON CONFLICT DO
    UPDATE), one transaction per poll of at most 5,000 records; the rows written. `samples`
    gets (moment, rows so far) after each commit."""
    with serving(postgres) as db:
        db.execute(
            f"CREATE TABLE {table} (id bigint PRIMARY KEY, payload text, created_at timestamptz)"
        )
    settings: dict[str, str | int | float | bool] = {
        "group.id": f"bench-cdc-plain-{os.getpid()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
    }
    consumer = Consumer(client_config(bootstrap, **settings))
    statement = (
        f"INSERT INTO {table} (id, payload, created_at) VALUES (%s, %s, %s) "
        "ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload, "
        "created_at = EXCLUDED.created_at"
    )
    written = 0
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        left = set(metadata.partitions)
        consumer.assign([TopicPartition(topic, p, -2) for p in left])
        with serving(postgres) as db:
            while left:
                rows = []
                for message in consumer.consume(5000, 0.5):
                    error, raw = message.error(), message.value()
                    if error is not None and error.code() == KafkaError._PARTITION_EOF:
                        left.discard(message.partition())
                    elif error is None and raw:
                        value = json.loads(raw)
                        rows.append((value["id"], value["payload"], value["created_at"]))
                if rows:
                    with db.transaction(), db.cursor() as cursor:
                        cursor.executemany(statement, rows)
                    written += len(rows)
                    samples.append((time.time(), written))
    finally:
        consumer.close()
    return written
