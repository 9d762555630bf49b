"""Parsing Spark SQL that sqlglot reads differently from Spark, and DDL written back as text."""

from __future__ import annotations

import pytest

from distributary.sql import Column, canonical_sql, parse_ddl, parse_query, to_ddl


def test_window_right_after_group_by_is_the_time_window_function() -> None:
    query = parse_query("SELECT count(*) AS c FROM t GROUP BY window(ts, '5 minutes'), user")
    assert "WINDOW(ts, '5 minutes')" in query.sql(dialect="spark")


def test_the_window_clause_still_parses() -> None:
    query = parse_query("SELECT rank() OVER w AS r FROM t WINDOW w AS (PARTITION BY a ORDER BY b)")
    assert "WINDOW w AS" in query.sql(dialect="spark")


def test_canonical_sql_ignores_layout_and_comments() -> None:
    assert canonical_sql("select a  -- note\n from t group by window(ts, '1 minute'), a") == (
        canonical_sql("SELECT a FROM t GROUP BY window(ts, '1 minute'), a")
    )


@pytest.mark.parametrize("name", ["select", "from", "end", "timestamp", "a b", "9lives", "x`y"])
def test_ddl_quotes_names_that_need_it_and_reads_back(name: str) -> None:
    columns = [Column(name, "INT"), Column("plain_name", "STRING")]
    assert parse_ddl(to_ddl(columns)) == columns


def test_ddl_leaves_plain_names_unquoted() -> None:
    assert (
        to_ddl([Column("user_id", "STRING"), Column("n", "BIGINT")]) == "user_id STRING, n BIGINT"
    )
