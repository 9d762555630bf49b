"""Views edited while records keep arriving cut over, upstream first: real API server, broker and
Spark.

Records are appended at a steady rate (about 40 a second) from before revision 1 starts until
after every revision 2 serves, as in production, where a lag of exactly 0 never comes. `lc-big`
filters the input; `lc-per-user` counts its output per user. Both keep up at revision
1. Then `lc-big`'s SQL is edited so that its output gains a column: its revision 2 reprocesses
and, once it is behind by no more than what arrives in its cutover window, serves. The reader's
definition changed at the edit (its input's schema), but its revision 2 must start only after
`lc-big` serves revision 2, and read that revision's topic. When the producer stops, both new
revisions must hold exactly what their queries make of every record appended.
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
UPGRADE = {"cutoverWindow": "3s"}


def big(threshold: int, twice: bool = False) -> dict[str, Any]:
    extra = ", amount * 2 AS twice" if twice else ""
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "lc-big"},
        "spec": {
            "inputs": [{"log": "lc-events", "alias": "events"}],
            "sql": f"SELECT id, user, amount{extra} FROM events WHERE amount >= {threshold}",
            "upgrade": UPGRADE,
            "spark": {"trigger": "2s"},
        },
    }


PER_USER = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": "lc-per-user"},
    "spec": {
        "inputs": [{"log": "lc-big", "alias": "big"}],
        "sql": "SELECT user, count(*) AS n FROM big GROUP BY user",
        "output": {"mode": "upsert", "key": ["user"]},
        "upgrade": UPGRADE,
        "spark": {"trigger": "2s"},
    },
}


def status(cluster: Cluster, name: str = "lc-big") -> dict[str, Any]:
    return (cluster.get("dview", name) or {}).get("status") or {}


def rows(cluster: Cluster, name: str) -> dict[int, dict[str, Any]]:
    return {r["revision"]: r for r in status(cluster, name).get("revisions") or []}


def kept(records: list[dict[str, Any]], threshold: int) -> list[dict[str, Any]]:
    return [r for r in records if r["amount"] >= threshold]


def position(cluster: Cluster, name: str) -> int:
    inputs = status(cluster, name).get("inputs") or [{}]
    return sum(int(o) for o in (inputs[0].get("position") or {}).values())


@pytest.fixture(scope="module")
def live(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Revision 1 of both views keeping up with live input, the edit, and both revisions 2
    serving, while records arrive throughout; then the producer stops and they read the rest."""
    cluster.apply(EVENTS)
    log = lambda: cluster.get("dlog", "lc-events")  # noqa: E731
    waiting(operator, "Log lc-events Ready", lambda: is_true(log(), "Ready"))
    producer = SteadyProducer(broker.bootstrap_servers, "lc-events").start()
    seen: dict[str, Any] = {"early": []}
    try:
        cluster.apply(big(10), PER_USER)

        def keeping_up() -> bool:
            """Ready at revision 1, reading, and behind by less than five seconds of input."""
            return all(
                is_true(cluster.get("dview", name), "Ready")
                and status(cluster, name).get("servingRevision") == 1
                and position(cluster, name) > 0
                and (status(cluster, name).get("lag") or 0) < 5 * SteadyProducer.RATE
                for name in ("lc-big", "lc-per-user")
            )

        waiting(operator, "revision 1 of both keeping up with live input", keeping_up, 300)
        seen["lag_before_edit"] = status(cluster).get("lag")
        cluster.apply(big(15, twice=True))

        def both_serve_2() -> bool:
            if 2 in rows(cluster, "lc-per-user") and status(cluster).get("servingRevision") != 2:
                seen["early"].append(rows(cluster, "lc-per-user")[2])  # started too soon
            if status(cluster).get("servingRevision") == 2 and "sent_at_cutover" not in seen:
                seen["sent_at_cutover"] = len(producer.sent)
            return status(cluster, "lc-per-user").get("servingRevision") == 2

        waiting(
            operator,
            "revision 2 of both serving while records arrive",
            both_serve_2,
            600,
            show=lambda: {name: status(cluster, name) for name in ("lc-big", "lc-per-user")},
        )
        time.sleep(2)  # records still arrive after the cutovers
    finally:
        records = producer.stop()
    ends = sum(
        KafkaAdmin(broker.bootstrap_servers).end_offsets(["lc-events"])["lc-events"].values()
    )
    waiting(
        operator,
        "revision 2 of lc-big has read every record",
        lambda: status(cluster).get("lag") == 0 and position(cluster, "lc-big") == ends,
        timeout=240,
    )
    big_ends = sum(
        KafkaAdmin(broker.bootstrap_servers).end_offsets(["lc-big.r2"])["lc-big.r2"].values()
    )
    waiting(
        operator,
        "revision 2 of lc-per-user has read lc-big's",
        lambda: (
            status(cluster, "lc-per-user").get("lag") == 0
            and position(cluster, "lc-per-user") == big_ends
        ),
        timeout=240,
    )
    return seen, records


def test_the_edit_cuts_over_while_records_keep_arriving(
    live: tuple[dict[str, Any], list[dict[str, Any]]], cluster: Cluster
) -> None:
    seen, records = live
    assert len(records) > seen["sent_at_cutover"]  # the producer ran on past the cutover
    assert {r: row["phase"] for r, row in rows(cluster, "lc-big").items()} == {
        1: "Retiring",
        2: "Serving",
    }
    assert (cluster.get("dlog", "lc-big") or {})["status"]["topicName"] == "lc-big.r2"


def test_the_reader_reprocesses_only_after_the_upstream_serves_and_reads_its_new_topic(
    live: tuple[dict[str, Any], list[dict[str, Any]]], cluster: Cluster
) -> None:
    seen, _ = live
    assert seen["early"] == []
    upstream, reader = rows(cluster, "lc-big")[2], rows(cluster, "lc-per-user")[2]
    assert reader["startedAt"] >= upstream["servingSince"]
    assert [i["topic"] for i in reader["inputs"]] == ["lc-big.r2"]
    assert (cluster.get("dlog", "lc-per-user") or {})["status"]["topicName"] == "lc-per-user.r2"


def test_each_new_revision_holds_exactly_what_its_query_makes_of_every_record(
    live: tuple[dict[str, Any], list[dict[str, Any]]], broker: EmbeddedBroker
) -> None:
    _, records = live
    written = [
        json.loads(r.value) for r in read_topic(broker.bootstrap_servers, "lc-big.r2") if r.value
    ]
    assert Counter(tuple(sorted(w.items())) for w in written) == Counter(
        tuple(sorted({**r, "twice": r["amount"] * 2}.items())) for r in kept(records, 15)
    )
    table: dict[str, int] = {}
    for record in read_topic(broker.bootstrap_servers, "lc-per-user.r2"):
        if record.value:
            row = json.loads(record.value)
            table[row["user"]] = row["n"]
    assert table == dict(Counter(r["user"] for r in kept(records, 15)))
