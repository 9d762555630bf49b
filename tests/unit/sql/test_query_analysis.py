"""What `analyze_query` finds in queries that are right: the tables read and the typed output."""

from __future__ import annotations

import pytest

from distributary.sql import Column, OutputColumn, QueryAnalysis, analyze_query, parse_ddl

TABLES = {
    "clicks": parse_ddl(
        "userId STRING, url STRING, ts TIMESTAMP, n INT, price DECIMAL(10,2), "
        "geo STRUCT<Country: STRING, city: STRING>, tags ARRAY<STRING>"
    ),
    "users": parse_ddl("user_id STRING, name STRING"),
    "raw": [],
}


def analyze(sql: str) -> QueryAnalysis:
    return analyze_query(sql, TABLES)


def types(sql: str) -> list[tuple[str, str | None]]:
    return [(c.name, c.type) for c in analyze(sql).columns]


def test_select_star_outputs_every_column_with_its_declared_spelling_and_type() -> None:
    analysis = analyze("SELECT * FROM clicks")
    assert analysis.tables == ("clicks",)
    assert analysis.names == ("userId", "url", "ts", "n", "price", "geo", "tags")
    assert analysis.columns[5] == OutputColumn("geo", "STRUCT<Country: STRING, city: STRING>")
    assert analysis.complete


def test_qualified_and_unqualified_columns_in_a_join() -> None:
    sql = "SELECT c.userId, name, c.url AS link FROM clicks c JOIN users u ON c.userId = u.user_id"
    analysis = analyze(sql)
    assert analysis.tables == ("clicks", "users")
    assert types(sql) == [("userId", "STRING"), ("name", "STRING"), ("link", "STRING")]


def test_columns_match_without_regard_to_case_as_in_spark() -> None:
    assert types("SELECT USERID AS Who FROM Clicks") == [("Who", "STRING")]


def test_group_by_with_aggregates() -> None:
    sql = (
        "SELECT userId, count(*) AS views, sum(n) AS total, avg(n) AS mean, max(ts) AS last "
        "FROM clicks GROUP BY userId"
    )
    assert types(sql) == [
        ("userId", "STRING"),
        ("views", "BIGINT"),
        ("total", "BIGINT"),
        ("mean", "DOUBLE"),
        ("last", "TIMESTAMP"),
    ]


def test_group_by_and_having_may_use_output_aliases() -> None:
    sql = "SELECT userId AS u, count(*) AS c FROM clicks GROUP BY u HAVING c > 1"
    assert types(sql) == [("u", "STRING"), ("c", "BIGINT")]


def test_window_functions() -> None:
    sql = (
        "SELECT userId, row_number() OVER (PARTITION BY userId ORDER BY ts) AS rn, "
        "lag(n) OVER (PARTITION BY userId ORDER BY ts) AS previous FROM clicks"
    )
    assert types(sql) == [("userId", "STRING"), ("rn", "INT"), ("previous", "INT")]


@pytest.mark.parametrize("function", ["window", "session_window"])
def test_time_windows_are_typed_as_spark_types_them(function: str) -> None:
    sql = (
        f"SELECT {function}(ts, '5 minutes') AS w, count(*) AS c FROM clicks "
        f"GROUP BY {function}(ts, '5 minutes')"
    )
    assert types(sql) == [("w", "STRUCT<start: TIMESTAMP, `end`: TIMESTAMP>"), ("c", "BIGINT")]


def test_the_time_window_struct_is_named_window_and_its_fields_can_be_read() -> None:
    sql = (
        "SELECT window, window.start, window.end AS until, userId FROM clicks "
        "GROUP BY userId, window(ts, '10 minutes', '5 minutes')"
    )
    assert types(sql) == [
        ("window", "STRUCT<start: TIMESTAMP, `end`: TIMESTAMP>"),
        ("start", "TIMESTAMP"),
        ("until", "TIMESTAMP"),
        ("userId", "STRING"),
    ]


def test_an_unaliased_time_window_is_named_window() -> None:
    sql = "SELECT window(ts, '1 hour'), count(*) AS c FROM clicks GROUP BY window(ts, '1 hour')"
    assert analyze(sql).names == ("window", "c")


def test_struct_fields() -> None:
    sql = "SELECT geo.Country, c.geo.city AS town FROM clicks c"
    assert types(sql) == [("Country", "STRING"), ("town", "STRING")]


def test_ctes_and_subqueries_are_not_tables() -> None:
    sql = (
        "WITH recent AS (SELECT userId, n FROM clicks), totals AS "
        "(SELECT userId, sum(n) AS total FROM recent GROUP BY userId) "
        "SELECT t.userId, t.total, s.name FROM totals t "
        "JOIN (SELECT user_id, name FROM users) s ON t.userId = s.user_id"
    )
    analysis = analyze(sql)
    assert analysis.tables == ("clicks", "users")
    assert types(sql) == [("userId", "STRING"), ("total", "BIGINT"), ("name", "STRING")]


def test_case_and_casts() -> None:
    sql = (
        "SELECT CASE WHEN n > 10 THEN 'long' ELSE 'short' END AS kind, CAST(n AS BIGINT) AS big, "
        "CAST(ts AS DATE) AS day, price FROM clicks"
    )
    assert types(sql) == [
        ("kind", "STRING"),
        ("big", "BIGINT"),
        ("day", "DATE"),
        ("price", "DECIMAL(10, 2)"),
    ]


