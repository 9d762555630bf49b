"""Views over a table, on real Kafka and real Spark: exact as its rows are updated and deleted.

A compacted, keyed Log of 300 customers gets its rows inserted, then updated (a customer moves to
another city, its balance changes; some twice) and deleted (tombstones; some keys deleted and
inserted again), in rounds appended while the runner runs, with the runner killed with SIGKILL in
the middle of one round and started again. Four views read it as a table (the default for a
compacted Log): counts, sums, averages, extremes and distinct counts per city; rows selected and
projected; one global group; groups kept by HAVING (COUNT, SUM and AVG of decimals by Spark's own
aggregation, the others by the runner's groups). A stream of orders is joined with it, each order
written once. A second table, of accounts that move between customers (some that never were),
change and are deleted in the same rounds, is joined with it: accounts and amounts per city, and
each account with its customer's city (a RIGHT JOIN: accounts of no customer kept). Once caught
up, each output topic read as a table equals, row for row, the query evaluated over the final
rows.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from tests.integration.spark_pipelines import (
    PipelineRun,
    as_multiset,
    latest_table,
    produce,
    read_topic,
)

from distributary.local.broker import EmbeddedBroker

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: tb-customers}
spec:
  partitions: 3
  compaction: true
  key: [id]
  schema: id INT, city STRING, balance DECIMAL(10,2), segment STRING
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: tb-cities}
spec:
  inputs: [{log: tb-customers, alias: c}]
  sql: |
    SELECT city, count(*) AS customers, sum(balance) AS balance, avg(balance) AS mean,
           min(balance) AS lowest, max(balance) AS highest, count(DISTINCT segment) AS segments
    FROM c GROUP BY city
  output: {mode: upsert, key: [city]}
  spark: {trigger: 2s}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: tb-rich}
spec:
  inputs: [{log: tb-customers, alias: c}]
  sql: SELECT id, upper(city) AS city, balance FROM c WHERE balance >= 500
  output: {mode: upsert, key: [id]}
  spark: {trigger: 2s}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: tb-all}
spec:
  inputs: [{log: tb-customers, alias: c}]
  sql: |
    SELECT 'all' AS scope, count(*) AS customers, sum(balance) AS total, avg(balance) AS mean
    FROM c
  output: {mode: upsert, key: [scope]}
  spark: {trigger: 2s}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: tb-big-segments}
spec:
  inputs: [{log: tb-customers, alias: c}]
  sql: SELECT segment, count(*) AS n FROM c GROUP BY segment HAVING n > 62
  output: {mode: upsert, key: [segment]}
  spark: {trigger: 2s}
---
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: tb-orders}
spec:
  partitions: 3
  schema: order_id INT, customer INT, amount INT
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: tb-enriched}
spec:
  inputs: [{log: tb-orders, alias: o}, {log: tb-customers, alias: c}]
  sql: |
    SELECT o.order_id, o.customer, c.city, c.segment
    FROM o LEFT JOIN c ON o.customer = c.id WHERE o.amount > 0
  spark: {trigger: 2s}
---
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: tb-accounts}
spec:
  partitions: 2
  compaction: true
  key: [account]
  schema: account INT, customer INT, amount INT
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: tb-city-accounts}
spec:
  inputs: [{log: tb-accounts, alias: a}, {log: tb-customers, alias: c}]
  sql: |
    SELECT c.city, count(*) AS accounts, sum(a.amount) AS amount
    FROM a JOIN c ON a.customer = c.id GROUP BY c.city
  output: {mode: upsert, key: [city]}
  spark: {trigger: 2s}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: tb-account-cities}
spec:
  inputs: [{log: tb-customers, alias: c}, {log: tb-accounts, alias: a}]
  sql: |
    SELECT a.account, a.amount, c.city
    FROM c RIGHT JOIN a ON c.id = a.customer WHERE a.amount > 100
  output: {mode: upsert, key: [account]}
  spark: {trigger: 2s}
"""
LOG, ORDERS, ACCOUNTS = "tb-customers", "tb-orders", "tb-accounts"
VIEWS = (
    "tb-cities",
    "tb-rich",
    "tb-all",
    "tb-big-segments",
    "tb-enriched",
    "tb-city-accounts",
    "tb-account-cities",
)
CITIES = ("Lyon", "Oslo", "Lima", "Pune", "Kobe")
SEGMENTS = ("retail", "smb", "enterprise", "public")
CUSTOMERS = 300
ACCOUNT_COUNT = 400
PARTITIONS = 3
CENT = Decimal("0.01")

