"""Hundreds of Logs applied at once, on a real API server and a real broker (`direct` backend).

A platform team's first `kubectl apply` of a repository, or a GitOps sync, makes hundreds of Logs
in one go. Each is claimed in the claims topic before its topic is made (`kafka.claims`), so a
claim that costs a round trip to Kafka of its own, one after another, makes the last Log wait
minutes. This applies 300 Logs in one apply and fails if they are not all Ready, each on its own
topic with its declared partitions, within a minute.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.integration.kube.operator_harness import Cluster, Operator, is_true

from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker

NAMESPACE = "many-logs"
COUNT = 300
LIMIT_S = 60.0


def log(n: int) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": f"events-{n:03d}"},
        "spec": {"partitions": 1 + n % 3},
    }


def not_ready(cluster: Cluster) -> list[str]:
    listed = json.loads(cluster.kubectl("get", "dlog", "-n", NAMESPACE, "-o", "json"))["items"]
    ready = {item["metadata"]["name"] for item in listed if is_true(item, "Ready")}
    return sorted({log(n)["metadata"]["name"] for n in range(COUNT)} - ready)


def test_three_hundred_logs_applied_at_once_are_ready_within_a_minute(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    started = time.monotonic()
    manifests = {"apiVersion": "v1", "kind": "List", "items": [log(n) for n in range(COUNT)]}
    cluster.kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(manifests))
    waiting = not_ready(cluster)
    while waiting and time.monotonic() - started < LIMIT_S:
        time.sleep(1)
        waiting = not_ready(cluster)
    took = time.monotonic() - started
    assert not waiting, (
        f"{len(waiting)} of {COUNT} Logs not Ready {took:.0f}s after they were applied "
        f"(first: {waiting[:5]}); operator log:\n{operator.logs()[-3000:]}"
    )
    topics = KafkaAdmin(broker.bootstrap_servers).describe_topics(
        log(n)["metadata"]["name"] for n in range(COUNT)
    )
    partitions = {name: (t.partitions if t else None) for name, t in topics.items()}
    assert partitions == {log(n)["metadata"]["name"]: 1 + n % 3 for n in range(COUNT)}
    print(f"{COUNT} Logs Ready in {took:.1f}s")
