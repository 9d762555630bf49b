"""A Sink's process: read a log as a committed reader and keep a store equal to it.

The store (`postgres.PostgresStore`, `redis.RedisStore`) holds the Sink's position beside what it
keeps and applies each poll's records and the position they end at in one transaction, skipping
records before the position. This loop reads from that position, refuses to start when retention
has removed records the store never got, and mirrors the position to the Sink's consumer group
for Kafka's own tools.

A plain Kafka consumer rather than a Spark query: every write of a store goes through one
connection, so Spark's executors would add a JVM and a checkpoint and nothing that makes the
store more right; the exactly-once guarantee is the store's transaction.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Protocol

import psycopg
import redis

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.connection import client_settings
from distributary.kafka.records import Record, TopicReader
from distributary.plan.sinks.sink_plan import REFUSED_METADATA, SinkRun
from distributary.sinks.postgres import (
    PostgresStore,
    SinkRefusedError,
    connect_sink,
    reader_positions,
)
from distributary.sinks.redis import RedisStore

REFUSED = 3  # the exit code of a Sink that refuses its store
BATCH = 5000  # records a poll brings at most
MIRROR_EVERY = 2.0  # seconds between mirrorings of the position to the consumer group
STOP = {"requested": False}


class Store(Protocol):
    """Where a Sink keeps a log's records and its position, in one transaction."""

    @property
    def filling(self) -> bool: ...  # a new revision's table, beside the one readers read
    def positions(self) -> dict[int, int]: ...
    def apply(self, records: Sequence[Record]) -> int: ...
    def switch(self) -> str | None: ...
    def close(self) -> None: ...


def open_store(run: SinkRun) -> Store:
    """The Sink's store, made ready (a table created or migrated, a server answering)."""
    return RedisStore(run) if run.store == "redis" else PostgresStore(run)


class StoreReadError(RuntimeError):
    """A Sink's store could not be read; the message is the store's."""


def held_positions(run: SinkRun) -> dict[int, int]:
    """The position a Sink's store holds, committed with its rows (none before its first
    batch): what readers of the table or keys can rely on (`distributary wait`)."""
    try:
        if run.store == "redis":
            store = RedisStore(run)
            try:
                return store.reader_positions()
            finally:
                store.close()
        with connect_sink(run) as db:
            return reader_positions(db, run)
    except psycopg.errors.UndefinedTable:
        return {}
    except (psycopg.Error, redis.RedisError) as exc:
        raise StoreReadError(str(exc)) from None


def run_sink(run: SinkRun, stop: Callable[[], bool] = lambda: STOP["requested"]) -> None:
    """Keep the store equal to the log until asked to stop."""
    client = client_settings(run.kafka_security)
    admin = KafkaAdmin(run.bootstrap_servers, client=client)
    store = open_store(run)
    reader = TopicReader(run.bootstrap_servers, client=client)
    where = run.table if run.store == "postgres" else f"Redis keys {run.key_prefix}<key>"
    try:
        partitions = reader.watermarks(run.topic)
        start = store.positions()
        lost = {p: (start[p], first) for p, (first, _) in partitions.items()
                if p in start and start[p] < first}  # fmt: skip
        if lost:
            raise SinkRefusedError(
                f"records of {run.topic} were deleted before this Sink applied them "
                f"(partition: (position, first kept) {lost}): the store would miss them; "
                "write to a new table (or key prefix) to build it from what the log keeps"
            )
        at = {p: start.get(p, first) for p, (first, _end) in partitions.items()}
        if store.filling:
            where = f"{where} (filled beside it, then switched to, as a new revision)"
        print(f"sink {run.name}: {run.topic} -> {where} from {at}", flush=True)
        mirrored = 0.0
        for batch in reader.batches({run.topic: at}, stop, size=BATCH):
            if batch:
                store.apply(batch)
                for record in batch:
                    at[record.partition] = max(at[record.partition], record.offset + 1)
            if store.filling and len(batch) < BATCH:
                # The poll drained what the topic had: the new revision's table is whole (up
                # to what arrived since), and readers switch to it in one transaction.
                done = store.switch()
                if done:
                    print(f"sink {run.name}: {done}", flush=True)
            if time.monotonic() - mirrored >= MIRROR_EVERY:
                mirrored = time.monotonic()
                # Everything before the reader's position is applied (or is a transaction
                # marker): so the group shows no lag once the store holds the whole log.
                for partition, offset in reader.positions(run.topic).items():
                    at[partition] = max(at.get(partition, 0), offset)
                try:
                    admin.commit(run.group, {run.topic: dict(at)})
                except Exception as exc:  # the store's position is the one that counts
                    print(f"sink {run.name}: mirroring to {run.group}: {exc}", flush=True)
    finally:
        reader.close()
        store.close()


def say_refused(run: SinkRun, reason: str) -> None:
    """Leave the refusal where the operator reads it without reaching the process: the
    metadata of the Sink's group's commit (its position kept), cleared by the next mirroring."""
    try:
        client = client_settings(run.kafka_security)
        admin = KafkaAdmin(run.bootstrap_servers, client=client)
        held = admin.committed(run.group).get(run.topic) or {}
        if not held:
            with TopicReader(run.bootstrap_servers, client=client) as reader:
                held = {p: first for p, (first, _) in reader.watermarks(run.topic).items()}
        text = (REFUSED_METADATA + reason)[:3000]
        admin.commit(run.group, {run.topic: held}, metadata=text)
    except Exception as exc:  # the exit code and the output say it still
        print(f"sink {run.name}: recording the refusal in {run.group}: {exc}", flush=True)


def _stop(_signum: int, _frame: FrameType | None) -> None:
    STOP["requested"] = True


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m distributary.sinks --spec FILE`."""
    parser = argparse.ArgumentParser(prog="python -m distributary.sinks")
    parser.add_argument("--spec", required=True, type=Path)
    args = parser.parse_args(argv)
    run = SinkRun.model_validate_json(args.spec.read_text("utf-8"))
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        run_sink(run)
    except SinkRefusedError as exc:
        print(f"sink {run.name}: refused: {exc}", file=sys.stderr, flush=True)
        say_refused(run, str(exc))
        return REFUSED
    except (psycopg.Error, redis.RedisError, OSError) as exc:
        print(f"sink {run.name}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
