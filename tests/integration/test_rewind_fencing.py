"""A rewind cannot be undone by the process it rewinds.

Under the spark-operator runtime a stopped revision's driver can outlive its SparkApplication by
its pod's grace period, and it commits its batches meanwhile. Here the runner plays that
lingering driver: it keeps running, with records arriving, while the group is moved back to the
start of the input as a rewind moves it (`kafka.rewinds.move_group`, with the revision's
transactional id). The move fences the runner first, so its next batch's transaction, which
would commit the group's offsets past the rewind, is refused: the group stays exactly where the
rewind put it, the runner reports the revision Failed because another process took it over, and
nothing of the refused batch is visible to committed readers. The dead-letter count the group
carried survives the move.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import pytest
from tests.integration.spark_pipelines import (
    PipelineRun,
    committed_total,
    produce,
    progress_of,
    read_topic,
    values,
)

from distributary.api.common import Position
from distributary.kafka.rewinds import move_group, rewind_offsets
from distributary.local.broker import EmbeddedBroker
from distributary.plan.revisions.delivery import read_marker

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: fence-events}
spec:
  partitions: 2
  schema: seq INT, amount INT
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: fence-copies}
spec:
  inputs: [{log: fence-events, alias: events}]
  sql: SELECT seq, amount FROM events
  output: {mode: append}
  spark: {trigger: 200ms, maxOffsetsPerTrigger: 10}
"""
VIEW = "fence-copies"


@dataclass
class Fenced:
    moved_to: dict[str, dict[int, int]]
    after: dict[str, dict[int, int]]
    progress: dict[str, Any]
    written_before: int
    output: Any
    dead_letters_before: int
    dead_letters_after: int
    log: str


@pytest.fixture(scope="module")
def fenced(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fenced]:
    run = PipelineRun(tmp_path_factory.mktemp("fence"), PIPELINE, broker.bootstrap_servers)
    spec = run.view(VIEW)
    topic = spec.inputs[0].topic
    stop = threading.Event()
    seq = iter(range(10**6))

    def append(count: int) -> None:
        good = [(n % 2, None, b'{"seq": %d, "amount": 1}' % n) for n in islice(seq, count)]
        produce(run.bootstrap, topic, [*good, (0, None, b"not json")])

    def keep_appending() -> None:
        while not stop.wait(0.2):
            append(1)

    appender = threading.Thread(target=keep_appending, daemon=True)
    try:
        append(30)
        run.start()
        run.wait_until(
            lambda c, _: committed_total(c) >= 31, "reading the first records", [VIEW], timeout=240
        )
        appender.start()
        group = spec.consumer_group
        letters_before = read_marker(run.admin.committed_metadata(group)).dead_letters
        moves = rewind_offsets(
            run.admin, group, [topic], Position.model_validate({"from": "Earliest"})
        )
        move_group(run.admin, group, moves, writer=group)  # the runner keeps running
        moved_to = run.admin.committed(group)
        written_before = len(read_topic(run.bootstrap, spec.output.topic if spec.output else ""))
        deadline = time.monotonic() + 60
        while run.local.runner_failed() is None and time.monotonic() < deadline:
            if "was taken by another process" in run.local.runner_log.read_text(errors="replace"):
                break
            time.sleep(0.5)
        time.sleep(3)  # more batches would have come by now
        yield Fenced(
            moved_to=moved_to,
            after=run.admin.committed(group),
            progress=progress_of(run.bootstrap, spec),
            written_before=written_before,
            output=values(read_topic(run.bootstrap, spec.output.topic if spec.output else "")),
            dead_letters_before=letters_before,
            dead_letters_after=read_marker(run.admin.committed_metadata(group)).dead_letters,
            log=run.log_tail(40),
        )
    finally:
        stop.set()
        appender.join(10)
        run.stop()


def test_the_rewind_moved_the_group_to_the_start(fenced: Fenced) -> None:
    assert committed_total(fenced.moved_to) == 0


def test_the_old_process_cannot_move_the_group_after_the_rewind(fenced: Fenced) -> None:
    assert fenced.after == fenced.moved_to, fenced.log


def test_the_old_process_stops_writing_and_says_why(fenced: Fenced) -> None:
    assert fenced.progress["state"] == "Failed", fenced.log
    assert "taken by another process" in fenced.progress["error"]


def test_nothing_of_the_refused_batch_is_visible(fenced: Fenced) -> None:
    assert sum(fenced.output.values()) == fenced.written_before, fenced.log


def test_the_dead_letter_count_survives_the_move(fenced: Fenced) -> None:
    assert fenced.dead_letters_before > 0
    assert fenced.dead_letters_after == fenced.dead_letters_before
