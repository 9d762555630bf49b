"""The shop example in pods: its Source on the chart's Kafka Connect, its view, its two Sinks.

`examples/shop` as its files say, only the database's and the cache's address made the node's
(PostgreSQL 15 and Redis run on the host, listening where pods reach it) and the view's pods made
small: the Source's Debezium connector runs in the Connect image's pod that the chart makes
(`connect.worker`), reading its password from the Source's Secret through the worker's
ServiceAccount; the view is a SparkApplication whose driver and executor run on the node; each
Sink is a Deployment. Orders exist before the Source (its snapshot); more arrive, and earlier ones
are corrected, moved to another customer and cancelled, while the Connect pod and the cache Sink's
pod are deleted (the Deployments start new ones). Afterwards the serving table and the cache
equal, exactly, each customer's revenue and number of orders as the orders table answers, and the
table Log holds every change once and ends as the orders table.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.kube.operator_harness import Cluster, condition, wait_for
from tests.integration.pods.pods import (
    CONNECT,
    CONNECT_SELECTOR,
    PIPELINES,
    SMALL_JVMS,
    SYSTEM,
    ready_pods,
)
from tests.integration.spark_pipelines import read_topic

from distributary.devtools.images import CONNECT as CONNECT_IMAGE
from distributary.devtools.node import Node
from distributary.devtools.postgres import PostgresServer
from distributary.devtools.redis import RedisServer
from distributary.local.broker import EmbeddedBroker
from distributary.plan.sinks.sink_plan import SINK_LABEL

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "examples" / "shop"))
from app import place_orders  # noqa: E402
from run import Shop  # noqa: E402

EXISTING, LIVE, RATE = 150, 450, 30.0
SMALL = {"memory": "512m", "cpuRequest": "100m"}


@pytest.fixture(scope="module")
def shop(
    pods_postgres: PostgresServer,
    pods_broker: EmbeddedBroker,
    node: Node,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Shop]:
    """The shop's database, roles and files (`examples/shop/run.py`), its cache reachable from
    pods, and orders placed before the Source."""
    state = tmp_path_factory.mktemp("shop")
    with RedisServer(state / "redis", pods_at=node.address) as cache:
        shop = Shop(state, pods_postgres.dsn(), cache.port, pods_broker.bootstrap_servers)
        shop.prepare()
        place_orders(shop.dsn("app"), EXISTING, rate=10_000.0)
        yield shop


def documents(shop: Shop, node: Node) -> list[dict[str, Any]]:
    """The example's Source, view and Sinks (ports already this run's), at the node's address."""
    found: list[dict[str, Any]] = []
    for name in ("source.yaml", "views.yaml", "sinks.yaml"):
        found += [d for d in yaml.safe_load_all((shop.state / "pipeline" / name).read_text()) if d]
    for doc in found:
        spec = doc["spec"]
        for store in ("postgres", "redis"):
            if store in spec:
                assert spec[store]["host"] == "127.0.0.1", doc
                spec[store]["host"] = node.address
        if doc["kind"] == "DerivedView":
            spec["spark"] = {"driver": SMALL, "executor": SMALL, "pods": {"env": [SMALL_JVMS]}}
    assert sorted(d["kind"] for d in found) == ["DerivedView", "Sink", "Sink", "Source"]
    return found


def secret(name: str, password: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {"password": password},
    }


def replaced(node: Node, selector: str, gone: dict[str, Any]) -> list[dict[str, Any]]:
    """Ready pods of `selector` in place of `gone` (a pod that was deleted)."""
    namespace = gone["metadata"]["namespace"]
    found = ready_pods(node, namespace, selector)
    return [p for p in found if p["metadata"]["uid"] != gone["metadata"]["uid"]]


