"""A Source's tables as their readers see them: Logs the Source writes, keyed and compacted, that
views read like any other; and the mistakes the graph finds in Sources."""

from __future__ import annotations

from typing import Any

from distributary.api import parse_resource
from distributary.graph import Pipeline, Ref

SOURCE: dict[str, Any] = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Source",
    "metadata": {"name": "shop"},
    "spec": {
        "postgres": {
            "host": "localhost",
            "database": "shop",
            "user": "cdc",
            "passwordSecret": {"name": "shop-db"},
        },
        "tables": [
            {"name": "public.orders", "schema": "id INT, customer STRING", "key": ["id"]},
            {"name": "public.customers", "log": "customers"},
        ],
    },
}
VIEW: dict[str, Any] = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": "per-customer"},
    "spec": {
        "inputs": [{"log": "shop-orders", "alias": "orders"}],
        "sql": "SELECT customer, id FROM orders",
        "output": {"mode": "upsert", "key": ["id"]},
    },
}


def _build(*documents: dict[str, Any]) -> Pipeline:
    return Pipeline.build([parse_resource(d) for d in documents])


def test_each_table_is_a_compacted_keyed_log_the_source_writes() -> None:
    pipeline = _build(SOURCE, VIEW)
    assert pipeline.ok, pipeline.problems
    source = Ref("Source", "default", "shop")
    orders = pipeline.logs[Ref.log("shop-orders")]
    assert orders.spec.compaction
    assert orders.spec.key == ["id"]
    assert orders.spec.record_schema == "id INT, customer STRING, __deleted BOOLEAN"
    assert pipeline.writer(orders) == source
    assert pipeline.is_captured(orders)
    assert not pipeline.is_derived(orders)
    customers = pipeline.logs[Ref.log("customers")]
    assert customers.spec.record_schema is None  # read from the database at run time
    assert set(pipeline.table_logs(source)) == {"public.orders", "public.customers"}
    view = Ref("DerivedView", "default", "per-customer")
    assert pipeline.order.index(source) < pipeline.order.index(view)
    assert (Ref.log("shop-orders"), view) in pipeline.edges


def test_a_table_log_that_is_declared_too_or_written_by_another_is_refused() -> None:
    declared = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": "customers"},
    }
    other = {**SOURCE, "metadata": {"name": "crm"}}
    other["spec"] = {
        **SOURCE["spec"],
        "tables": [{"name": "public.accounts", "log": "shop-orders"}],
    }
    problems = [str(p) for p in _build(SOURCE, declared, other).problems]
    assert problems == [
        "Source/default/shop spec.tables[0].log: writes Log 'shop-orders', which "
        "Source/default/crm writes too: a log has one writer; set spec.tables[0].log to another "
        "name",
        "Source/default/shop spec.tables[1].log: names Log 'customers', which is declared as a "
        "Log too: a Source creates its tables' Logs; set spec.tables[1].log to another name or "
        "remove the Log",
    ]


def test_a_pipeline_rebuilt_with_a_sources_columns_lets_views_read_them() -> None:
    pipeline = _build(SOURCE, VIEW)
    source = pipeline.captures[Ref("Source", "default", "shop")]
    tables = [
        t.model_copy(update={"record_schema": "id INT, name STRING"}) for t in source.spec.tables
    ]
    filled = source.model_copy(update={"spec": source.spec.model_copy(update={"tables": tables})})
    again = pipeline.rebuilt({Ref.of(filled): filled})
    assert (
        again.logs[Ref.log("customers")].spec.record_schema
        == "id INT, name STRING, __deleted BOOLEAN"
    )
    assert again.problems  # the view selects `customer`, which the table no longer has
    assert "customer" in str(again.problems[0])