def test_functions_over_typed_columns() -> None:
    sql = (
        "SELECT upper(url) AS u, length(url) AS len, to_date(ts) AS d, size(tags) AS k, "
        "n * 2 AS twice, n / 2 AS half, url LIKE 'https%' AS secure FROM clicks"
    )
    assert types(sql) == [
        ("u", "STRING"),
        ("len", "INT"),
        ("d", "DATE"),
        ("k", "INT"),
        ("twice", "INT"),
        ("half", "DOUBLE"),
        ("secure", "BOOLEAN"),
    ]


@pytest.mark.parametrize(
    "expression",
    [
        "1.5",  # Spark: DECIMAL(2,1)
        "price * 2",  # Spark's decimal precision rules
        "sum(price)",
        "nvl(n, 0)",  # sqlglot widens to BIGINT
        "3000000000",  # Spark: BIGINT
        "parse_url(url, 'HOST')",  # unknown to sqlglot
        "NULL",
    ],
)
def test_a_type_is_left_unknown_rather_than_guessed(expression: str) -> None:
    assert types(f"SELECT {expression} AS x FROM clicks") == [("x", None)]


def test_generator_columns_are_left_untyped() -> None:
    sql = "SELECT userId, tag FROM clicks LATERAL VIEW explode(tags) t AS tag"
    assert types(sql) == [("userId", "STRING"), ("tag", None)]


def test_set_operations_take_names_from_the_first_branch_and_types_when_all_agree() -> None:
    assert types("SELECT userId AS id FROM clicks UNION ALL SELECT user_id FROM users") == [
        ("id", "STRING")
    ]
    assert types("SELECT n FROM clicks UNION ALL SELECT name FROM users") == [("n", None)]


def test_a_correlated_subquery() -> None:
    sql = (
        "SELECT userId FROM clicks WHERE EXISTS "
        "(SELECT 1 FROM users WHERE users.user_id = clicks.userId)"
    )
    assert analyze(sql).tables == ("clicks", "users")


def test_a_table_of_unknown_schema_is_read_but_not_checked() -> None:
    analysis = analyze("SELECT r.anything, c.n FROM raw r JOIN clicks c ON r.id = c.userId")
    assert analysis.tables == ("raw", "clicks")
    assert analysis.columns == (OutputColumn("anything", None), OutputColumn("n", "INT"))


def test_select_star_over_an_unknown_schema_leaves_the_output_incomplete() -> None:
    analysis = analyze("SELECT id, * FROM raw")
    assert analysis.names == ("id",)
    assert not analysis.complete
    assert analysis.record_schema() is None


def test_record_schema_is_known_only_when_every_type_is() -> None:
    assert analyze("SELECT userId, n FROM clicks").record_schema() == [
        Column("userId", "STRING"),
        Column("n", "INT"),
    ]
    assert analyze("SELECT userId, 1.5 AS x FROM clicks").record_schema() is None


def test_outputs_compares_names_as_spark_does() -> None:
    analysis = analyze("SELECT userId FROM clicks")
    assert analysis.outputs("USERID")
    assert not analysis.outputs("user_id")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT c.userId FROM clicks c LEFT SEMI JOIN users u ON c.userId = u.user_id",
        "SELECT userId, transform(tags, t -> upper(t)) AS up FROM clicks",
        "SELECT userId, count(*) AS n FROM clicks GROUP BY ALL",
        "SELECT * FROM clicks WHERE userId IN (SELECT user_id FROM users)",
        "SELECT * FROM clicks PIVOT (sum(n) FOR url IN ('x', 'y'))",
        "SELECT userId FROM clicks QUALIFY row_number() OVER (PARTITION BY userId ORDER BY ts) = 1",
        "SELECT userId, ts FROM clicks WHERE ts > current_timestamp() - INTERVAL 1 HOUR",
        "SELECT /*+ BROADCAST(u) */ c.userId, u.name FROM clicks c JOIN users u "
        "ON c.userId = u.user_id",
    ],
)
def test_other_spark_sql_is_accepted(sql: str) -> None:
    assert analyze(sql).tables[0] == "clicks"


@pytest.mark.parametrize(
    ("sql", "reads", "names"),
    [
        ("SELECT col1 FROM VALUES (1)", (), ["col1"]),
        ("SELECT col1, col2 FROM VALUES (1, 'a'), (2, 'b')", (), ["col1", "col2"]),
        (
            "SELECT c.userId, v.col2 AS label FROM clicks c JOIN VALUES ('u1', 'x') v "
            "ON c.userId = v.col1",
            ("clicks",),
            ["userId", "label"],
        ),
        ("SELECT a FROM VALUES (1) AS t(a)", (), ["a"]),  # named by the query: kept
    ],
)
def test_an_inline_tables_columns_are_named_as_spark_names_them(
    sql: str, reads: tuple[str, ...], names: list[str]
) -> None:
    analysis = analyze(sql)
    assert analysis.tables == reads
    assert [c.name for c in analysis.columns] == names