Rows = dict[int, dict[str, Any] | None]  # id -> its row, None once deleted


class Customers:
    """The table as the test writes it: what each key holds now, and the records appended."""

    def __init__(self, run: PipelineRun, seed: int) -> None:
        self.run, self.random = run, random.Random(seed)
        self.rows: Rows = {}
        self.schema = run.schema(LOG)
        self.expected_events: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.accounts: Accounts | None = None

    def row(self, i: int) -> dict[str, Any]:
        balance = Decimal(self.random.randrange(0, 100_000)) * CENT
        return {
            "id": i,
            "city": self.random.choice(CITIES),
            "balance": float(balance),
            "segment": self.random.choice(SEGMENTS),
        }

    def write(self, changes: list[tuple[int, dict[str, Any] | None]]) -> None:
        """Append each change (a row, or None: a tombstone) to the key's partition, in order."""
        records = []
        for i, row in changes:
            key = self.schema.encode({"id": i, "city": "", "balance": 0, "segment": ""}).key
            value = None if row is None else self.schema.encode(row).value
            records.append((i % PARTITIONS, key, value))
            self.rows[i] = row
        produce(self.run.bootstrap, self.run.topics[LOG], records)

    def inserts(self) -> list[tuple[int, dict[str, Any] | None]]:
        return [(i, self.row(i)) for i in range(CUSTOMERS)]

    def churn(self, share: float) -> list[tuple[int, dict[str, Any] | None]]:
        """Updates (moves, new balances), deletes, and keys deleted and inserted again."""
        changes: list[tuple[int, dict[str, Any] | None]] = []
        for i in range(CUSTOMERS):
            if self.random.random() >= share:
                continue
            pick = self.random.random()
            if pick < 0.6:
                changes.append((i, self.row(i)))
                if pick < 0.2:  # a second version in the same round
                    changes.append((i, self.row(i)))
            elif pick < 0.8:
                changes.append((i, None))
            else:
                changes += [(i, None), (i, self.row(i))]
        return changes

    def orders(self, first: int) -> list[dict[str, Any]]:
        """An order of each customer, live or not (a LEFT JOIN keeps the latter), and of some
        customers that never were; a few with no amount, which the view's WHERE drops."""
        ids = [*range(0, CUSTOMERS, 2), CUSTOMERS + 7, CUSTOMERS + 8]
        orders = [
            {"order_id": first + n, "customer": i, "amount": n % 9} for n, i in enumerate(ids)
        ]
        schema = self.run.schema(ORDERS)
        records = [(o["order_id"] % PARTITIONS, None, schema.encode(o).value) for o in orders]
        produce(self.run.bootstrap, self.run.topics[ORDERS], records)
        return orders

    def enriched(self, orders: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each order with a positive amount, joined with its customer's row now."""
        out = []
        for order in orders:
            row = self.rows.get(order["customer"])
            if order["amount"] > 0:
                out.append(
                    {
                        "order_id": order["order_id"],
                        "customer": order["customer"],
                        "city": row["city"] if row else None,
                        "segment": row["segment"] if row else None,
                    }
                )
        return out

    def live(self) -> list[dict[str, Any]]:
        return [dict(row, balance=_money(row["balance"])) for row in self.rows.values() if row]


class Accounts:
    """A second table, joined with the customers: each account belongs to a customer (or to
    one that never was), and moves between customers, changes its amount, is deleted."""

    def __init__(self, run: PipelineRun, seed: int) -> None:
        self.run, self.random = run, random.Random(seed)
        self.rows: Rows = {}
        self.schema = run.schema(ACCOUNTS)

    def row(self, i: int) -> dict[str, Any]:
        customer = self.random.randrange(0, CUSTOMERS + 10)  # ten customers that never were
        return {"account": i, "customer": customer, "amount": self.random.randrange(0, 1_000)}

    def write(self, changes: list[tuple[int, dict[str, Any] | None]]) -> None:
        records = []
        for i, row in changes:
            key = self.schema.encode({"account": i, "customer": 0, "amount": 0}).key
            value = None if row is None else self.schema.encode(row).value
            records.append((i % 2, key, value))
            self.rows[i] = row
        produce(self.run.bootstrap, self.run.topics[ACCOUNTS], records)

    def churn(self, share: float, first: bool = False) -> list[tuple[int, dict[str, Any] | None]]:
        changes: list[tuple[int, dict[str, Any] | None]] = []
        for i in range(ACCOUNT_COUNT):
            if first:
                changes.append((i, self.row(i)))
            elif self.random.random() < share:
                changes.append((i, None if self.random.random() < 0.2 else self.row(i)))
        return changes

    def live(self) -> list[dict[str, Any]]:
        return [row for row in self.rows.values() if row]


def _money(value: Any) -> Decimal:
    return Decimal(str(value)).quantize(CENT)


def _decimal_table(topic_rows: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """An output table with its numbers read exactly (JSON numbers as decimals)."""
    return {
        key: json.loads(json.dumps(value), parse_float=Decimal) for key, value in topic_rows.items()
    }


def _key(**columns: Any) -> str:
    return json.dumps(columns, separators=(",", ":"))


@pytest.fixture(scope="module")
def outcome(
    broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[PipelineRun, Customers, dict[str, dict[str, Any]]]]:
    run = PipelineRun(tmp_path_factory.mktemp("tables"), PIPELINE, broker.bootstrap_servers)
    customers = Customers(run, seed=29)
    accounts = Accounts(run, seed=31)
    customers.accounts = accounts
    try:
        customers.write(customers.inserts())
        accounts.write(accounts.churn(0, first=True))
        run.start()
        run.wait_caught_up(VIEWS, timeout=300)
        customers.expected_events = customers.enriched(customers.orders(0))
        run.wait_caught_up(VIEWS, timeout=120)
        customers.write(customers.churn(0.5))  # while the runner runs
        accounts.write(accounts.churn(0.5))
        time.sleep(customers.random.uniform(1.0, 4.0))
        run.kill()  # SIGKILL, whatever it was doing
        customers.write(customers.churn(0.3))
        accounts.write(accounts.churn(0.3))
        run.start()
        customers.write(customers.churn(0.3))
        accounts.write(accounts.churn(0.3))
        run.wait_caught_up(VIEWS, timeout=300)
        customers.expected_events += customers.enriched(customers.orders(10_000))
        run.wait_caught_up(VIEWS, timeout=120)
        run.stop()
        columns = ("order_id", "customer", "city", "segment")  # a null column is not written
        customers.events = [
            {c: r.json().get(c) for c in columns}
            for r in read_topic(run.bootstrap, run.view("tb-enriched").output.topic)
        ]
        tables = {
            name: _decimal_table(latest_table(read_topic(run.bootstrap, spec.output.topic)))
            for name in VIEWS
            if (spec := run.view(name)).output is not None and spec.output.mode == "upsert"
        }
        yield run, customers, tables
    finally:
        run.stop()


def test_counts_sums_averages_extremes_and_distinct_counts_per_group_are_exact(
    outcome: tuple[PipelineRun, Customers, dict[str, dict[str, Any]]],
) -> None:
    _, customers, tables = outcome
    by_city: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in customers.live():
        by_city[row["city"]].append(row)
    expected = {}
    for city, rows in by_city.items():
        balances = [r["balance"] for r in rows]
        total = sum(balances, Decimal(0))
        expected[_key(city=city)] = {
            "city": city,
            "customers": len(rows),
            "balance": total,
            "mean": (total / len(rows)).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP),
            "lowest": min(balances),
            "highest": max(balances),
            "segments": len({r["segment"] for r in rows}),
        }
    assert tables["tb-cities"] == expected
    assert sum(r["customers"] for r in tables["tb-cities"].values()) == len(customers.live())


def test_selected_rows_follow_updates_and_deletes_and_leave_when_they_stop_matching(
    outcome: tuple[PipelineRun, Customers, dict[str, dict[str, Any]]],
) -> None:
    _, customers, tables = outcome
    expected = {
        _key(id=r["id"]): {"id": r["id"], "city": r["city"].upper(), "balance": r["balance"]}
        for r in customers.live()
        if r["balance"] >= 500
    }
    assert tables["tb-rich"] == expected


def test_a_global_group_counts_the_live_rows(
    outcome: tuple[PipelineRun, Customers, dict[str, dict[str, Any]]],
) -> None:
    _, customers, tables = outcome
    live = customers.live()
    total = sum((r["balance"] for r in live), Decimal(0))
    mean = (total / len(live)).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)
    assert tables["tb-all"] == {
        _key(scope="all"): {"scope": "all", "customers": len(live), "total": total, "mean": mean}
    }


