"""A rewind to a place its log does not have is refused while the view runs, and nothing moves.

One pipeline runs throughout: a two-partition Log and a view copying it, with records arriving
all the while; once the view has read the first records, partition 0 loses its first three (the
Admin API's delete_records, as retention would). The view's file then asks, one after the
other, for rewinds the log cannot honour: a partition it does not have, an offset no record has
reached, an offset retention deleted, a time no record has reached, and a time before what
retention kept. Each reconcile says so in the view's Stalled condition, naming the field, and
on stderr; the group's committed offsets never go back, the runner is the same process
throughout and the output has every record exactly once. A rewind the log can honour (to a
time between the first records and the ones that arrived later) then moves the group and
re-reads exactly those later records.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from tests.integration.spark_pipelines import PipelineRun, committed_total, read_topic

from distributary.graph import load_pipeline
from distributary.kafka.cluster import client_config
from distributary.local.broker import EmbeddedBroker

LOG, VIEW = "refusal-events", "refusal-copies"
PIPELINE = f"""
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {{name: {LOG}}}
spec:
  partitions: 2
  schema: seq INT
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {{name: {VIEW}}}
spec:
  inputs: [{{log: {LOG}, alias: events}}]
  sql: SELECT seq FROM events
  spark: {{trigger: 200ms}}
"""
FIRST = range(20)  # stamped two minutes ago; once read, partition 0 loses its first DELETED
DELETED = 3
HOUR_MS, DAY_MS = 3_600_000, 86_400_000


def moment(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def bad_rewinds(now_ms: int) -> dict[str, tuple[dict[str, Any], str]]:
    """Request id -> (where to, what the condition says)."""
    return {
        "no-such-partition": (
            {"from": "Offsets", "offsets": {"5": 0}},
            f"spec.rewind.to.offsets names partition 5, but log {LOG} has 2 partitions (0 to 1)",
        ),
        "past-the-end": (
            {"from": "Offsets", "offsets": {"1": 10**9}},
            "spec.rewind.to.offsets asks for offset 1000000000 of partition 1",
        ),
        "deleted-offset": (
            {"from": "Offsets", "offsets": {"0": 1}},
            f"retention deleted offsets 1 to {DELETED - 1}",
        ),
        "not-reached": (
            {"from": "Timestamp", "timestamp": moment(now_ms + DAY_MS)},
            f"spec.rewind.to.timestamp is {moment(now_ms + DAY_MS)[:19]}",
        ),
        "before-retention": (
            {"from": "Timestamp", "timestamp": moment(now_ms - HOUR_MS)},
            f"has lost records of partition 0 to retention (offsets 0 to {DELETED - 1})",
        ),
    }


@dataclass
class Seen:
    """One bad rewind: the view's conditions, and whether anything moved."""

    conditions: list[dict[str, Any]]
    last_rewind: Any
    committed_before: dict[str, dict[int, int]]
    committed_after: dict[str, dict[int, int]]
    same_runner: bool


@dataclass
class Refusals:
    expected: dict[str, str] = field(default_factory=dict)  # request id -> what is said
    seen: dict[str, Seen] = field(default_factory=dict)
    said: list[str] = field(default_factory=list)
    went_back: list[str] = field(default_factory=list)  # samples of the group moving back
    appended: list[int] = field(default_factory=list)
    output_after_refusals: Counter[int] = field(default_factory=Counter)
    good: dict[str, Any] = field(default_factory=dict)
    output_after_rewind: Counter[int] = field(default_factory=Counter)
    log: str = ""


def append(bootstrap: str, topic: str, seqs: list[int], timestamp_ms: int | None = None) -> None:
    producer = Producer(client_config(bootstrap))
    for seq in seqs:
        stamp = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        value = json.dumps({"seq": seq}).encode()
        producer.produce(topic, value=value, partition=seq % 2, timestamp=stamp)
    assert producer.flush(30) == 0


def with_rewind(run: PipelineRun, folder: Path, request: str, to: dict[str, Any]) -> None:
    """The view's file now asks for the rewind; the run's reconcile reads the new files."""
    rewind = f"  rewind: {json.dumps({'requestId': request, 'to': to})}\n"
    (folder / "pipeline.yaml").write_text(PIPELINE + rewind)
    pipeline = load_pipeline([folder / "pipeline.yaml"])
    assert pipeline.ok, pipeline.problems
    assert run.local.files is not None
    run.local.pipeline = pipeline
    run.local.files.graph = pipeline


def seqs(bootstrap: str, topic: str) -> Counter[int]:
    return Counter(int(r.json()["seq"]) for r in read_topic(bootstrap, topic))


