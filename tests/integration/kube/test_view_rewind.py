"""Rewinding a running view: real API server, real broker, real Spark (`local` runtime).

A rewind is a spec change with a request id: the operator records the request with each
partition's position before and after, stops the revision, moves its consumer group's offsets
through the Admin API, and starts it again on a fresh checkpoint from there. Rewound to a time,
the view reads again exactly the records appended since that time; the same request is never
carried out twice.
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.integration.kube.operator_harness import Cluster, Operator, is_true, wait_for
from tests.integration.kube.operator_harness import waiting as harness_waiting
from tests.integration.spark_pipelines import read_topic

from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.kafka.records import produce
from distributary.local.broker import EmbeddedBroker
from distributary.schema import RecordSchema

NAMESPACE = "rewind-test"
OPERATOR_FLAGS = ("--spark-runtime", "local")
SCHEMA = "user STRING, amount INT"
EVENTS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "rw-events"},
    "spec": {"partitions": 2, "schema": SCHEMA, "key": ["user"]},
}
FIRST = [{"user": f"u{i % 3}", "amount": i} for i in range(10)]
SECOND = [{"user": f"u{i % 3}", "amount": 100 + i} for i in range(10)]


def copy_view(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "rw-copy"},
        "spec": {
            "inputs": [{"log": "rw-events", "alias": "events"}],
            "sql": "SELECT user, amount FROM events",
            "output": {"mode": "append"},
            "spark": {"trigger": "2s"},
            **spec,
        },
    }


def output(broker: EmbeddedBroker) -> list[dict[str, Any]]:
    """The view's output records (none while its topic does not exist yet)."""
    try:
        found = read_topic(broker.bootstrap_servers, "rw-copy.r1")
    except KafkaAdminError:
        return []
    return [json.loads(r.value) for r in found if r.value]


def status(cluster: Cluster) -> dict[str, Any]:
    return (cluster.get("dview", "rw-copy") or {}).get("status") or {}


def waiting(operator: Operator, what: str, probe: Any, timeout: float = 240) -> Any:
    """`waiting` with this module's longer default (Spark starts several times)."""
    return harness_waiting(operator, what, probe, timeout)


@pytest.fixture(scope="module")
def appended(cluster: Cluster, operator: Operator, broker: EmbeddedBroker) -> str:
    """Both batches read once; the instant between them (RFC 3339)."""
    cluster.apply(EVENTS)
    wait_for("Log rw-events Ready", lambda: is_true(cluster.get("dlog", "rw-events"), "Ready"))
    schema = RecordSchema.parse(SCHEMA, ["user"])
    produce(broker.bootstrap_servers, "rw-events", [schema.encode(r) for r in FIRST])
    between = math.ceil(time.time()) + 1  # a whole second after every record of the first batch
    time.sleep(between - time.time() + 0.3)
    produce(broker.bootstrap_servers, "rw-events", [schema.encode(r) for r in SECOND])
    cluster.apply(copy_view())
    waiting(
        operator,
        "the view caught up",
        lambda: len(output(broker)) == 20 and status(cluster).get("lag") == 0,
    )
    return datetime.fromtimestamp(between, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_rewind_to_a_time_reads_exactly_the_records_since_then_again(
    appended: str, cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    ends = KafkaAdmin(broker.bootstrap_servers).end_offsets(["rw-events"])["rw-events"]
    rewind = {"requestId": "since-second-batch", "to": {"from": "Timestamp", "timestamp": appended}}
    cluster.apply(copy_view(rewind=rewind))
    waiting(
        operator,
        "the rewind done and the view caught up again",
        lambda: (
            (status(cluster).get("lastRewind") or {}).get("phase") == "Done"
            and status(cluster).get("lag") == 0
            and len(output(broker)) == 30
        ),
    )
    found = output(broker)
    assert sorted(r["amount"] for r in found) == sorted(
        [r["amount"] for r in FIRST] + 2 * [r["amount"] for r in SECOND]
    )
    last = status(cluster)["lastRewind"]
    assert (last["requestId"], last["revision"]) == ("since-second-batch", 1)
    moved = {(o["partition"], o["fromOffset"], o["toOffset"]) for o in last["offsets"]}
    first_per_partition: dict[int, int] = {}
    for partition, end in ends.items():
        first_per_partition[partition] = end - sum(
            1 for r in read_topic(broker.bootstrap_servers, "rw-events")
            if r.partition == partition and json.loads(r.value or b"{}")["amount"] >= 100
        )  # fmt: skip
    assert moved == {(p, ends[p], first_per_partition[p]) for p in ends}
    (row,) = status(cluster)["revisions"]
    assert row["checkpoint"] == "rewind-since-second-batch"


def test_the_same_request_is_not_carried_out_twice(
    appended: str, cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    operator.kill()
    operator.start()
    time.sleep(8)  # several observer rounds
    assert len(output(broker)) == 30
    assert status(cluster)["lastRewind"]["phase"] == "Done"
