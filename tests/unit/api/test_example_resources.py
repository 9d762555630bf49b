"""The example pipelines are valid resources whose SQL fits their declared schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlglot import exp

from distributary.api import DerivedView, Log, Resource, parse_resource
from distributary.sql import parse_ddl, parse_query

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NAMES = ["clickstream", "orders", "sensors"]


def _documents(example: str) -> list[dict[str, Any]]:
    files = sorted((EXAMPLES / example).glob("*.yaml"))
    assert files, f"examples/{example} has no YAML"
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d is not None]


def _resources(example: str) -> dict[str, Resource]:
    return {r.metadata.name: r for r in map(parse_resource, _documents(example))}


def _output_columns(name: str, resources: dict[str, Resource]) -> set[str]:
    resource = resources[name]
    if isinstance(resource, Log):
        assert resource.spec.record_schema is not None, f"{name} declares no schema"
        return {c.name for c in parse_ddl(resource.spec.record_schema)}
    assert isinstance(resource, DerivedView)
    return set(parse_query(resource.spec.sql).named_selects)


@pytest.mark.parametrize("example", NAMES)
def test_every_document_is_a_valid_resource_with_a_readme(example: str) -> None:
    resources = [parse_resource(d) for d in _documents(example)]
    assert resources
    assert all(r.api_version == "distributary.dev/v1alpha1" for r in resources)
    assert (EXAMPLES / example / "README.md").is_file()


@pytest.mark.parametrize("example", NAMES)
def test_each_view_reads_only_its_aliases_and_columns_its_inputs_have(example: str) -> None:
    resources = _resources(example)
    for view in (r for r in resources.values() if isinstance(r, DerivedView)):
        query = parse_query(view.spec.sql)
        aliases = {i.alias for i in view.spec.inputs}
        assert {t.name for t in query.find_all(exp.Table)} <= aliases, view.metadata.name
        available = set().union(*(_output_columns(i.log, resources) for i in view.spec.inputs))
        # window.start and window.end are fields of the time window, not input columns.
        columns = (c for c in query.find_all(exp.Column) if c.table.lower() != "window")
        used = {c.name for c in columns} - set(query.named_selects)
        assert used <= available, f"{view.metadata.name}: {sorted(used - available)}"
        assert set(view.spec.output.key or []) <= set(query.named_selects)
        assert "*" not in query.named_selects


@pytest.mark.parametrize("example", NAMES)
def test_aggregations_are_upserts_or_windows_over_a_watermark(example: str) -> None:
    for view in (r for r in _resources(example).values() if isinstance(r, DerivedView)):
        query = parse_query(view.spec.sql)
        aggregates = query.find(exp.AggFunc) is not None or query.args.get("group") is not None
        watermarked = all(i.watermark is not None for i in view.spec.inputs)
        windowed = "GROUP BY window(" in view.spec.sql.replace("\n", " ")
        append = view.spec.output.mode == "append"
        assert not aggregates or not append or (watermarked and windowed), view.metadata.name
        assert aggregates or append, view.metadata.name


def test_sensors_aggregates_over_event_time_in_tumbling_and_sliding_windows() -> None:
    resources = _resources("sensors")
    readings = resources["readings"]
    assert isinstance(readings, Log)
    columns = {c.name: c.type for c in parse_ddl(readings.spec.record_schema or "")}
    assert columns["ts"] == "TIMESTAMP"
    views = {n: r for n, r in resources.items() if isinstance(r, DerivedView)}
    assert sorted(views) == ["sensor-trends", "site-minutes"]
    for view in views.values():
        assert view.spec.output.mode == "append"
        [item] = view.spec.inputs
        assert item.watermark is not None
        assert (item.watermark.column, item.watermark.delay) == ("ts", "30s")
    assert "window(ts, '1 minute')" in views["site-minutes"].spec.sql
    assert "window(ts, '5 minutes', '1 minute')" in views["sensor-trends"].spec.sql


def test_clickstream_has_page_views_an_enriched_stream_a_table_a_view_of_a_view_a_join() -> None:
    resources = _resources("clickstream")
    log = resources["page-views"]
    assert isinstance(log, Log)
    assert log.spec.key == ["user_id"]
    assert log.spec.topic_configs() == {"retention.ms": str(7 * 24 * 3600 * 1000)}
    views = {n: r for n, r in resources.items() if isinstance(r, DerivedView)}
    modes = {n: (v.spec.output.mode, v.spec.output.key) for n, v in views.items()}
    assert modes == {
        "enriched-page-views": ("append", None),
        "views-per-user": ("upsert", ["user_id"]),
        "views-per-country": ("upsert", ["country"]),
        "views-with-plan": ("append", None),
    }
    assert [i.log for i in views["views-per-country"].spec.inputs] == ["enriched-page-views"]
    users = resources["users"]
    assert isinstance(users, Log)
    assert (users.spec.compaction, users.spec.key) == (True, ["user_id"])
    assert [i.log for i in views["views-with-plan"].spec.inputs] == ["page-views", "users"]


def test_orders_is_a_compacted_changelog_and_a_table_of_totals_per_customer() -> None:
    resources = _resources("orders")
    orders = resources["orders"]
    assert isinstance(orders, Log)
    assert orders.spec.compaction
    assert orders.spec.key == ["order_id"]
    assert orders.spec.topic_configs() == {"cleanup.policy": "compact"}
    columns = {c.name: c.type for c in parse_ddl(orders.spec.record_schema or "")}
    assert columns["amount"].replace(" ", "") == "DECIMAL(12,2)"
    totals = resources["customer-totals"]
    assert isinstance(totals, DerivedView)
    assert (totals.spec.output.mode, totals.spec.output.key) == ("upsert", ["customer_id"])
