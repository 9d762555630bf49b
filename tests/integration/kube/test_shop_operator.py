"""`examples/shop` under the operator on the local control plane, with crashes, checked outside.

The example's own files are applied with kubectl to a namespace, the database passwords as
Secrets; the operator (the chart's RBAC, the local runtime) runs with a real Kafka Connect worker
as the cluster's Connect (its REST endpoint, `--connect-url`), which reads the passwords from a
folder laid out as Kubernetes mounts the Secrets into a Connect pod. Real PostgreSQL 15, Redis,
Kafka, Debezium and Spark.

Orders exist before the Source is applied (the snapshot); more arrive, and earlier ones are
corrected, moved to another customer and cancelled, while the Sink of the table, the Connect worker
(started again, as Kubernetes restarts its pod), the Sink of the cache and the operator itself are
killed with SIGKILL in turn. Afterwards the serving table and the cache
equal, exactly, each customer's revenue and number of orders as the orders table implies; the table
Log holds every change once and ends as the orders table; status says so (the Source Capturing,
with its slot; each Sink Serving with no lag and its position). Then the Source is paused while
orders arrive (Ready with reason Paused, the connector PAUSED, the slot keeping WAL past
`walWarning`: DataLossRisk) and resumed (the orders arrive, the stores equal again). Last, deleting
the Source drops its slot and publication and keeps its Log's topic. (A raised snapshot epoch,
taken beside and cut over: `test_local_resnapshot.py`, through the same Source reconcile.)
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from tests.integration.kube.conftest import running_operator
from tests.integration.kube.operator_harness import Cluster, Operator, condition, waiting
from tests.integration.spark_pipelines import read_topic

from distributary.devtools.postgres import PostgresServer
from distributary.devtools.redis import RedisServer
from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker
from distributary.local.connect import ConnectWorker

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "examples" / "shop"))
from app import place_orders  # noqa: E402
from run import Shop  # noqa: E402

NAMESPACE = "shop"
EXISTING, LIVE, PAUSED_ORDERS = 200, 900, 150
RATE = 30.0
SLOT = "distributary_shop_shop"
# A view's runner killed under the operator: `test_chaos.py`; this view's, under `distributary run`:
# `test_shop_example.py` (one reconcile drives both).
CRASHES = ("sink revenue-table", "Connect worker", "sink revenue-cache", "operator")


@pytest.fixture(scope="module")
def stores(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[PostgresServer, RedisServer]]:
    root = tmp_path_factory.mktemp("shop-stores")
    with PostgresServer(root / "postgres") as postgres, RedisServer(root / "redis") as cache:
        yield postgres, cache


@pytest.fixture(scope="module")
def shop(
    stores: tuple[PostgresServer, RedisServer],
    broker: EmbeddedBroker,
    tmp_path_factory: pytest.TempPathFactory,
) -> Shop:
    """The shop's database, roles and files (`examples/shop/run.py`), orders before the Source."""
    postgres, cache = stores
    state = tmp_path_factory.mktemp("shop-state")
    shop = Shop(state, postgres.dsn(), cache.port, broker.bootstrap_servers)
    shop.prepare()
    place_orders(shop.dsn("app"), EXISTING, rate=10_000.0)
    return shop


@pytest.fixture(scope="module")
def connect(shop: Shop, broker: EmbeddedBroker) -> Iterator[ConnectWorker]:
    """The cluster's Kafka Connect: one worker, the Secrets mounted as files in `secrets/`."""
    worker = ConnectWorker(
        shop.state / "connect",
        broker.bootstrap_servers,
        group_id="shop-operator-connect",
        topic_prefix="shop-operator-connect",
        secrets_dir=shop.state / "secrets",
    )
    (shop.state / "connect").mkdir(exist_ok=True)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster,
    broker: EmbeddedBroker,
    connect: ConnectWorker,
    shop: Shop,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    # Its topics are named for the namespace: the session's broker is every module's, and
    # others have a Log `shop-orders` too.
    flags = ("--spark-runtime", "local", "--connect-url", connect.url,
             "--connect-secrets", str((shop.state / "secrets").resolve()),
             "--topic-names", "{namespace}.{name}")  # fmt: skip
    with running_operator(cluster, broker, tmp_path_factory.mktemp("operator"), flags) as running:
        yield running