@pytest.fixture(scope="module")
def refusals(
    broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Refusals]:
    folder = tmp_path_factory.mktemp("refusals")
    run = PipelineRun(folder, PIPELINE, broker.bootstrap_servers)
    found = Refusals()
    run.local.say = found.said.append
    spec = run.view(VIEW)
    topic, group = spec.inputs[0].topic, spec.consumer_group
    output = spec.output.topic if spec.output is not None else ""
    start_ms = int(time.time() * 1000)
    append(run.bootstrap, topic, list(FIRST), start_ms - 120_000)
    stop = threading.Event()
    numbers = count(1000)

    def keep_appending() -> None:
        while not stop.wait(0.2):
            seq = next(numbers)
            append(run.bootstrap, topic, [seq])
            found.appended.append(seq)

    def watch_group() -> None:  # the group's offsets, sampled: they must never go back
        last: dict[int, int] = {}
        while not stop.wait(0.1):
            now = run.admin.committed(group).get(topic, {})
            back = [p for p, at in now.items() if at < last.get(p, 0)]
            if back:
                found.went_back.append(f"{last} -> {now}")
            last = {p: max(at, last.get(p, 0)) for p, at in now.items()}

    threads = [threading.Thread(target=f, daemon=True) for f in (keep_appending, watch_group)]
    try:
        run.start()
        run.wait_until(
            lambda c, _: committed_total(c) >= len(FIRST), "reading the first records", [VIEW], 240
        )
        client = AdminClient(client_config(run.bootstrap))
        for future in client.delete_records([TopicPartition(topic, 0, DELETED)]).values():
            future.result(timeout=30)
        for thread in threads:
            thread.start()
        time.sleep(1)
        runner = run.local.runner
        for request, (to, said) in bad_rewinds(int(time.time() * 1000)).items():
            found.expected[request] = said
            with_rewind(run, folder, request, to)
            before = run.admin.committed(group)
            run.local.reconcile()
            run.start()  # a round's end: the runner restarts only if what it runs changed
            assert run.local.revisions is not None
            status = run.local.revisions.status("DerivedView", f"default/{VIEW}")
            found.seen[request] = Seen(
                status.get("conditions") or [],
                status.get("lastRewind"),
                before,
                run.admin.committed(group),
                run.local.runner is runner and runner is not None and runner.poll() is None,
            )
            time.sleep(0.5)  # batches go on meanwhile
        stop.set()
        for thread in threads:
            thread.join(10)
        run.wait_caught_up([VIEW], timeout=60)
        found.output_after_refusals = seqs(run.bootstrap, output)
        # A rewind the log can honour: to between the first records and the later ones.
        with_rewind(run, folder, "between", {"from": "Timestamp", "timestamp": moment(start_ms)})
        run.local.reconcile()
        run.start()  # the runner starts again, on the rewind's checkpoint
        run.wait_caught_up([VIEW], timeout=120)
        assert run.local.revisions is not None
        status = run.local.revisions.status("DerivedView", f"default/{VIEW}")
        found.good = {"lastRewind": status.get("lastRewind"), "conditions": status["conditions"]}
        found.output_after_rewind = seqs(run.bootstrap, output)
        found.log = run.log_tail(40)
        yield found
    finally:
        stop.set()
        run.stop()


@pytest.mark.parametrize("request_id", list(bad_rewinds(0)))
def test_the_refusal_names_the_field_in_the_stalled_condition(
    refusals: Refusals, request_id: str
) -> None:
    said = refusals.expected[request_id]
    seen = refusals.seen[request_id]
    stalled = next(c for c in seen.conditions if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "RewindRefused")
    to, _ = bad_rewinds(0)[request_id]
    field = "offsets" if to["from"] == "Offsets" else "timestamp"
    assert f"spec.rewind.to.{field}" in stalled["message"]
    assert said in stalled["message"]
    assert any(said in line and "warning" in line for line in refusals.said), refusals.said


@pytest.mark.parametrize("request_id", list(bad_rewinds(0)))
def test_nothing_moves(refusals: Refusals, request_id: str) -> None:
    seen = refusals.seen[request_id]
    assert seen.last_rewind is None
    assert seen.same_runner, refusals.log
    for partition, at in seen.committed_before.get(LOG, {}).items():
        assert seen.committed_after[LOG][partition] >= at


def test_the_group_never_went_back_and_every_record_was_written_once(refusals: Refusals) -> None:
    assert not refusals.went_back
    assert refusals.appended  # records arrived while the rewinds were refused
    expected = Counter([*FIRST, *refusals.appended])
    assert refusals.output_after_refusals == expected, refusals.log


def test_a_rewind_the_log_can_honour_then_moves_the_group_and_reads_again(
    refusals: Refusals,
) -> None:
    last = refusals.good["lastRewind"]
    assert (last["requestId"], last["phase"]) == ("between", "Done")
    assert not [c for c in refusals.good["conditions"] if c["reason"] == "RewindRefused"]
    again = refusals.output_after_rewind - refusals.output_after_refusals
    assert again == Counter(refusals.appended), refusals.log
