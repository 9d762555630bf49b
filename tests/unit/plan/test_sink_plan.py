"""A Sink's table from its Log's schema: the column types, the statements, what a table that
exists already may become, and what is refused."""

from __future__ import annotations

import pytest

from distributary.api.sink import Sink
from distributary.plan.sinks.sink_plan import (
    beside_table,
    create_offsets,
    create_table,
    delete,
    migration,
    pg_type,
    revision_label,
    sink_run,
    switch_statements,
    upsert,
)


def _sink(mode: str = "upsert", **target: object) -> Sink:
    return Sink.model_validate(
        {
            "metadata": {"name": "accounts", "namespace": "bank"},
            "spec": {
                "log": "accounts",
                "postgres": {
                    "host": "db",
                    "database": "serving",
                    "user": "server",
                    "passwordSecret": {"name": "serving-db"},
                    "table": "public.accounts",
                    "mode": mode,
                    **target,
                },
            },
        }
    )


COLUMNS = "id INT, owner STRING, balance DECIMAL(12,2), tags ARRAY<STRING>, __deleted BOOLEAN"


def _run(mode: str = "upsert"):  # type: ignore[no-untyped-def]
    return sink_run(_sink(mode), COLUMNS, ["id"], "accounts", "k:9092", "/secrets/pw")


@pytest.mark.parametrize(
    ("spark", "pg"),
    [
        ("INT", "integer"),
        ("BIGINT", "bigint"),
        ("STRING", "text"),
        ("DECIMAL(12, 2)", "numeric(12,2)"),
        ("TIMESTAMP", "timestamp with time zone"),
        ("ARRAY<STRING>", "jsonb"),
        ("STRUCT<a: INT>", "jsonb"),
        ("BOOLEAN", "boolean"),
        ("BINARY", "bytea"),
    ],
)
def test_each_spark_type_has_its_postgres_type(spark: str, pg: str) -> None:
    assert pg_type(spark) == pg


def test_the_run_spec_leaves_the_deleted_marker_out_and_keys_as_the_log() -> None:
    run = _run()
    assert [n for n, _ in run.columns] == ["id", "owner", "balance", "tags"]
    assert run.key == ["id"]
    assert run.group == "distributary.bank.accounts.sink"
    assert run.name == "bank/accounts"
    assert _run("append").key == []


def test_the_table_is_keyed_in_upsert_mode_only() -> None:
    assert create_table(_run()) == (
        'CREATE TABLE IF NOT EXISTS "public"."accounts" ("id" integer, "owner" text, '
        '"balance" numeric(12,2), "tags" jsonb, PRIMARY KEY ("id"))'
    )
    assert "PRIMARY KEY" not in create_table(_run("append"))
    assert '"public".distributary_sink_offsets' in create_offsets(_run())


def test_an_upsert_replaces_the_row_of_its_key_and_a_delete_removes_it() -> None:
    assert upsert(_run()).endswith(
        'ON CONFLICT ("id") DO UPDATE SET "owner" = EXCLUDED."owner", '
        '"balance" = EXCLUDED."balance", "tags" = EXCLUDED."tags"'
    )
    assert "ON CONFLICT" not in upsert(_run("append"))
    assert delete(_run()) == 'DELETE FROM "public"."accounts" WHERE "id" = %s::integer'


def test_columns_the_log_gained_are_added_and_other_changes_refused() -> None:
    run = _run()
    grown = migration(run, {"id": "integer", "owner": "text", "balance": "numeric(12,2)"}, ["id"])
    assert grown.add == ('ALTER TABLE "public"."accounts" ADD COLUMN "tags" jsonb',)
    assert grown.problems == ()
    changed = migration(
        run, {"id": "integer", "owner": "integer", "balance": "numeric(12,2)"}, ["owner"]
    )
    assert changed.problems == (
        "column 'owner' of public.accounts is integer, but the Log's STRING needs text: alter "
        "the column, or write to a new table",
        "public.accounts's primary key is ['owner'], but the Log is keyed by ['id']: give the "
        "table that primary key, or write to a new table",
    )


def test_a_key_in_append_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="only read in upsert mode"):
        _sink("append", key=["id"])


def test_a_redis_sink_keys_each_record_by_its_key_values() -> None:
    from distributary.sinks.redis import offsets_key, redis_key

    sink = Sink.model_validate(
        {
            "metadata": {"name": "cache", "namespace": "bank"},
            "spec": {"log": "accounts", "redis": {"host": "r", "keyPrefix": "acct:", "ttl": "1h"}},
        }
    )
    run = sink_run(sink, COLUMNS, ["id", "owner"], "accounts", "k:9092", None)
    assert (run.store, run.ttl_seconds, run.key) == ("redis", 3600, ["id", "owner"])
    assert redis_key(run, b'{"id":42,"owner":"ada"}') == "acct:42:ada"
    assert offsets_key(run) == "distributary:sink:bank/cache:accounts"


def test_a_sink_names_one_store() -> None:
    with pytest.raises(ValueError, match="give one store: postgres or redis"):
        Sink.model_validate({"metadata": {"name": "s"}, "spec": {"log": "accounts"}})


def test_a_new_revisions_table_is_named_for_its_revision_beside_the_sinks() -> None:
    assert revision_label("accounts.r2") == "r2"
    assert revision_label("renamed-topic").startswith("t")
    assert len(revision_label("renamed-topic")) == 9
    assert beside_table("public.accounts", "accounts.r12") == "public.accounts__r12"
    long = beside_table("public." + "a" * 70, "accounts.r3")
    assert long == "public." + "a" * 59 + "__r3"
    assert len(long.split(".", 1)[1]) == 63


def test_readers_are_switched_by_two_renames_in_one_transaction() -> None:
    run = _run()
    assert switch_statements(run, "public.accounts__r2", "public.accounts__r1") == [
        'ALTER TABLE "public"."accounts" RENAME TO "accounts__r1"',
        'ALTER TABLE "public"."accounts__r2" RENAME TO "accounts"',
    ]
    assert switch_statements(run, "public.accounts__r2", None) == [
        'ALTER TABLE "public"."accounts__r2" RENAME TO "accounts"'
    ]