@pytest.fixture(scope="module")
def ran(installed: Cluster, node: Node, shop: Shop) -> Iterator[dict[str, Any]]:
    """The example applied; orders placed while the Connect pod and a Sink's pod are deleted;
    the stores caught up. Everything deleted afterwards (the Source drops its slot)."""
    installed.apply(
        secret("shop-db", shop.passwords["cdc"]), secret("serving-db", shop.passwords["serving"])
    )
    applied = documents(shop, node)
    installed.apply(*applied)
    try:
        wait_for("the serving table's first rows", shop.serving, timeout=480)
        placed = [0]
        writer = threading.Thread(
            target=lambda: placed.__setitem__(
                0, place_orders(shop.dsn("app"), LIVE, RATE, first=EXISTING + 1)
            ),
            daemon=True,
        )
        writer.start()
        deleted: dict[str, dict[str, Any]] = {}
        for what, namespace, selector in (
            ("connect", SYSTEM, CONNECT_SELECTOR),
            ("cache sink", PIPELINES, f"{SINK_LABEL}=revenue-cache"),
        ):
            writer.join(LIVE / RATE / 3)
            [pod] = wait_for(f"the {what}'s pod", lambda s=selector, n=namespace: ready_pods(
                node, n, s), timeout=120)  # fmt: skip
            installed.kubectl("delete", "pod", "-n", namespace, pod["metadata"]["name"])
            wait_for(f"another {what} pod ready", lambda s=selector, p=pod: replaced(node, s, p),
                     timeout=240)  # fmt: skip
            deleted[what] = pod
        writer.join()
        expected = shop.truth()
        wait_for(
            "the serving table and the cache to equal what the orders imply",
            lambda: shop.serving() == expected and shop.cache() == expected,
            timeout=300,
        )
        yield {"orders": EXISTING + placed[0], "expected": expected, "deleted": deleted}
    finally:
        for doc in reversed(applied):
            kind, name = doc["kind"].lower(), doc["metadata"]["name"]
            installed.kubectl(
                "delete", kind, name, "-n", PIPELINES, "--wait=true", "--timeout=120s"
            )


def test_the_stores_equal_exactly_what_the_orders_imply(ran: dict[str, Any], shop: Shop) -> None:
    assert sorted(ran["deleted"]) == ["cache sink", "connect"]
    expected = ran["expected"]
    assert ran["orders"] == EXISTING + LIVE
    live = sum(n for _, n in expected.values())
    assert EXISTING < live < EXISTING + LIVE, "orders were cancelled, most were not"
    assert shop.serving() == expected
    assert shop.cache() == expected


def test_the_table_log_holds_every_change_once_and_ends_as_the_orders_table(
    ran: dict[str, Any], installed: Cluster, pods_broker: EmbeddedBroker, shop: Shop
) -> None:
    log = installed.get("dlog", "shop-orders")
    assert log is not None
    records = read_topic(pods_broker.bootstrap_servers, log["status"]["topicName"])
    assert shop.log_problems([(r.key, r.value) for r in records]) == []


def test_the_source_captures_on_the_charts_connect_which_keeps_no_password(
    ran: dict[str, Any], installed: Cluster, node: Node, pods_broker: EmbeddedBroker, shop: Shop
) -> None:
    source = installed.get("source", "shop")
    ready = condition(source, "Ready")
    assert ready is not None, source
    assert (ready["status"], ready["reason"]) == ("True", "Capturing"), source
    assert source["status"]["connectorState"] == "RUNNING"
    [pod] = ready_pods(node, SYSTEM, CONNECT_SELECTOR)
    assert pod["spec"]["nodeName"] == node.name
    assert pod["status"]["containerStatuses"][0]["image"].endswith(CONNECT_IMAGE.tag)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    # The connector's config, as Connect stores it in Kafka, names the Secret, never its value.
    stored = [
        r.value.decode() for r in read_topic(pods_broker.bootstrap_servers, f"{CONNECT}.configs")
        if r.value
    ]  # fmt: skip
    assert any(f"${{secrets:{PIPELINES}/shop-db:password}}" in text for text in stored), stored
    assert not [text for text in stored if shop.passwords["cdc"] in text]
