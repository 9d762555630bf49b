"""Killing the runner mid-stream loses nothing: a restart on the same checkpoints finishes the job.

Records keep arriving while the runner works through a backlog in small batches
(`maxOffsetsPerTrigger`), and the runner is killed with SIGKILL (its JVM and Python workers with
it, as a lost node would) between batches' commits. A second runner on the same checkpoints must
leave every expected record in the append view's output (Kafka's sink writes at least once, so a
replayed batch may repeat records, but none may be missing or made up), the upsert view's table
exactly as expected (its state comes back from the checkpoint), and every bad record in the
dead-letter topic, including those of a batch the crash left unchecked.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer
from tests.integration.spark_pipelines import (
    PipelineRun,
    Read,
    RunnerExitedError,
    as_multiset,
    committed_total,
    latest_table,
    progress_of,
    read_topic,
    values,
)

from distributary.kafka.cluster import client_config
from distributary.local.broker import EmbeddedBroker
from distributary.plan.positions import Offsets

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: rk-events}
spec:
  partitions: 2
  format: json
  schema: seq INT, user_id STRING, amount INT
  key: [user_id]
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: rk-copies}
spec:
  inputs: [{log: rk-events, alias: events}]
  sql: SELECT seq, user_id, amount FROM events WHERE amount % 3 <> 0
  output: {mode: append}
  spark: {trigger: 200ms, maxOffsetsPerTrigger: 25}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: rk-totals}
spec:
  inputs: [{log: rk-events, alias: events}]
  sql: |
    SELECT user_id, count(*) AS events, sum(amount) AS total, max(seq) AS last_seq
    FROM events GROUP BY user_id
  output: {mode: upsert, key: [user_id]}
  spark: {trigger: 200ms, maxOffsetsPerTrigger: 25}
"""
EVENTS, APPEND, UPSERT = "rk-events", "rk-copies", "rk-totals"
VIEWS = (APPEND, UPSERT)
BACKLOG = 200
RATE = 5.0  # records/s while the runner works, is killed and restarts
BAD_EVERY = 20
# Spark 4.1.1 (SPARK-55271): a query restarted on a checkpoint whose last batch was planned but
# not committed replays that batch, and its progress report then throws NullPointerException in
# KafkaMicroBatchStream.metrics after the batch committed. The runner restarts such a query from
# its checkpoint (runner.main.MAX_RESTARTS), so the restarted runner must keep running.


def record(seq: int) -> tuple[int, bytes | None, bytes] | dict[str, Any]:
    """Record `seq`: every BAD_EVERY-th one is bad (not JSON, or a wrong type), else good."""
    if seq % BAD_EVERY == BAD_EVERY - 1:
        bad = b"{not json" if seq % (2 * BAD_EVERY) < BAD_EVERY else b'{"seq": "x%d"}' % seq
        return (seq % 2, None, bad)
    return {"seq": seq, "user_id": f"u{seq % 5}", "amount": (seq * 7) % 23}


@dataclass
class Stream:
    """Appends records to the log, from a thread: the backlog at once, then RATE per second."""

    run: PipelineRun
    good: list[dict[str, Any]] = field(default_factory=list)
    bad: set[tuple[int, int]] = field(default_factory=set)  # (partition, offset)
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.producer = Producer(client_config(self.run.bootstrap, **{"linger.ms": 5}))
        self.schema = self.run.schema(EVENTS)
        self.seq = 0

    def append(self, count: int) -> None:
        for _ in range(count):
            item = record(self.seq)
            if isinstance(item, dict):
                encoded = self.schema.encode(item)
                partition, key, value = self.seq % 2, encoded.key, encoded.value
                self.good.append(item)
            else:
                partition, key, value = item
            self.producer.produce(
                self.run.topics[EVENTS],
                key=key,
                value=value,
                partition=partition,
                on_delivery=self._delivered(isinstance(item, tuple)),
            )
            self.seq += 1
        self.producer.flush(30)

    def _delivered(self, bad: bool) -> Any:
        def report(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                self.failures.append(error.str())
            elif bad:
                self.bad.add((message.partition() or 0, message.offset() or 0))

        return report

    def start(self) -> None:
        def produce_steadily() -> None:
            while not self.stop.wait(1 / RATE):
                self.append(1)

        self.thread = threading.Thread(target=produce_steadily, daemon=True)
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)
        assert self.producer.flush(30) == 0
        assert not self.failures, f"Kafka refused records: {self.failures[:3]}"


@dataclass
class Recovery:
    """What a run killed mid-stream and a second run on its checkpoints left behind."""

    run: PipelineRun
    stream: Stream
    at_kill: dict[str, tuple[Offsets, Offsets]]
    restart_failure: str | None  # why the first restart exited, if it did
    appended_at_kill: int
    exit_code: int | None
    outputs: dict[str, list[Read]]
    dead_letters: dict[str, list[Read]]
    progress: dict[str, dict[str, Any]]
    final: dict[str, tuple[Offsets, Offsets]]


