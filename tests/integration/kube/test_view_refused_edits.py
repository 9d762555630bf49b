"""A refused edit changes nothing: real API server, broker and Spark (`local`), records arriving.

`re-view` serves revision 1 while records arrive at a steady rate. Four edits are refused, one
after the other: a Forbidden one (`output.mode` changed under `upgrade.strategy: InPlace`), one
that needs a reprocess under `InPlace` (an edit of a spec that does not run is reprocessed,
whatever it changes), a reprocess over an input whose head retention removed
(HistoryIncomplete), and fewer `output.partitions` than the output topic has. Around each, every
child of the view is read: the output Log (spec, labels, annotations, owner, topic), its topic
(partitions and configs, through the Admin API), revision 1's runner (its process and its spec
file) and the view's revisions as status records them. After the edit, the view is Stalled with
the edit's reason and every child is as it was, except what measures time and lag; revision 1's
output goes on receiving what it makes of new records. Reverting the edit clears the condition.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from tests.integration.kube.operator_harness import Cluster, Operator, condition, is_true
from tests.integration.kube.operator_harness import waiting as harness_waiting
from tests.integration.spark_pipelines import SteadyProducer, read_topic

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.cluster import client_config
from distributary.local.broker import EmbeddedBroker

NAMESPACE = "refused-edits-test"
OPERATOR_FLAGS = ("--spark-runtime", "local")
VIEW = "re-view"
TOPIC = "re-view.r1"
EVENTS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "re-events"},
    "spec": {"partitions": 2, "schema": SteadyProducer.SCHEMA},
}
# What measures time, lag or progress in a revision's row: it moves while nothing changes.
MOVING = {"lag", "inputs", "inputRate", "inputMark", "batchSeconds", "caughtUpSince",
          "progressPercent", "progressMessage", "recordsRead", "recordsTotal"}  # fmt: skip


def derived(threshold: int = 10, **spec: Any) -> dict[str, Any]:
    """The view; revision 1 is `derived()`."""
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": VIEW},
        "spec": {
            "inputs": [{"log": "re-events", "alias": "events"}],
            "sql": f"SELECT id, user, amount FROM events WHERE amount >= {threshold}",
            "output": {"mode": "append", "partitions": 2},
            "upgrade": {"strategy": "InPlace"},
            "spark": {"trigger": "2s"},
            **spec,
        },
    }


def status(cluster: Cluster) -> dict[str, Any]:
    return (cluster.get("dview", VIEW) or {}).get("status") or {}


def runner_folder(operator: Operator) -> Path:
    return operator.folder / "local" / NAMESPACE / VIEW / "r1"


def runner(operator: Operator) -> dict[str, Any]:
    """Revision 1's runner: its process (pid, start time) and its spec file."""
    folder = runner_folder(operator)
    pid = int((folder / "runner.pid").read_text().strip())
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return {"pid": pid, "started": stat[19], "spec": (folder / "runner-spec.json").read_text()}


def children(cluster: Cluster, operator: Operator, admin: KafkaAdmin) -> dict[str, Any]:
    """Every child of the view, without what measures time and lag."""
    log = cluster.get("dlog", VIEW) or {}
    meta = log.get("metadata") or {}
    topic = admin.describe_topic(TOPIC)
    found = status(cluster)
    rows = [{k: v for k, v in r.items() if k not in MOVING} for r in found.get("revisions") or []]
    app = dict(found.get("sparkApplication") or {})
    return {
        "log": {
            "spec": log.get("spec"),
            "generation": meta.get("generation"),
            "labels": meta.get("labels"),
            "annotations": meta.get("annotations"),
            "ownerReferences": meta.get("ownerReferences"),
            "topicName": (log.get("status") or {}).get("topicName"),
        },
        "topic": None if topic is None else (topic.partitions, dict(topic.configs)),
        "runner": runner(operator),
        "view": {
            "servingRevision": found.get("servingRevision"),
            "outputTopic": found.get("outputTopic"),
            "revisions": rows,
            "application": (app.get("name"), app.get("state")),
        },
    }


def written(broker: EmbeddedBroker) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in read_topic(broker.bootstrap_servers, TOPIC) if r.value]


def waiting(operator: Operator, what: str, probe: Any, timeout: float = 120) -> Any:
    return harness_waiting(operator, what, probe, timeout)


