"""The DerivedView controller on a real API server, a real broker and real Spark (`local` runtime).

A view applied with kubectl gets its output Log as a child, its revision's topic and a runner
process; records appended to its input reach its output, and it reports Ready and CaughtUp with
lag 0. Killing the operator and starting it again converges without a second runner or child.
Dead-letter topics are never compacted and kept as each view says; a record that does not parse
is counted in the view's status and metrics.
Deleting the views stops their runners, garbage collection deletes their output Logs, and
with them the serving topic of the one whose output says `deletionPolicy: Delete`.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kube.operator_harness import (
    Cluster,
    Operator,
    is_true,
    read_to_the_end,
    wait_for,
    waiting,
)
from tests.integration.spark_pipelines import read_topic

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.records import produce
from distributary.local.broker import EmbeddedBroker
from distributary.plan.applications.runner_spec import dead_letter_topic
from distributary.schema import EncodedRecord, RecordSchema

NAMESPACE = "views-test"
OPERATOR_FLAGS = ("--spark-runtime", "local")
SCHEMA = "user STRING, amount INT"
DAY_MS = 24 * 3600 * 1000
EVENTS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "vc-events"},
    "spec": {"partitions": 2, "schema": SCHEMA, "key": ["user"]},
}
BIG = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": "vc-big"},
    "spec": {
        "inputs": [{"log": "vc-events", "alias": "events"}],
        "sql": "SELECT user, amount FROM events WHERE amount >= 10",
        "output": {"mode": "append", "deletionPolicy": "Delete"},
        "spark": {"trigger": "2s"},
        "deadLetters": {"retention": "3d"},
    },
}

PER_USER = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": "vc-per-user"},
    "spec": {
        "inputs": [{"log": "vc-big", "alias": "big"}],
        "sql": "SELECT user, count(*) AS buys, sum(amount) AS total FROM big GROUP BY user",
        "output": {"mode": "upsert", "key": ["user"]},
        "spark": {"trigger": "2s"},
    },
}


def append(broker: EmbeddedBroker, first: int, count: int) -> list[dict[str, Any]]:
    schema = RecordSchema.parse(SCHEMA, ["user"])
    records = [{"user": f"u{i % 3}", "amount": i % 20} for i in range(first, first + count)]
    produce(broker.bootstrap_servers, "vc-events", [schema.encode(r) for r in records])
    return records


def caught_up(cluster: Cluster, broker: EmbeddedBroker, name: str = "vc-big") -> bool:
    """Ready, CaughtUp, lag 0 and every record the broker has now read."""
    return read_to_the_end(cluster.get("dview", name), broker.bootstrap_servers)


def runners(operator: Operator) -> list[int]:
    """Pids of runner processes started for this test's views."""
    found = []
    for pid_file in (operator.folder / "local").rglob("runner.pid"):
        try:  # a runner that stops removes its file, maybe between the listing and the read
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if b"distributary.runner" in cmdline:
            found.append(pid)
    return found