def test_groups_that_fail_having_are_deleted_from_the_output(
    outcome: tuple[PipelineRun, Customers, dict[str, dict[str, Any]]],
) -> None:
    _, customers, tables = outcome
    counts = Counter(r["segment"] for r in customers.live())
    expected = {_key(segment=s): {"segment": s, "n": n} for s, n in counts.items() if n > 62}
    assert tables["tb-big-segments"] == expected
    assert 0 < len(expected) < len(counts), f"HAVING must keep some groups and drop some: {counts}"


def test_a_stream_joined_with_a_table_writes_each_event_once_with_the_row_current_then(
    outcome: tuple[PipelineRun, Customers, dict[str, dict[str, Any]]],
) -> None:
    _, customers, _ = outcome
    # The second round's orders met the rows as they were after every change and the kill; the
    # first round's were never written again when the customers changed afterwards.
    assert as_multiset(customers.events) == as_multiset(customers.expected_events)
    assert any(e["city"] is None for e in customers.events), "a LEFT JOIN keeps orders of no one"


def test_two_tables_joined_and_grouped_are_exact_as_both_change(
    outcome: tuple[PipelineRun, Customers, dict[str, dict[str, Any]]],
) -> None:
    _, customers, tables = outcome
    assert customers.accounts is not None
    city = {r["id"]: r["city"] for r in customers.live()}
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for account in customers.accounts.live():
        if account["customer"] in city:
            total = totals[city[account["customer"]]]
            total[0] += 1
            total[1] += account["amount"]
    expected = {
        _key(city=c): {"city": c, "accounts": n, "amount": amount}
        for c, (n, amount) in totals.items()
    }
    assert tables["tb-city-accounts"] == expected


def test_two_tables_left_joined_follow_moves_updates_and_deletes_of_either(
    outcome: tuple[PipelineRun, Customers, dict[str, dict[str, Any]]],
) -> None:
    _, customers, tables = outcome
    assert customers.accounts is not None
    city = {r["id"]: r["city"] for r in customers.live()}
    expected = {}
    for account in customers.accounts.live():
        if account["amount"] > 100:
            row = {"account": account["account"], "amount": account["amount"]}
            if account["customer"] in city:  # a null column is not written
                row["city"] = city[account["customer"]]
            expected[_key(account=account["account"])] = row
    assert tables["tb-account-cities"] == expected
    assert any("city" not in row for row in expected.values()), "accounts of no customer"