@pytest.fixture(scope="module")
def producer(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> Iterator[SteadyProducer]:
    """Revision 1 serving and reading records that keep arriving."""
    cluster.apply(EVENTS)
    waiting(
        operator, "Log re-events Ready", lambda: is_true(cluster.get("dlog", "re-events"), "Ready")
    )
    appending = SteadyProducer(broker.bootstrap_servers, "re-events").start()
    try:
        cluster.apply(derived())
        waiting(
            operator,
            "revision 1 Ready and writing",
            lambda: is_true(cluster.get("dview", VIEW), "Ready") and len(written(broker)) > 0,
            timeout=300,
        )
        yield appending
    finally:
        appending.stop()


def refused(
    cluster: Cluster,
    operator: Operator,
    broker: EmbeddedBroker,
    producer: SteadyProducer,
    edit: dict[str, Any],
    reason: str,
) -> dict[str, Any]:
    """Apply `edit`, wait for Stalled with `reason`; check that every child is as it was and that
    revision 1 goes on with new records. The Stalled condition."""
    admin = KafkaAdmin(broker.bootstrap_servers)
    before = children(cluster, operator, admin)
    ends = sum(admin.end_offsets([TOPIC])[TOPIC].values())
    cluster.apply(edit)

    def stalled() -> dict[str, Any] | None:
        found = cluster.get("dview", VIEW) or {}
        stall = condition(found, "Stalled")
        generation = (found.get("metadata") or {}).get("generation")
        if stall and stall["status"] == "True" and stall["observedGeneration"] == generation:
            return stall
        return None

    stall = waiting(operator, f"Stalled {reason}", stalled)
    assert stall["reason"] == reason, stall
    assert children(cluster, operator, admin) == before  # the refusing reconcile moved nothing
    sent = producer.next
    # Some observer rounds (every 2 s) and reconciles later, still nothing moved.
    waiting(
        operator,
        "revision 1 writing what it makes of records appended after the edit",
        lambda: any(r["id"] >= sent and r["amount"] >= 10 for r in written(broker)),
    )
    assert children(cluster, operator, admin) == before
    assert sum(admin.end_offsets([TOPIC])[TOPIC].values()) > ends
    assert [r["revision"] for r in status(cluster)["revisions"]] == [1]
    return stall


def reverted(cluster: Cluster, operator: Operator) -> None:
    """Apply revision 1's spec again and wait until the view is Ready with no Stalled."""
    cluster.apply(derived())
    waiting(
        operator,
        "the condition cleared after the revert",
        lambda: (
            is_true(cluster.get("dview", VIEW), "Ready")
            and condition(cluster.get("dview", VIEW), "Stalled") is None
        ),
    )


def test_a_forbidden_edit_changes_nothing(
    producer: SteadyProducer, cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    upsert = derived(output={"mode": "upsert", "key": ["id"], "partitions": 2})
    stall = refused(cluster, operator, broker, producer, upsert, "ChangeForbidden")
    assert "output.mode changed from append to upsert" in stall["message"]
    assert "upgrade.strategy to Reprocess" in stall["message"]
    # From the refused spec, an in-place edit needs a reprocess: refused under InPlace too.
    stall = refused(cluster, operator, broker, producer, derived(15), "ReprocessRequired")
    assert "set spec.upgrade.strategy to Reprocess" in stall["message"]
    reverted(cluster, operator)


def test_a_reprocess_over_lost_history_changes_nothing(
    producer: SteadyProducer, cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    client = AdminClient(client_config(broker.bootstrap_servers))
    for future in client.delete_records([TopicPartition("re-events", 0, 4)]).values():
        future.result(timeout=30)  # as retention does: the head of partition 0 is gone
    edit = derived(15, upgrade={"strategy": "Reprocess"})
    stall = refused(cluster, operator, broker, producer, edit, "HistoryIncomplete")
    assert "partition 0 starts at offset 4, not 0" in stall["message"]
    assert "allowPartialHistory: true" in stall["message"]
    reverted(cluster, operator)


def test_fewer_output_partitions_change_nothing(
    producer: SteadyProducer, cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    fewer = derived(output={"mode": "append", "partitions": 1})
    stall = refused(cluster, operator, broker, producer, fewer, "PartitionsLowered")
    assert "spec.output.partitions: 1 is fewer than the 2 partitions" in stall["message"]
    reverted(cluster, operator)