def _when(cluster: Cluster, kind: str, name: str, reason: str, **status: Any) -> Any:
    """A probe: the resource when its Ready condition has `reason` and its status these values."""

    def probe() -> dict[str, Any] | None:
        found = cluster.get(kind, name)
        ready = condition(found, "Ready")
        if ready is None or ready["reason"] != reason or found is None:
            return None
        return found if all(found["status"].get(k) == v for k, v in status.items()) else None

    return probe


def _secret(name: str, password: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {"password": base64.b64encode(password.encode()).decode()},
    }


def _documents(shop: Shop) -> list[dict[str, Any]]:
    found = []
    for name in ("source.yaml", "views.yaml", "sinks.yaml"):
        text = (shop.state / "pipeline" / name).read_text()
        found += [doc for doc in yaml.safe_load_all(text) if doc]
    for doc in found:
        if doc["kind"] == "Source":
            doc["spec"]["walWarning"] = "4Mi"  # the pause below crosses it
    return found


def _pids(words: tuple[str, ...], folder: Path) -> list[int]:
    """Processes whose command line holds every one of `words` and `folder`, and their children."""
    lines: dict[int, str] = {}
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                lines[int(entry.name)] = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = [
        p for p, line in lines.items() if str(folder) in line and all(w in line for w in words)
    ]
    grown = True
    while grown:
        below = [p for p, parent in parents.items() if parent in found and p not in found]
        found += below
        grown = bool(below)
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def crashed(
    cluster: Cluster, operator: Operator, connect: ConnectWorker, shop: Shop, broker: EmbeddedBroker
) -> dict[str, Any]:
    """The pipeline applied, orders placed while four parts are killed in turn, the stores
    caught up."""
    cluster.apply(
        _secret("shop-db", shop.passwords["cdc"]), _secret("serving-db", shop.passwords["serving"])
    )
    cluster.apply(*_documents(shop))
    local = operator.folder / "local"
    waiting(
        operator,
        "the serving table's first rows",
        shop.serving,
        timeout=300,
        show=lambda: [
            cluster.get(k, n) for k, n in (("source", "shop"), ("sink", "revenue-table"))
        ],
    )
    placed = [0]
    writer = threading.Thread(
        target=lambda: placed.__setitem__(
            0, place_orders(shop.dsn("app"), LIVE, RATE, first=EXISTING + 1)
        ),
        daemon=True,
    )
    writer.start()
    done: list[str] = []
    pause = LIVE / RATE / (len(CRASHES) + 1)
    for what in CRASHES:
        time.sleep(pause)
        if what == "Connect worker":
            connect.kill()
            connect.start()  # as Kubernetes starts its pod again
        elif what == "operator":
            operator.kill()
            operator.start()
        else:
            words = ("distributary.sinks", what.split()[-1])
            pids = waiting(
                operator, f"the {what}'s process", lambda w=words: _pids(w, local), timeout=120
            )
            _kill(pids)
        done.append(what)
    writer.join()
    expected = shop.truth()
    waiting(
        operator,
        "the serving table and the cache to equal what the orders imply",
        lambda: shop.serving() == expected and shop.cache() == expected,
        timeout=300,
        show=lambda: {
            "table": len(shop.serving()),
            "cache": len(shop.cache()),
            "expected": len(expected),
        },
    )
    return {"crashes": done, "orders": EXISTING + placed[0], "expected": expected}


def test_every_part_was_killed_while_orders_arrived(crashed: dict[str, Any]) -> None:
    assert crashed["crashes"] == list(CRASHES)
    assert crashed["orders"] == EXISTING + LIVE


def test_the_stores_equal_exactly_what_the_orders_imply(
    crashed: dict[str, Any], shop: Shop
) -> None:
    expected = crashed["expected"]
    live = sum(n for _, n in expected.values())
    assert EXISTING < live < EXISTING + LIVE, "orders were cancelled, most were not"
    assert shop.serving() == expected
    assert shop.cache() == expected


def test_the_table_log_holds_every_change_once_and_ends_as_the_orders_table(
    crashed: dict[str, Any], cluster: Cluster, broker: EmbeddedBroker, shop: Shop
) -> None:
    log = cluster.get("log", "shop-orders")
    assert log is not None
    records = read_topic(broker.bootstrap_servers, log["status"]["topicName"])
    assert shop.log_problems([(r.key, r.value) for r in records]) == []


