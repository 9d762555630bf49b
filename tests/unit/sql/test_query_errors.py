"""The mistakes `analyze_query` refuses, each with a short message saying what to do."""

from __future__ import annotations

import pytest

from distributary.sql import Column, SqlError, analyze_query, parse_ddl

TABLES = {
    "clicks": parse_ddl("user_id STRING, url STRING, ts TIMESTAMP"),
    "users": parse_ddl("user_id STRING, name STRING"),
    "raw": [],
}


def refused(sql: str) -> SqlError:
    with pytest.raises(SqlError) as caught:
        analyze_query(sql, TABLES)
    return caught.value


def test_a_table_that_is_not_an_alias_lists_the_aliases() -> None:
    error = refused("SELECT * FROM page_views")
    assert str(error) == (
        "reads table 'page_views', which is not an input alias: use one of "
        "clicks, users, raw, or add an input with alias 'page_views'"
    )


def test_a_table_in_a_database_is_not_an_alias() -> None:
    assert "reads table 'db.clicks'" in str(refused("SELECT * FROM db.clicks"))


def test_a_table_read_inside_a_cte_is_checked_too() -> None:
    assert "reads table 'other'" in str(refused("WITH x AS (SELECT * FROM other) SELECT * FROM x"))


def test_a_column_the_table_does_not_have_names_the_table_and_the_nearest_column() -> None:
    error = refused("SELECT c.usr_id FROM clicks c")
    assert str(error) == (
        "uses column 'usr_id', which table 'clicks' does not have (did you "
        "mean 'user_id'?); columns: user_id, url, ts"
    )
    assert error.table == "clicks"


def test_an_unqualified_unknown_column_over_one_table() -> None:
    error = refused("SELECT user_id, href FROM clicks WHERE url IS NOT NULL")
    assert "uses column 'href', which table 'clicks' does not have" in str(error)
    assert error.table == "clicks"


def test_an_unqualified_unknown_column_over_a_join_names_every_table() -> None:
    error = refused("SELECT nme FROM clicks c JOIN users u ON c.user_id = u.user_id")
    assert "uses column 'nme', which none of table 'clicks', table 'users' has" in str(error)
    assert "(did you mean 'name'?)" in str(error)


def test_unknown_columns_are_found_in_where_group_by_and_join_conditions() -> None:
    assert "'href'" in str(refused("SELECT user_id FROM clicks WHERE href = 'x'"))
    assert "'day'" in str(refused("SELECT count(*) AS n FROM clicks GROUP BY day"))
    assert "'uid'" in str(refused("SELECT c.url FROM clicks c JOIN users u ON c.uid = u.user_id"))


def test_a_column_a_subquery_does_not_output() -> None:
    error = refused("SELECT s.ts FROM (SELECT user_id FROM clicks) s")
    assert "uses column 'ts', which subquery 's' does not have" in str(error)
    assert error.table is None


def test_a_column_a_cte_does_not_output() -> None:
    error = refused("WITH x AS (SELECT user_id FROM clicks) SELECT url FROM x")
    assert "uses column 'url', which CTE 'x' does not have" in str(error)


def test_a_qualifier_that_is_neither_table_nor_column() -> None:
    error = refused("SELECT nope.x FROM clicks")
    assert "'nope' is neither a table nor a column there: use one of clicks" in str(error)


@pytest.mark.parametrize(
    ("sql", "shown"),
    [
        ("SELECT user_id, upper(url) FROM clicks", "output column 2 (UPPER(url))"),
        ("SELECT 1 FROM clicks", "output column 1 (1)"),
        ("SELECT count(*) FROM clicks", "output column 1 (COUNT(*))"),
    ],
)
def test_an_output_column_without_a_name(sql: str, shown: str) -> None:
    assert str(refused(sql)) == f"{shown} has no name: add `AS name` after it"


def test_two_output_columns_with_one_name() -> None:
    error = refused("SELECT c.user_id, u.user_id FROM clicks c JOIN users u USING (user_id)")
    assert str(error) == "outputs two columns named 'user_id': rename one with `AS other_name`"


def test_names_that_differ_only_in_case_are_one_name_to_spark() -> None:
    assert "two columns named" in str(refused("SELECT url, user_id AS URL FROM clicks"))


def test_select_star_over_a_join_may_produce_a_duplicate() -> None:
    assert "two columns named 'user_id'" in str(refused("SELECT * FROM clicks, users"))


def test_sql_that_does_not_parse() -> None:
    assert str(refused("SELECT url FROM")).startswith("does not parse as Spark SQL")


def test_a_statement_that_is_not_a_query() -> None:
    assert str(refused("DROP TABLE clicks")) == "is a DROP statement: write one SELECT query"


def test_an_unknown_schema_does_not_excuse_an_unknown_table() -> None:
    assert "reads table 'rawer'" in str(refused("SELECT * FROM raw JOIN rawer"))


def test_an_error_is_the_same_each_time_the_query_is_analysed() -> None:
    tables = {"clicks": [Column("user", "STRING")]}
    for _ in range(2):  # the second answer comes from what the first one kept
        with pytest.raises(SqlError, match="amount") as caught:
            analyze_query("SELECT clicks.amount FROM clicks", tables)
        assert caught.value.table == "clicks"
    assert analyze_query("SELECT user FROM clicks", tables).names == ("user",)
