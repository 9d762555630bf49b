"""A view edited while records keep arriving cuts over: real API server, broker and Spark.

Records are appended at a steady rate (about 40 a second) from before revision 1 starts until
after revision 2 serves, as in production, where a lag of exactly 0 never comes. Revision 1 is
CaughtUp while it keeps up; the SQL edit starts revision 2 from the start of the input, and once
it is behind by no more than what arrives in its cutover window, it serves. When the producer
stops, revision 2's topic must hold exactly what the new query makes of every record appended,
no more and no fewer.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest
from tests.integration.kube.operator_harness import Cluster, Operator, is_true, waiting
from tests.integration.spark_pipelines import SteadyProducer, read_topic

from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker

NAMESPACE = "live-cutover-test"
OPERATOR_FLAGS = ("--spark-runtime", "local")
EVENTS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "lc-events"},
    "spec": {"partitions": 2, "schema": SteadyProducer.SCHEMA},
}


def big(threshold: int) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "lc-big"},
        "spec": {
            "inputs": [{"log": "lc-events", "alias": "events"}],
            "sql": f"SELECT id, user, amount FROM events WHERE amount >= {threshold}",
            "upgrade": {"cutoverWindow": "3s"},
            "spark": {"trigger": "500ms"},
        },
    }


def status(cluster: Cluster) -> dict[str, Any]:
    return (cluster.get("dview", "lc-big") or {}).get("status") or {}


def values(broker: EmbeddedBroker, topic: str) -> Counter[tuple[int, str, int]]:
    rows = [json.loads(r.value) for r in read_topic(broker.bootstrap_servers, topic) if r.value]
    return Counter((r["id"], r["user"], r["amount"]) for r in rows)


def expected(records: list[dict[str, Any]], threshold: int) -> Counter[tuple[int, str, int]]:
    return Counter((r["id"], r["user"], r["amount"]) for r in records if r["amount"] >= threshold)


@pytest.fixture(scope="module")
def live(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Revision 1 keeping up with live input, the edit, and revision 2 serving, while records
    arrive throughout; then the producer stops and revision 2 reads the rest."""
    cluster.apply(EVENTS)
    waiting(
        operator, "Log lc-events Ready", lambda: is_true(cluster.get("dlog", "lc-events"), "Ready")
    )
    producer = SteadyProducer(broker.bootstrap_servers, "lc-events").start()
    seen: dict[str, Any] = {}
    try:
        cluster.apply(big(10))
        found = lambda: cluster.get("dview", "lc-big")  # noqa: E731
        waiting(
            operator,
            "revision 1 keeping up with live input",
            lambda: is_true(found(), "CaughtUp") and status(cluster).get("servingRevision") == 1,
            timeout=240,
        )
        seen["caught_up_reason"] = next(
            c["reason"] for c in status(cluster)["conditions"] if c["type"] == "CaughtUp"
        )
        cluster.apply(big(15))
        waiting(
            operator,
            "revision 2 serving while records arrive",
            lambda: status(cluster).get("servingRevision") == 2,
            timeout=300,
        )
        seen["sent_at_cutover"] = len(producer.sent)
        time.sleep(2)  # records still arrive after the cutover
    finally:
        records = producer.stop()
    ends = sum(
        KafkaAdmin(broker.bootstrap_servers).end_offsets(["lc-events"])["lc-events"].values()
    )
    waiting(
        operator,
        "revision 2 has read every record",
        lambda: status(cluster).get("lag") == 0 and sum(position(cluster).values()) == ends,
        timeout=240,
    )
    return seen, records


def position(cluster: Cluster) -> dict[str, int]:
    inputs = status(cluster).get("inputs") or [{}]
    return {p: int(o) for p, o in (inputs[0].get("position") or {}).items()}


def test_revision_1_keeps_up_and_is_caught_up_while_records_arrive(
    live: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    seen, _ = live
    assert seen["caught_up_reason"] in ("KeepingUp", "NoLag")


def test_the_edit_cuts_over_while_records_keep_arriving(
    live: tuple[dict[str, Any], list[dict[str, Any]]], cluster: Cluster
) -> None:
    seen, records = live
    assert len(records) > seen["sent_at_cutover"]  # the producer ran on past the cutover
    rows = {r["revision"]: r["phase"] for r in status(cluster)["revisions"]}
    assert rows == {1: "Retiring", 2: "Serving"}
    assert (cluster.get("dlog", "lc-big") or {})["status"]["topicName"] == "lc-big.r2"


def test_revision_2_holds_exactly_what_the_new_query_makes_of_every_record(
    live: tuple[dict[str, Any], list[dict[str, Any]]], broker: EmbeddedBroker
) -> None:
    _, records = live
    assert values(broker, "lc-big.r2") == expected(records, 15)
