"""A Source's plan: the Spark type of each column as Debezium writes it, what a table's shape
allows, the connector's configuration, and the warning about retained WAL."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api.source import Source
from distributary.plan.sources.source_plan import (
    Column,
    SlotReading,
    TableShape,
    connector_config,
    resolve_table,
    resolved,
    spark_type,
    wal_warning,
)


def _source(**spec: Any) -> Source:
    return Source.model_validate(
        {
            "metadata": {"name": "shop", "namespace": "sales"},
            "spec": {
                "postgres": {
                    "host": "db.example",
                    "database": "shop",
                    "user": "cdc",
                    "passwordSecret": {"name": "shop-db"},
                },
                "tables": [{"name": "public.orders"}, {"name": "public.order_lines"}],
                **spec,
            },
        }
    )


@pytest.mark.parametrize(
    ("pg", "spark"),
    [
        ("integer", "INT"),
        ("bigint", "BIGINT"),
        ("smallint", "SMALLINT"),
        ("numeric(10,2)", "DECIMAL(10,2)"),
        ("numeric(60,2)", "STRING"),
        ("numeric", "STRING"),
        ("character varying(20)", "STRING"),
        ("character(3)", "STRING"),
        ("text", "STRING"),
        ("boolean", "BOOLEAN"),
        ("timestamp with time zone", "TIMESTAMP"),
        ("timestamp(3) with time zone", "TIMESTAMP"),
        ("timestamp without time zone", "BIGINT"),
        ("date", "INT"),
        ("bytea", "BINARY"),
        ("integer[]", "ARRAY<INT>"),
        ("text[]", "ARRAY<STRING>"),
        ("jsonb", "STRING"),
        ("point", None),
        ("tsvector", None),
        ("point[]", None),
    ],
)
def test_each_column_type_maps_to_the_spark_type_of_what_debezium_writes(
    pg: str, spark: str | None
) -> None:
    assert spark_type(Column("c", pg)) == spark


def test_an_enum_is_carried_as_its_label() -> None:
    assert spark_type(Column("state", "order_state", enum=True)) == "STRING"


SHAPE = TableShape(
    "public.orders",
    (Column("id", "integer"), Column("customer", "text"), Column("amount", "numeric(10,2)")),
    ("id",),
)


def test_a_table_gives_its_columns_and_primary_key() -> None:
    source = _source()
    found = resolve_table(source, 0, source.spec.tables[0], SHAPE)
    assert found.problems == ()
    assert found.columns == "`id` INT, `customer` STRING, `amount` DECIMAL(10,2)"
    assert found.key == ("id",)
    logs = resolved(source, [found]).spec.tables
    assert (logs[0].record_schema, logs[0].key) == (found.columns, ["id"])
    assert logs[1].record_schema is None  # not read: left as it was


def test_a_missing_table_names_the_field_the_database_and_the_fix() -> None:
    source = _source()
    found = resolve_table(source, 1, source.spec.tables[1], None)
    assert found.problems == (
        "spec.tables[1].name: there is no table 'public.order_lines' in database 'shop', or "
        "user 'cdc' may not read it: create it, grant SELECT on it, or fix the name",
    )


def test_a_table_without_a_primary_key_or_with_a_column_refused_cannot_be_captured() -> None:
    source = _source()
    shape = TableShape("public.orders", (Column("id", "integer"), Column("at", "point")), ())
    problems = resolve_table(source, 0, source.spec.tables[0], shape).problems
    assert len(problems) == 2
    assert "has no primary key" in problems[0]
    assert "add a primary key" in problems[0]
    assert "column 'at'" in problems[1]
    assert "'point'" in problems[1]


def test_a_declared_key_or_schema_that_is_not_the_tables_is_refused() -> None:
    source = _source(
        tables=[{"name": "public.orders", "key": ["customer"], "schema": "id INT, customer STRING"}]
    )
    problems = resolve_table(source, 0, source.spec.tables[0], SHAPE).problems
    assert [p.split(":")[0] for p in problems] == ["spec.tables[0].key", "spec.tables[0].schema"]
    agreeing = _source(
        tables=[
            {
                "name": "public.orders",
                "key": ["id"],
                "schema": "id INT, customer STRING, amount DECIMAL(10,2), __deleted BOOLEAN",
            }
        ]
    )
    assert resolve_table(agreeing, 0, agreeing.spec.tables[0], SHAPE).problems == ()


def test_the_connector_reads_its_own_slot_and_routes_each_table_to_its_log() -> None:
    source = _source(snapshot={"mode": "NoData"})
    topics = {"public.orders": "shop-orders", "public.order_lines": "shop-order-lines"}
    config = connector_config(source, topics, "${dir:/secrets/shop-db:password}")
    assert config["plugin.name"] == "pgoutput"
    assert config["slot.name"] == config["publication.name"] == "distributary_sales_shop"
    assert config["database.password"] == "${dir:/secrets/shop-db:password}"
    assert config["table.include.list"] == r"public\.orders,public\.order_lines"
    assert config["snapshot.mode"] == "no_data"
    assert config["exactly.once.support"] == "required"
    assert config["transforms"] == "unwrap,deleted,route0,route1"
    assert config["transforms.deleted.spec"] == "__deleted:boolean"
    assert config["transforms.route1.regex"] == r"distributary\.sales\.shop\.public\.order_lines"
    assert config["transforms.route1.replacement"] == "shop-order-lines"
    assert config["transforms.unwrap.delete.tombstone.handling.mode"] == "rewrite-with-tombstone"


def test_a_long_name_still_gives_a_slot_name_postgres_accepts() -> None:
    source = Source.model_validate(
        {**_source().model_dump(by_alias=True), "metadata": {"name": "a" * 80, "namespace": "n"}}
    )
    assert len(source.identifier) == 63
    assert source.identifier.startswith("distributary_n_aaa")


def test_the_table_log_is_named_after_the_source_and_table() -> None:
    source = _source()
    assert source.table_log(source.spec.tables[1]) == "shop-order-lines"


def test_retained_wal_past_the_threshold_is_a_data_loss_risk() -> None:
    source = _source(walWarning="1Mi")
    assert wal_warning(source, SlotReading(True, True, 1024 * 1024)) is None
    idle = wal_warning(source, SlotReading(True, False, 1024 * 1024 + 1))
    assert idle is not None
    assert "keeps 1048577 bytes of WAL" in idle
    assert "nobody reads it" in idle
    assert wal_warning(source, SlotReading(False)) is None