def test_status_shows_the_source_capturing_and_each_sink_serving(
    crashed: dict[str, Any], cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    source = cluster.get("source", "shop")
    ready = condition(source, "Ready")
    assert ready is not None, source
    assert (ready["status"], ready["reason"]) == ("True", "Capturing"), source
    status = source["status"]
    assert status["connectorState"] == "RUNNING"
    assert [(t["name"], t["log"], t["key"]) for t in status["tables"]] == [
        ("public.orders", "shop-orders", ["id"]),
        ("public.customers", "shop-customers", ["id"]),
    ]
    assert status["slot"]["name"] == SLOT
    assert status["publication"] == SLOT
    (revision,) = status["revisions"]
    assert (revision["revision"], revision["phase"], revision["snapshotDone"]) == (
        1,
        "Serving",
        True,
    )
    assert revision["snapshot"] in ("Clean", "Unchecked")  # whole, never taken again
    assert condition(source, "SnapshotInterrupted") is None
    log = cluster.get("log", "shop-orders")
    owners = log["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [("Source", "shop")]
    admin = KafkaAdmin(broker.bootstrap_servers)
    for name in ("revenue-table", "revenue-cache"):

        def at_the_end(name: str = name) -> dict[str, Any] | None:
            # Status is a few seconds behind the store (the process mirrors its position every
            # 2 s, the operator reads it every 2 s): wait until it shows the topic's end.
            sink = _when(cluster, "sink", name, "Serving", lag=0)()
            if sink is None:
                return None
            ends = admin.end_offsets([sink["status"]["topic"]])[sink["status"]["topic"]]
            held = {int(p): o for p, o in sink["status"]["position"].items()}
            return sink if held == ends else None

        waiting(
            operator,
            f"Sink {name} Ready, its position the topic's end",
            at_the_end,
            timeout=60,
            show=lambda n=name: cluster.get("sink", n),
        )
    # The Sinks are subscribers of the Log they read, and their lag is a metric.
    subscribed = waiting(
        operator,
        "the Sinks among the Log's subscribers",
        lambda: (
            {
                s["name"]: s
                for s in (cluster.get("log", "customer-revenue") or {})
                .get("status", {})
                .get("subscribers", [])
                if s["kind"] == "Sink" and s["lag"] == 0
            }.keys()
            == {"revenue-table", "revenue-cache"}
        ),
        timeout=30,
        show=lambda: cluster.get("log", "customer-revenue"),
    )
    assert subscribed
    text = urllib.request.urlopen(operator.metrics_url, timeout=5).read().decode()
    lags = [line for line in text.splitlines() if line.startswith("distributary_sink_lag_records{")]
    assert sorted(lags) == [
        'distributary_sink_lag_records{namespace="shop",sink="revenue-cache"} 0.0',
        'distributary_sink_lag_records{namespace="shop",sink="revenue-table"} 0.0',
    ]
    retained = [
        line
        for line in text.splitlines()
        if line.startswith("distributary_source_retained_wal_bytes{")
    ]
    assert len(retained) == 1
    assert 'source="shop"' in retained[0]


def test_a_paused_source_keeps_changes_in_its_slot_and_resumes_exactly(
    crashed: dict[str, Any],
    cluster: Cluster,
    operator: Operator,
    shop: Shop,
    stores: tuple[PostgresServer, RedisServer],
) -> None:
    assert condition(cluster.get("source", "shop"), "DataLossRisk") is None  # read: WAL goes
    cluster.kubectl(
        "patch", "source", "shop", "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"paused":true}}'
    )
    waiting(
        operator,
        "the Source paused",
        _when(cluster, "source", "shop", "Paused", connectorState="PAUSED"),
        timeout=60,
        show=lambda: cluster.get("source", "shop"),
    )
    before = shop.serving()
    first = EXISTING + LIVE + 1
    # Orders, with the WAL segment switched twice among them: the slot, unread, keeps at least
    # one whole segment (16 MiB), past walWarning.
    third = PAUSED_ORDERS // 3
    for start in (first, first + third):
        place_orders(shop.dsn("app"), third, rate=100.0, first=start)
        with psycopg.connect(stores[0].dsn("shop"), autocommit=True) as db:
            db.execute("SELECT pg_switch_wal()")
    rest = PAUSED_ORDERS - 2 * third
    place_orders(shop.dsn("app"), rest, rate=100.0, first=first + 2 * third)
    risk = waiting(
        operator,
        "DataLossRisk while paused",
        lambda: condition(cluster.get("source", "shop"), "DataLossRisk"),
        timeout=90,
        show=lambda: cluster.get("source", "shop"),
    )
    assert risk["status"] == "True"
    assert SLOT in risk["message"]
    time.sleep(5)
    assert shop.serving() == before  # nothing arrives while paused
    cluster.kubectl(
        "patch",
        "source",
        "shop",
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        '{"spec":{"paused":false}}',
    )
    expected = shop.truth()
    assert EXISTING < sum(n for _, n in expected.values()) < EXISTING + LIVE + PAUSED_ORDERS
    waiting(
        operator,
        "the orders placed while paused in the stores",
        lambda: shop.serving() == expected and shop.cache() == expected,
        timeout=180,
    )
    # The slot's restart position moves on as the server logs its running transactions, which
    # an idle server does not: the shop goes on taking orders meanwhile, as shops do.
    more = [0]
    stop = threading.Event()

    def trickle() -> None:
        number = first + PAUSED_ORDERS
        while not stop.is_set():
            more[0] += place_orders(shop.dsn("app"), 5, rate=10.0, first=number + more[0])

    writer = threading.Thread(target=trickle, daemon=True)
    writer.start()
    try:
        waiting(
            operator,
            "DataLossRisk gone once the slot is read",
            lambda: condition(cluster.get("source", "shop"), "DataLossRisk") is None,
            timeout=180,
            show=lambda: cluster.get("source", "shop"),
        )
    finally:
        stop.set()
        writer.join()
    expected = shop.truth()
    assert sum(n for _, n in expected.values()) < EXISTING + LIVE + PAUSED_ORDERS + more[0]
    waiting(
        operator,
        "the orders placed since in the stores",
        lambda: shop.serving() == expected and shop.cache() == expected,
        timeout=180,
    )


def _capture(postgres: PostgresServer) -> list[str]:
    """The replication slots and publications on the server."""
    with psycopg.connect(postgres.dsn("shop")) as db:
        found = db.execute(
            "SELECT slot_name FROM pg_replication_slots "
            "UNION ALL SELECT pubname FROM pg_publication"
        ).fetchall()
    return sorted(str(row[0]) for row in found)


def test_deleting_the_source_drops_its_slot_and_keeps_its_topic(
    crashed: dict[str, Any],
    cluster: Cluster,
    operator: Operator,
    shop: Shop,
    broker: EmbeddedBroker,
    stores: tuple[PostgresServer, RedisServer],
) -> None:
    topic = cluster.get("log", "shop-orders")["status"]["topicName"]
    cluster.kubectl("delete", "source", "shop", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    assert _capture(stores[0]) == []
    waiting(
        operator,
        "the table Log garbage-collected with its Source",
        lambda: cluster.get("log", "shop-orders") is None,
        timeout=60,
    )
    assert KafkaAdmin(broker.bootstrap_servers).list_partitions([topic]).get(topic)


def test_a_source_without_its_secret_or_its_table_is_stalled_saying_why(
    crashed: dict[str, Any], cluster: Cluster, operator: Operator, shop: Shop
) -> None:
    (source,) = [doc for doc in _documents(shop) if doc["kind"] == "Source"]
    source["metadata"]["name"] = "returns"
    source["spec"]["postgres"]["passwordSecret"] = {"name": "returns-db"}
    source["spec"]["tables"] = [{"name": "public.returns"}]
    cluster.apply(source)
    stalled = waiting(
        operator,
        "the Source Stalled for its Secret",
        _when(cluster, "source", "returns", "SecretMissing"),
        timeout=60,
    )
    message = condition(stalled, "Stalled")["message"]  # type: ignore[index]
    assert "spec.postgres.passwordSecret" in message
    assert "kubectl create secret generic returns-db" in message
    cluster.apply(_secret("returns-db", shop.passwords["cdc"]))
    stalled = waiting(
        operator,
        "the Source Stalled for its table",
        _when(cluster, "source", "returns", "TableProblem"),
        timeout=60,
    )
    assert "public.returns" in condition(stalled, "Stalled")["message"]  # type: ignore[index]
    assert cluster.get("log", "returns-returns") is None  # nothing made for a table not there
    cluster.kubectl("delete", "source", "returns", "-n", NAMESPACE, "--wait=true", "--timeout=60s")
