"""A view's `spec.rewind` in `distributary run`: carried out once, before Spark starts.

Two batches go into the input, the second appended a minute after the first (their record
timestamps say so), and a first run copies both into the view's output. A second run finds a
rewind to a moment between the batches in the view's file: before Spark starts, it moves the
view's consumer group to the first record of the second batch, records the request with every
partition's offsets before and after, and runs the view on a fresh checkpoint, so the output gains
the second batch once more, and nothing else. A third run with the same file does nothing again.
The runs use the session's broker (`--bootstrap-servers`), so the test appends the batches with
the timestamps it chooses.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer
from tests.integration.spark_pipelines import read_topic
from tests.integration.test_local_run import distributary, summary_of

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.cluster import client_config
from distributary.local.broker import EmbeddedBroker
from distributary.plan.kafka_topics.topics import CreateTopic

LOG, VIEW, REQUEST = "rewind-clicks", "rewind-copy", "replay-1"
OUTPUT = f"{VIEW}.r1"
GROUP = f"distributary.default.{VIEW}.r1"

LOGS = f"""
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {{name: {LOG}}}
spec:
  partitions: 2
  schema: "who STRING, n INT"
"""

VIEWS = f"""
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {{name: {VIEW}}}
spec:
  inputs: [{{log: {LOG}, alias: src}}]
  sql: SELECT who, n FROM src
"""


def rewind_to(instant: datetime) -> str:
    moment = instant.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return (
        f"  rewind:\n    requestId: {REQUEST}\n    to: {{from: Timestamp, timestamp: '{moment}'}}\n"
    )


def append(bootstrap: str, batch: range, timestamp_ms: int) -> None:
    """The batch's records, alternating between the partitions, all stamped `timestamp_ms`."""
    producer = Producer(client_config(bootstrap))
    for n in batch:
        value = json.dumps({"who": f"u{n % 3}", "n": n}).encode()
        producer.produce(LOG, value=value, partition=n % 2, timestamp=timestamp_ms)
    assert producer.flush(30) == 0


@dataclass
class Runs:
    """The three runs' results, the output after each, and the state folder."""

    results: list[subprocess.CompletedProcess[str]] = field(default_factory=list)
    outputs: list[list[tuple[int, int, str, int]]] = field(default_factory=list)
    state: Path = Path()
    bootstrap: str = ""


FIRST, SECOND = range(0, 10), range(10, 16)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker) -> Runs:
    folder = tmp_path_factory.mktemp("rewind")
    (folder / "pipeline").mkdir()
    (folder / "pipeline" / "logs.yaml").write_text(LOGS)
    views = folder / "pipeline" / "views.yaml"
    views.write_text(VIEWS)
    found = Runs(state=folder / "state", bootstrap=broker.bootstrap_servers)
    KafkaAdmin(found.bootstrap).create_topic(CreateTopic(LOG, 2, None, {}))
    now = int(time.time() * 1000)
    append(found.bootstrap, FIRST, now - 120_000)
    append(found.bootstrap, SECOND, now - 60_000)
    between = datetime.fromtimestamp((now - 90_000) / 1000, UTC)
    common = ("--state-dir", str(found.state), "--bootstrap-servers", found.bootstrap)

    def run() -> None:
        pipeline = str(folder / "pipeline")
        result = distributary("run", pipeline, *common, "--until-caught-up", "--cores", "2")
        found.results.append(result)
        summary_of(result)
        output = read_topic(found.bootstrap, OUTPUT)
        found.outputs.append(
            [(r.partition, r.offset, r.json()["who"], r.json()["n"]) for r in output]
        )

    run()
    views.write_text(VIEWS + rewind_to(between))
    run()
    run()
    return found


def test_the_first_run_copies_both_batches(runs: Runs) -> None:
    assert sorted(n for *_, n in runs.outputs[0]) == [*FIRST, *SECOND]
    assert "rewound" not in runs.results[0].stderr


def test_the_rewind_reads_the_second_batch_again_and_nothing_else(runs: Runs) -> None:
    before, after = runs.outputs[0], runs.outputs[1]
    assert set(before) <= set(after)  # (partition, offset, who, n): appended to, not rewritten
    again = sorted((who, n) for _, _, who, n in set(after) - set(before))
    assert again == sorted((f"u{n % 3}", n) for n in SECOND)
    summary = summary_of(runs.results[1])
    view = summary["views"][VIEW]
    assert (view["revision"], view["lag"]) == (1, 0)
    assert view["position"] == {LOG: summary["logs"][LOG]["endOffsets"]}


def test_the_run_says_what_it_moved_and_records_it_before_spark_starts(runs: Runs) -> None:
    said = runs.results[1].stderr
    # Each partition: from the end of both batches back to the first record of the second.
    moved = {0: (8, 5), 1: (8, 5)}  # FIRST puts 5 records in each partition, SECOND 3 more
    line = f"view {VIEW}: rewound revision 1 for request {REQUEST}: " + ", ".join(
        f"{LOG}[{p}] {old} -> {new}" for p, (old, new) in moved.items()
    )
    assert line in said
    assert said.index(line) < said.index("Starting Spark")
    entry = json.loads((runs.state / "revisions.json").read_text())["views"][f"default/{VIEW}"]
    [record] = entry["status"]["rewinds"]
    assert (record["requestId"], record["revision"], record["phase"]) == (REQUEST, 1, "Done")
    assert record["offsets"] == [
        {"topic": LOG, "partition": p, "fromOffset": old, "toOffset": new}
        for p, (old, new) in moved.items()
    ]
    assert entry["status"]["revisions"][0]["checkpoint"] == f"rewind-{REQUEST}"
    fresh = runs.state / "checkpoints" / "default" / VIEW / "r1" / f"rewind-{REQUEST}"
    assert (fresh / "offsets").is_dir()
    assert summary_of(runs.results[1])["views"][VIEW]["rewinds"] == [record]
    run_json = json.loads((runs.state / "run.json").read_text())
    assert run_json["views"][VIEW]["rewinds"] == [REQUEST]


def test_a_later_run_does_not_rewind_again(runs: Runs) -> None:
    assert "rewound" not in runs.results[2].stderr
    assert runs.outputs[2] == runs.outputs[1]
    second, third = summary_of(runs.results[1]), summary_of(runs.results[2])
    assert third["views"][VIEW]["position"] == second["views"][VIEW]["position"]
    assert third["views"][VIEW]["rewinds"] == second["views"][VIEW]["rewinds"]
    committed = KafkaAdmin(runs.bootstrap).committed(GROUP)
    assert committed == {LOG: {0: 8, 1: 8}}


def test_the_rewound_run_started_from_the_moved_offsets(runs: Runs) -> None:
    # The runner reports where its run on the rewind's checkpoint began; the move held.
    entry = json.loads((runs.state / "revisions.json").read_text())["views"][f"default/{VIEW}"]
    assert entry["status"]["lastRewind"]["verified"] == "Held"
    assert "did not hold" not in runs.results[1].stderr + runs.results[2].stderr
