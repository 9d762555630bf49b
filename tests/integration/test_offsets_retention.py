"""A view's position does not vanish while its input is idle.

Kafka deletes a group's committed offsets once the group has committed nothing for
`offsets.retention.minutes`. A view whose input is quiet for longer would lose the position it
resumes from after a lost checkpoint, and its lag would read as unknown. The runner commits an
idle revision's offsets again, every quarter of the broker's retention. On a broker whose
retention is one minute (the shortest Kafka takes), a group committed once beside the view's is
deleted, which shows the broker does expire offsets here, while the view's keeps its position.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.spark_pipelines import PipelineRun, produce

from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: quiet-events}
spec: {partitions: 2, schema: "id INT, user STRING"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: quiet-copy}
spec:
  inputs: [{log: quiet-events, alias: e}]
  sql: SELECT id, user FROM e
  spark: {trigger: 1s}
"""
RETENTION = {"offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "1000"}


@pytest.fixture(scope="module")
def short_retention(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """A broker of its own that deletes offsets one minute after a group's last commit."""
    with EmbeddedBroker(tmp_path_factory.mktemp("retention"), settings=RETENTION) as running:
        yield running


def test_an_idle_views_group_keeps_its_offsets_past_the_brokers_retention(
    short_retention: EmbeddedBroker, tmp_path: Path
) -> None:
    bootstrap = short_retention.bootstrap_servers
    admin = KafkaAdmin(bootstrap)
    run = PipelineRun(tmp_path / "pipeline", PIPELINE, bootstrap)
    topic = run.topics["quiet-events"]
    records = [(i % 2, None, json.dumps({"id": i, "user": f"u{i}"}).encode()) for i in range(40)]
    produce(bootstrap, topic, records)
    run.start()
    try:
        run.wait_caught_up(["quiet-copy"])
        view = admin.committed(run.view("quiet-copy").consumer_group)
        admin.commit("quiet-control", view)  # committed once, never again
        assert admin.committed("quiet-control") == view
        deadline = time.monotonic() + 150
        while admin.committed("quiet-control") and time.monotonic() < deadline:
            time.sleep(2)  # the input stays idle meanwhile
        assert admin.committed("quiet-control") == {}, "the broker never expired the offsets"
        assert admin.committed(run.view("quiet-copy").consumer_group) == view
        assert sum(sum(p.values()) for p in view.values()) == len(records)
    finally:
        run.stop()
