"""`examples/shop` end to end, as its documented command runs it, with crashes, checked outside.

The example's own script (`examples/shop/run.py`, what `make shop` runs) is run on servers of
this module's own (a PostgreSQL, a Redis and a Kafka nobody else uses, so that its slot, topics
and keys meet no other test's): orders exist before the run (the Source's snapshot), more are
placed while a Sink, the Connect worker, the views' Spark drivers, the other Sink and the whole
run are killed with SIGKILL in turn; orders are corrected, moved to another customer and
cancelled, and customers move to other cities, all along. Afterwards this test reads the stores
itself and compares them exactly with what PostgreSQL answers: the serving tables and the Redis
caches hold each customer's and each city's revenue and number of orders (the orders joined with
their customers' current cities); the table Log holds every change once (none lost, none written
twice across the crashes of the Connect worker and of the run) and ends as the orders table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from tests.integration.spark_pipelines import read_topic

from distributary.devtools.postgres import PostgresServer
from distributary.devtools.redis import RedisServer
from distributary.local.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "shop"))
import stores  # noqa: E402

EXISTING, LIVE = 300, 1500


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("shop-servers")
    with (
        PostgresServer(root / "postgres") as postgres,
        RedisServer(root / "redis") as cache,
        EmbeddedBroker(root / "kafka") as kafka,
    ):
        yield {"postgres": postgres, "redis": cache, "kafka": kafka}


@pytest.fixture(scope="module")
def shop(servers: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    state = tmp_path_factory.mktemp("shop")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "shop" / "run.py"),
         "--existing", str(EXISTING), "--orders", str(LIVE), "--rate", "50", "--crashes", "5",
         "--state-dir", str(state), "--postgres-url", servers["postgres"].dsn(),
         "--redis-port", str(servers["redis"].port),
         "--bootstrap-servers", servers["kafka"].bootstrap_servers, "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"the example failed:\n{done.stderr[-4000:]}"
    return {"summary": json.loads(done.stdout.strip().splitlines()[-1]), "said": done.stderr}


def _rows(postgres: PostgresServer, query: str) -> dict[str, tuple[Decimal, int]]:
    with psycopg.connect(postgres.dsn("shop")) as db:
        return {str(c): (Decimal(r), int(n)) for c, r, n in db.execute(query).fetchall()}


def test_every_part_was_killed_while_orders_arrived(shop: dict[str, Any]) -> None:
    summary = shop["summary"]
    assert summary["crashes"] == [
        "sink revenue-table", "Connect worker", "view's Spark driver", "sink revenue-cache",
        "whole run",
    ]  # fmt: skip
    assert "not killed" not in shop["said"]
    assert summary["runs"] == 2
    assert summary["orders"] == EXISTING + LIVE


def test_the_serving_table_and_the_cache_equal_what_the_orders_imply(
    shop: dict[str, Any], servers: dict[str, Any]
) -> None:
    postgres: PostgresServer = servers["postgres"]
    truth = _rows(postgres, "SELECT customer, sum(amount), count(*) FROM orders GROUP BY customer")
    live = sum(n for _, n in truth.values())
    assert EXISTING < live < EXISTING + LIVE, "orders were cancelled, most were not"
    table = _rows(postgres, "SELECT customer, revenue, orders FROM public.customer_revenue")
    assert table == truth
    client = redis.Redis(host="127.0.0.1", port=servers["redis"].port)
    assert stores.cache(client, "revenue:") == truth


def test_the_table_log_holds_every_change_once_and_ends_as_the_orders_table(
    shop: dict[str, Any], servers: dict[str, Any]
) -> None:
    records = read_topic(servers["kafka"].bootstrap_servers, "shop-orders")
    table = stores.orders(servers["postgres"].dsn("shop"))
    assert stores.log_problems([(r.key, r.value) for r in records], table) == []
    assert len(table) < EXISTING + LIVE, "some orders were cancelled"


def test_orders_were_corrected_moved_and_cancelled_meanwhile(
    shop: dict[str, Any], servers: dict[str, Any]
) -> None:
    records = read_topic(servers["kafka"].bootstrap_servers, "shop-orders")
    versions = Counter(r.key for r in records if r.value and not json.loads(r.value)["__deleted"])
    tombstones = sum(1 for r in records if r.value is None)
    assert sum(1 for n in versions.values() if n > 1) > (EXISTING + LIVE) // 10
    assert tombstones > (EXISTING + LIVE) // 50


def test_revenue_per_city_equals_what_postgresql_answers_though_customers_moved(
    shop: dict[str, Any], servers: dict[str, Any]
) -> None:
    postgres: PostgresServer = servers["postgres"]
    truth = _rows(
        postgres,
        "SELECT c.city, sum(o.amount), count(*) FROM orders o "
        "JOIN customers c ON o.customer = c.id GROUP BY c.city",
    )
    assert len(truth) > 3
    assert _rows(postgres, "SELECT city, revenue, orders FROM public.city_revenue") == truth
    client = redis.Redis(host="127.0.0.1", port=servers["redis"].port)
    assert stores.cache(client, "city:") == truth
    # Customers moved meanwhile: the customers' Log holds more than one version of some rows.
    records = read_topic(servers["kafka"].bootstrap_servers, "shop-customers")
    versions = Counter(r.key for r in records if r.value)
    assert sum(1 for n in versions.values() if n > 1) >= 5, versions
    summary = shop["summary"]
    assert (summary["cityTableEqual"], summary["cityCacheEqual"]) == (True, True)