@pytest.fixture(scope="module")
def running(cluster: Cluster, operator: Operator, broker: EmbeddedBroker) -> list[dict[str, Any]]:
    cluster.apply(EVENTS)
    wait_for("Log vc-events Ready", lambda: is_true(cluster.get("dlog", "vc-events"), "Ready"))
    records = append(broker, 0, 40)
    cluster.apply(BIG, PER_USER)
    try:
        wait_for(
            "both views Ready and CaughtUp",
            lambda: (
                caught_up(cluster, broker, "vc-big") and caught_up(cluster, broker, "vc-per-user")
            ),
            timeout=240,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{operator.logs()}") from None
    return records


def test_records_appended_to_the_input_reach_the_output(
    running: list[dict[str, Any]], cluster: Cluster, broker: EmbeddedBroker
) -> None:
    status = (cluster.get("dview", "vc-big") or {})["status"]
    assert status["outputTopic"] == "vc-big.r1"
    assert status["servingRevision"] == 1
    assert status["lag"] == 0
    written = [
        json.loads(r.value) for r in read_topic(broker.bootstrap_servers, "vc-big.r1") if r.value
    ]
    expected = [r for r in running if r["amount"] >= 10]
    assert sorted(written, key=json.dumps) == sorted(expected, key=json.dumps)


def test_a_view_of_a_view_reads_the_serving_revisions_topic(
    running: list[dict[str, Any]], cluster: Cluster, broker: EmbeddedBroker
) -> None:
    child = cluster.get("dlog", "vc-big") or {}
    assert child["status"]["topicName"] == "vc-big.r1"  # the child Log serves revision 1's topic
    status = (cluster.get("dview", "vc-per-user") or {})["status"]
    assert status["inputs"][0]["topic"] == "vc-big.r1"
    table: dict[str, Any] = {}
    for record in read_topic(broker.bootstrap_servers, "vc-per-user.r1"):
        if record.key is not None and record.value is not None:
            table[record.key.decode()] = json.loads(record.value)
    expected: dict[str, Any] = {}
    for r in running:
        if r["amount"] >= 10:
            row = expected.setdefault(r["user"], {"user": r["user"], "buys": 0, "total": 0})
            row["buys"] += 1
            row["total"] += r["amount"]
    assert {json.loads(k)["user"]: v for k, v in table.items()} == expected


def test_what_the_operator_did_is_in_the_views_and_logs_events(
    running: list[dict[str, Any]], cluster: Cluster
) -> None:
    """Events posted from kopf's handlers and from the observer alike, as `kubectl describe`
    shows them."""
    listed = json.loads(cluster.kubectl("get", "events", "-n", cluster.namespace, "-o", "json"))
    said = {
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"], e["type"])
        for e in listed["items"]
    }
    assert ("DerivedView", "vc-big", "StartRevision", "Normal") in said, sorted(said)
    assert ("Log", "vc-events", "CreateTopic", "Normal") in said, sorted(said)


def test_the_output_log_is_a_child_of_the_view(
    running: list[dict[str, Any]], cluster: Cluster
) -> None:
    child = cluster.get("dlog", "vc-big")
    assert child is not None
    owners = child["metadata"]["ownerReferences"]
    view = cluster.get("dview", "vc-big") or {}
    assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [
        ("DerivedView", "vc-big", view["metadata"]["uid"])
    ]
    assert child["spec"]["schema"] == SCHEMA


def test_positions_are_in_the_consumer_group_status_and_metrics(
    running: list[dict[str, Any]], cluster: Cluster, broker: EmbeddedBroker, operator: Operator
) -> None:
    admin = KafkaAdmin(broker.bootstrap_servers)
    committed = admin.committed("distributary.views-test.vc-big.r1")
    status = (cluster.get("dview", "vc-big") or {})["status"]
    assert status["inputs"][0]["position"] == {str(p): o for p, o in committed["vc-events"].items()}
    assert sum(committed["vc-events"].values()) == len(running)
    # The input Log lists the view among its subscribers, with the same position.

    def subscriber() -> dict[str, Any] | None:
        found = ((cluster.get("dlog", "vc-events") or {}).get("status") or {}).get("subscribers")
        return next((s for s in found or [] if s["name"] == "vc-big"), None)

    listed = wait_for("vc-big among vc-events' subscribers", subscriber)
    metrics = urllib.request.urlopen(operator.metrics_url, timeout=5).read().decode()
    lag = [
        line
        for line in metrics.splitlines()
        if line.startswith("distributary_view_lag_records{") and 'view="vc-big"' in line
    ]
    assert lag, "no lag metric for vc-big"
    assert lag[0].endswith(" 0.0")
    assert listed["consumerGroup"] == "distributary.views-test.vc-big.r1"
    assert listed["position"] == status["inputs"][0]["position"]


def test_a_killed_operator_restarts_without_a_second_runner(
    running: list[dict[str, Any]], cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    before = runners(operator)
    assert len(before) == 2  # one runner per view
    operator.kill()
    more = append(broker, 40, 20)
    operator.start()
    wait_for(
        "caught up with the new records",
        lambda: (
            caught_up(cluster, broker)
            and sum(
                KafkaAdmin(broker.bootstrap_servers)
                .committed("distributary.views-test.vc-big.r1")
                .get("vc-events", {})
                .values()
            )
            == len(running) + len(more)
        ),
        timeout=120,
    )
    assert sorted(runners(operator)) == sorted(before)  # the same processes, adopted


def test_dead_letter_topics_are_never_compacted_and_kept_as_the_view_says(
    running: list[dict[str, Any]], broker: EmbeddedBroker
) -> None:
    """The direct backend's topics as the broker has them: the upsert view's output compacted,
    its dead letters not (a dead letter may have no key), each view's kept as it says."""
    admin = KafkaAdmin(broker.bootstrap_servers)
    output = admin.describe_topic("vc-per-user.r1")
    assert output is not None
    assert output.configs.get("cleanup.policy") == "compact"
    for view, retention_ms in (("vc-per-user", 7 * DAY_MS), ("vc-big", 3 * DAY_MS)):
        letters = admin.describe_topic(dead_letter_topic(NAMESPACE, view))
        assert letters is not None, view
        assert letters.configs.get("cleanup.policy") == "delete", (view, letters.configs)
        assert letters.configs.get("retention.ms") == str(retention_ms), (view, letters.configs)


def test_a_record_that_does_not_parse_is_counted_in_status_and_metrics(
    running: list[dict[str, Any]], cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    produce(broker.bootstrap_servers, "vc-events", [EncodedRecord(None, b"not json at all")])

    def counted() -> dict[str, Any] | None:
        status = (cluster.get("dview", "vc-big") or {}).get("status") or {}
        rows = {r["revision"]: r for r in status.get("revisions") or []}
        return status if rows.get(1, {}).get("deadLetters") == 1 else None

    status = waiting(operator, "vc-big's revision 1 counting one dead letter", counted, 120)
    assert status["deadLetters"] == 1  # the serving revision's
    letters = read_topic(broker.bootstrap_servers, dead_letter_topic(NAMESPACE, "vc-big"))
    assert [r.value for r in letters] == [b"not json at all"]
    assert [r.key for r in letters] == [None]  # kept: the topic is not compacted

    def published() -> list[str]:
        text = urllib.request.urlopen(operator.metrics_url, timeout=5).read().decode()
        return [
            line
            for line in text.splitlines()
            if line.startswith("distributary_view_dead_letters{")
            and 'view="vc-big"' in line
            and 'revision="1"' in line
            and line.endswith(" 1.0")
        ]

    waiting(operator, "the dead-letter metric of vc-big's revision 1", published, 30)


def test_deleting_the_views_stops_their_runners_and_keeps_data_as_the_policy_says(
    running: list[dict[str, Any]], cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    cluster.kubectl(
        "delete", "dview", "vc-big", "vc-per-user", "-n", cluster.namespace, "--timeout=60s"
    )
    wait_for("the output Log garbage-collected", lambda: cluster.get("dlog", "vc-big") is None)
    wait_for("the runner stopped", lambda: not runners(operator), timeout=90)
    # vc-big's output says deletionPolicy: Delete, vc-per-user's keeps the default, Retain.
    admin = KafkaAdmin(broker.bootstrap_servers)
    wait_for("vc-big.r1 deleted", lambda: admin.describe_topic("vc-big.r1") is None)
    assert admin.describe_topic("vc-per-user.r1") is not None