def moved_past(before: dict[str, tuple[Offsets, Offsets]]) -> Any:
    """A condition: a view's group has committed more than any view's had in `before`."""
    totals = {committed_total(c) for c, _ in before.values()}
    return lambda committed, _ends: committed_total(committed) > max(totals)


def restart(run: PipelineRun, at_kill: dict[str, tuple[Offsets, Offsets]]) -> str | None:
    """Wait until the restarted runner moves past where it was killed. If it exits instead, say
    why, and start it once more so that the outcome can still be checked."""
    try:
        run.wait_until(moved_past(at_kill), "moving again after the restart", VIEWS, timeout=240)
        return None
    except RunnerExitedError as exited:
        run.kill()  # reaps the exited process
        run.start()
        run.wait_until(moved_past(at_kill), "moving after a second restart", VIEWS, timeout=240)
        return str(exited)


@pytest.fixture(scope="module")
def recovery(
    broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Recovery]:
    run = PipelineRun(tmp_path_factory.mktemp("recovery"), PIPELINE, broker.bootstrap_servers)
    stream = Stream(run)
    try:
        stream.append(BACKLOG)
        run.start()
        run.wait_until(lambda c, _: committed_total(c) > 0, "committing", VIEWS, timeout=240)
        stream.start()
        # A few batches of 25 in, far from done: kill the runner.
        run.wait_until(lambda c, _: committed_total(c) >= 75, "3 batches in", VIEWS, timeout=120)
        at_kill, appended_at_kill = run.positions(VIEWS), stream.seq
        run.kill()
        run.start()
        restart_failure = restart(run, at_kill)
        stream.finish()
        run.wait_caught_up(VIEWS, timeout=180)
        exit_code = run.stop()
        specs = {name: run.view(name) for name in VIEWS}
        yield Recovery(
            run=run,
            stream=stream,
            at_kill=at_kill,
            restart_failure=restart_failure,
            appended_at_kill=appended_at_kill,
            exit_code=exit_code,
            outputs={
                n: read_topic(run.bootstrap, s.output.topic) for n, s in specs.items() if s.output
            },
            dead_letters={
                n: read_topic(run.bootstrap, s.dead_letter_topic) for n, s in specs.items()
            },
            progress={n: progress_of(run.bootstrap, s) for n, s in specs.items()},
            final=run.positions(VIEWS),
        )
    finally:
        stream.stop.set()
        run.stop()


def test_the_runner_was_killed_mid_stream(recovery: Recovery) -> None:
    for view, (committed, ends) in recovery.at_kill.items():
        assert 0 < committed_total(committed) < committed_total(ends), view
    assert recovery.stream.seq > recovery.appended_at_kill  # records kept coming after the kill


def test_the_first_restart_after_a_kill_keeps_running(recovery: Recovery) -> None:
    assert recovery.restart_failure is None, recovery.restart_failure


def test_no_append_record_is_lost_or_made_up(recovery: Recovery) -> None:
    expected = as_multiset(r for r in recovery.stream.good if r["amount"] % 3 != 0)
    written = values(recovery.outputs[APPEND])
    missing = expected - written
    assert not missing, f"{sum(missing.values())} record(s) lost, e.g. {list(missing)[:3]}"
    assert set(written) == set(expected)


def test_the_upsert_table_equals_the_expected_one(recovery: Recovery) -> None:
    expected: dict[str, dict[str, Any]] = {}
    for r in recovery.stream.good:
        user = r["user_id"]
        row = expected.setdefault(
            f'{{"user_id":"{user}"}}', {"user_id": user, "events": 0, "total": 0, "last_seq": 0}
        )
        row["events"] += 1
        row["total"] += r["amount"]
        row["last_seq"] = max(row["last_seq"], r["seq"])
    assert latest_table(recovery.outputs[UPSERT]) == expected


@pytest.mark.parametrize("view", VIEWS)
def test_every_bad_record_reaches_the_dead_letter_topic(recovery: Recovery, view: str) -> None:
    sent = {
        (
            int(r.headers["distributary.source.partition"]),
            int(r.headers["distributary.source.offset"]),
        )
        for r in recovery.dead_letters[view]
    }
    assert len(recovery.stream.bad) >= 15
    assert sent == recovery.stream.bad


@pytest.mark.parametrize("view", VIEWS)
def test_after_the_restart_the_group_is_at_the_end_and_the_runner_stops_cleanly(
    recovery: Recovery, view: str
) -> None:
    committed, ends = recovery.final[view]
    assert committed == ends
    assert committed_total(ends) == recovery.stream.seq
    assert recovery.exit_code == 0, recovery.run.failure("the restarted runner did not exit 0")
    assert recovery.progress[view]["state"] == "Stopped"
