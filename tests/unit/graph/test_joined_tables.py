"""Two tables joined: the join is a table, kept exact (`joined_tables`), with the query over it
taken apart as over one table; what is not kept exact is refused by the graph, naming the
construct, the tables and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.graph import SpecProblem
from distributary.joined_tables import JOINED, flat, joined_tables
from distributary.plan.views.view_plan import namespace_pipeline
from distributary.table_queries import TableQueryError

NS = "shop"
COLUMNS = {"orders": ["id", "customer", "amount", "__deleted"], "customers": ["id", "city"]}
KEYS: dict[str, list[str] | None] = {"orders": ["id"], "customers": ["id"]}
PER_CITY = (
    "SELECT c.city, sum(o.amount) AS revenue, count(*) AS orders "
    "FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.city"
)


def document(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    metadata = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
    }


def problems(sql: str, key: list[str], mode: str = "upsert", **customers: Any) -> list[SpecProblem]:
    logs = [
        document("Log", "orders", {"schema": "id INT, customer INT, amount DECIMAL(10,2)",
                                   "compaction": True, "key": ["id"]}),
        document("Log", "customers", {"schema": "id INT, city STRING", "compaction": True,
                                      "key": ["id"], **customers}),
    ]  # fmt: skip
    output: dict[str, Any] = {"mode": mode, "key": key} if mode == "upsert" else {}
    view = document(
        "DerivedView",
        "v",
        {
            "inputs": [
                {"log": "orders", "alias": "orders"},
                {"log": "customers", "alias": "customers"},
            ],
            "sql": sql,
            "output": output,
        },
    )
    pipeline, _, _ = namespace_pipeline(logs, [view])
    return list(pipeline.problems)


@pytest.mark.parametrize(
    ("sql", "key"),
    [
        (PER_CITY, ["city"]),
        ("SELECT o.id, o.amount, c.city FROM orders o JOIN customers c "
         "ON o.customer = c.id", ["id"]),
        ("SELECT o.id, c.city FROM customers c RIGHT JOIN orders o ON c.id = o.customer", ["id"]),
        ("SELECT o.id, c.city FROM orders o LEFT JOIN customers c ON o.customer = c.id "
         "WHERE o.amount > 3", ["id"]),
        ("SELECT count(*) AS n, avg(o.amount) AS mean FROM orders o JOIN customers c "
         "ON o.customer = c.id HAVING count(*) > 1", []),
    ],
)  # fmt: skip
def test_joins_of_tables_kept_exact_are_valid(sql: str, key: list[str]) -> None:
    assert problems(sql, key) == []


@pytest.mark.parametrize(
    ("sql", "key", "fragment"),
    [
        ("SELECT o.id, c.city FROM orders o FULL JOIN customers c ON o.customer = c.id", ["id"],
         "as a FULL JOIN"),
        ("SELECT o.id, c.city FROM orders o CROSS JOIN customers c", ["id"], "CROSS JOIN"),
        ("SELECT o.id, c.city FROM orders o JOIN customers c ON o.customer > c.id", ["id"],
         "an equality of an expression of one table and one of the other"),
        ("SELECT id, c.city FROM orders o JOIN customers c ON o.customer = c.id", ["id"],
         "which table 'orders' and table 'customers' both have: qualify it (o.id, c.id)"),
        ("SELECT c.city, o.amount FROM orders o JOIN customers c ON o.customer = c.id",
         ["city"], "does not hold orders.id as selected"),
        ("SELECT c.city, percentile(o.amount, 0.5) AS p FROM orders o JOIN customers c "
         "ON o.customer = c.id GROUP BY c.city", ["city"],
         "uses PERCENTILE(orders.amount, 0.5) over the join of tables 'orders' and 'customers'"),
        ("SELECT o.id, c.city FROM orders o JOIN customers c ON o.customer = c.id "
         "ORDER BY o.id", ["id"], "uses ORDER BY over the join of tables"),
    ],
)  # fmt: skip
def test_what_is_not_kept_exact_over_a_join_of_tables_is_refused(
    sql: str, key: list[str], fragment: str
) -> None:
    found = [p for p in problems(sql, key) if p.field == "spec.sql"]
    assert found, problems(sql, key)
    assert fragment in found[0].message, found[0].message
    assert "_dtry" not in found[0].message


def test_a_join_of_tables_is_a_table_so_its_output_is_upsert() -> None:
    found = [p for p in problems(PER_CITY, [], mode="append") if p.field == "spec.output.mode"]
    assert found
    assert "joins tables 'orders' and 'customers'" in found[0].message
    assert "set mode: upsert" in found[0].message


def test_the_lookup_side_is_second_and_its_key_alone_identifies_a_pair() -> None:
    sql = "SELECT o.id, c.city FROM customers c JOIN orders o ON c.id = o.customer"
    join = joined_tables(sql, ["orders", "customers"], COLUMNS, KEYS, ["id"])
    assert (join.first, join.second, join.left) == ("orders", "customers", False)
    assert (join.first_keys, join.second_keys) == (("`customer`",), ("`id`",))
    assert join.query.table == JOINED
    assert f"`{flat('customers', 'city')}` AS `city`" in join.query.pre_sql
    assert "__deleted" not in join.query.pre_sql.replace(flat("orders", "__deleted"), "")


def test_a_join_not_on_a_key_is_identified_by_both_rows() -> None:
    sql = "SELECT o.id, c.id AS cid FROM orders o JOIN customers c ON o.customer = c.city"
    with pytest.raises(TableQueryError, match=r"does not hold customers\.id"):
        joined_tables(sql, ["orders", "customers"], COLUMNS, KEYS, ["id"])
    assert joined_tables(sql, ["orders", "customers"], COLUMNS, KEYS, ["id", "cid"]).query


def test_a_side_whose_key_is_not_known_yet_is_checked_when_it_is() -> None:
    sql = "SELECT c.city, o.amount FROM orders o JOIN customers c ON o.customer = c.id"
    keys = {"orders": None, "customers": ["id"]}
    assert joined_tables(sql, ["orders", "customers"], COLUMNS, keys, ["city"]).query
