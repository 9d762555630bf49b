"""A view's query that Spark would refuse is refused before it is deployed: one that reads none of
its inputs, a condition that is not boolean, and what Structured Streaming does not run on a
stream (`query_rules`). Each problem names the view and `spec.sql` and says what to do; a query
Spark runs is left alone, whatever the view's output mode allows."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.graph.refused import refused_conditions

from distributary.graph import SpecProblem
from distributary.plan.views.view_plan import namespace_pipeline
from distributary.query_rules import query_problems

NS = "shop"
ALIASES = ["clicks", "users"]


def logs() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"schema": schema},
        }
        for name, schema in [
            ("clicks", "user STRING, url STRING, n INT, ts TIMESTAMP"),
            ("users", "user STRING, name STRING"),
        ]
    ]


def view(sql: str, mode: str = "append", key: str = "user") -> dict[str, Any]:
    output: dict[str, Any] = {"mode": mode, "key": [key]} if mode == "upsert" else {}
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "v", "namespace": NS, "uid": "uid-v"},
        "spec": {
            "inputs": [{"log": "clicks", "alias": "clicks"}, {"log": "users", "alias": "users"}],
            "sql": sql,
            "output": output,
        },
    }


def sql_problems(sql: str, mode: str = "append", key: str = "user") -> list[SpecProblem]:
    pipeline, _, _ = namespace_pipeline(logs(), [view(sql, mode, key)])
    return [p for p in pipeline.problems if p.field == "spec.sql"]


def refused(sql: str, mode: str, fragment: str) -> SpecProblem:
    problems = sql_problems(sql, mode)
    found = [p for p in problems if fragment in p.message]
    assert found, [p.message for p in problems]
    assert found[0].resource == f"DerivedView/{NS}/v"
    return found[0]


# A query that reads none of its inputs ---------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1 AS one",
        "SELECT * FROM VALUES (1, 'a') AS t(n, s)",
        "SELECT n FROM (SELECT 1 AS n) AS t",
        "WITH t AS (SELECT 2 AS n) SELECT n FROM t",
    ],
)
def test_a_query_that_reads_no_input_is_refused_naming_the_aliases(sql: str) -> None:
    problem = refused(sql, "append", "reads none of its inputs")
    assert "read one of clicks, users in its FROM clause" in problem.message


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT user FROM clicks",
        "WITH c AS (SELECT user FROM clicks) SELECT user FROM c",
        "SELECT t.user FROM (SELECT user FROM users) AS t",
    ],
)
def test_a_query_reading_an_input_directly_or_through_a_cte_is_not_refused(sql: str) -> None:
    assert sql_problems(sql) == []


# Conditions that are not boolean -------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("SELECT user FROM clicks WHERE 1", "has WHERE 1, which is a number"),
        ("SELECT user FROM clicks WHERE 'yes'", "has WHERE 'yes', which is a string"),
        ("SELECT user FROM clicks WHERE (n + 1)", "has WHERE n + 1, which is an arithmetic result"),
        ("SELECT user FROM clicks WHERE n * 2", "has WHERE n * 2, which is an arithmetic result"),
        (
            "SELECT user FROM clicks WHERE url || 'x'",
            "has WHERE url || 'x', which is a concatenation",
        ),
        (
            "SELECT c.user FROM clicks AS c JOIN users AS u ON c.user || u.user",
            "has JOIN ... ON c.user || u.user, which is a concatenation",
        ),
        (
            "SELECT user, count(*) AS k FROM clicks GROUP BY user HAVING count(*) - 1",
            "has HAVING COUNT(*) - 1, which is an arithmetic result",
        ),
    ],
)
def test_a_condition_that_is_a_literal_or_an_arithmetic_result_is_refused(
    sql: str, fragment: str
) -> None:
    mode = "upsert" if "GROUP BY" in sql else "append"
    problem = refused(sql, mode, fragment)
    assert "write a comparison such as `column = value`" in problem.message


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT user FROM clicks WHERE n + 1 > 2",
        "SELECT user FROM clicks WHERE TRUE",
        "SELECT user FROM clicks WHERE (url LIKE 'a%') AND n > 0",
        "SELECT user FROM clicks WHERE NOT (n = 1)",
    ],
)
def test_a_boolean_condition_is_not_refused(sql: str) -> None:
    assert sql_problems(sql) == []


# Subquery expressions over a stream -------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT user FROM clicks WHERE user IN (SELECT user FROM users)",
        "SELECT user FROM clicks WHERE user NOT IN (SELECT user FROM users)",
        "SELECT user FROM clicks WHERE EXISTS (SELECT 1 FROM users WHERE users.user = 'a')",
        "SELECT user, (SELECT max(name) FROM users) AS top FROM clicks",
        "WITH u AS (SELECT user FROM users) SELECT user FROM clicks WHERE user IN "
        "(SELECT user FROM u)",
    ],
)
def test_a_subquery_expression_reading_an_input_is_refused(sql: str) -> None:
    problem = refused(sql, "append", "reads an input in the subquery")
    assert "LEFT SEMI JOIN" in problem.message


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT user FROM clicks WHERE user IN ('a', 'b')",
        "SELECT user FROM clicks WHERE n IN (SELECT k FROM VALUES (1), (2) AS v(k))",
        "SELECT t.user FROM (SELECT user FROM clicks) AS t",
        "SELECT c.user FROM clicks AS c LEFT SEMI JOIN users AS u ON c.user = u.user",
    ],
)
def test_derived_tables_joins_and_static_subqueries_are_not_refused(sql: str) -> None:
    assert sql_problems(sql) == []


# Sorting, OFFSET and LIMIT ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "mode"),
    [
        ("SELECT user FROM clicks ORDER BY user", "append"),
        ("SELECT user FROM clicks SORT BY user", "append"),
        ("SELECT user, count(*) AS k FROM clicks GROUP BY user ORDER BY k DESC", "upsert"),
        ("SELECT t.user FROM (SELECT user FROM clicks ORDER BY n) AS t", "append"),
        ("SELECT user FROM clicks UNION ALL SELECT user FROM users ORDER BY user", "append"),
    ],
)
def test_ordering_a_stream_is_refused_in_every_mode(sql: str, mode: str) -> None:
    problem = refused(sql, mode, "orders a stream")
    assert "remove it" in problem.message


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_offset_is_refused_in_every_mode(mode: str) -> None:
    refused("SELECT user FROM clicks LIMIT 10 OFFSET 5", mode, "skips rows with OFFSET")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT user FROM clicks LIMIT 10",
        "SELECT user, count(*) AS k FROM clicks GROUP BY user LIMIT 10",
        "SELECT t.user FROM (SELECT user FROM clicks LIMIT 3) AS t",
    ],
)
def test_limit_is_refused_in_update_mode_only(sql: str) -> None:
    problem = refused(sql, "upsert", "has a LIMIT")
    assert "make the view spec.output.mode append" in problem.message
    assert query_problems(sql, ALIASES, "append") == []


# Operations Structured Streaming never runs on a stream ----------------------------------------


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("SELECT user, row_number() OVER (ORDER BY ts) AS r FROM clicks", "window function"),
        ("SELECT user, sum(n) OVER (PARTITION BY user) AS s FROM clicks", "window function"),
        ("SELECT user, lag(n) OVER w AS p FROM clicks WINDOW w AS (ORDER BY ts)", "window"),
        ("SELECT user, count(DISTINCT url) AS k FROM clicks GROUP BY user", "distinct aggregate"),
        ("SELECT user, sum(DISTINCT n) AS k FROM clicks GROUP BY user", "distinct aggregate"),
        ("SELECT user, count(*) AS k FROM clicks GROUP BY ROLLUP(user)", "ROLLUP"),
        ("SELECT user, count(*) AS k FROM clicks GROUP BY CUBE(user)", "ROLLUP or CUBE"),
        ("SELECT user, count(*) AS k FROM clicks GROUP BY GROUPING SETS ((user))", "GROUPING"),
        ("SELECT user, monotonically_increasing_id() AS i FROM clicks", "monotonically"),
        ("SELECT user FROM clicks TABLESAMPLE (10 PERCENT)", "TABLESAMPLE"),
    ],
)
def test_operations_streams_never_run_are_refused(sql: str, fragment: str) -> None:
    for mode in ("append", "upsert"):
        assert any(fragment in m for m in query_problems(sql, ALIASES, mode)), mode
    refused(sql, "upsert", fragment)


def test_a_time_window_and_a_plain_aggregate_are_not_refused() -> None:
    grouped = (
        "SELECT user, count(*) AS k, approx_count_distinct(url) AS u FROM clicks GROUP BY user"
    )
    timed = (
        "SELECT window.start AS start, count(*) AS k FROM clicks GROUP BY window(ts, '1 minute')"
    )
    assert query_problems(grouped, ALIASES, "upsert") == []
    assert query_problems(timed, ALIASES, "append") == []


# Joins and set operations ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("SELECT c.user FROM clicks AS c JOIN users AS u ON c.user = u.user", "joins two streams"),
        (
            "SELECT c.user FROM clicks AS c LEFT JOIN users AS u ON c.user = u.user",
            "joins two streams",
        ),
        ("SELECT c.user FROM clicks c, users u WHERE c.user = u.user", "joins two streams"),
    ],
)
def test_joining_two_streams_is_refused_in_update_mode_only(sql: str, fragment: str) -> None:
    refused(sql, "upsert", fragment)
    assert not any(fragment in m for m in query_problems(sql, ALIASES, "append"))


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        (
            "SELECT c.user FROM clicks AS c LEFT ANTI JOIN users AS u ON c.user = u.user",
            "LEFT ANTI JOIN with a stream",
        ),
        (
            "SELECT v.k FROM VALUES ('a') AS v(k) LEFT JOIN clicks AS c ON c.user = v.k",
            "LEFT JOIN of a stream with static rows",
        ),
        (
            "SELECT c.user FROM clicks AS c RIGHT JOIN VALUES ('a') AS v(k) ON c.user = v.k",
            "RIGHT JOIN of a stream with static rows",
        ),
        (
            "SELECT c.user FROM clicks AS c FULL OUTER JOIN VALUES ('a') AS v(k) ON c.user = v.k",
            "FULL OUTER JOIN of a stream with static rows",
        ),
        (
            "SELECT v.k FROM VALUES ('a') AS v(k) LEFT SEMI JOIN clicks AS c ON c.user = v.k",
            "LEFT SEMI JOIN of a stream with static rows",
        ),
        ("SELECT user FROM clicks INTERSECT SELECT user FROM users", "INTERSECT"),
        ("SELECT user FROM clicks EXCEPT SELECT user FROM users", "right of EXCEPT"),
        ("SELECT user FROM clicks UNION ALL SELECT 'x' AS user", "unions a stream with static"),
    ],
)
def test_joins_and_set_operations_streams_do_not_run_are_refused(sql: str, fragment: str) -> None:
    refused(sql, "append", fragment)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT c.user FROM clicks AS c LEFT JOIN VALUES ('a') AS v(k) ON c.user = v.k",
        "SELECT c.user FROM clicks AS c LEFT ANTI JOIN VALUES ('a') AS v(k) ON c.user = v.k",
        "SELECT user FROM clicks EXCEPT SELECT k AS user FROM VALUES ('a') AS v(k)",
        "SELECT user FROM clicks UNION ALL SELECT user FROM users",
    ],
)
def test_joins_and_set_operations_streams_run_are_not_refused(sql: str) -> None:
    assert sql_problems(sql) == []


def test_a_refused_query_stalls_the_view_with_invalid_spec() -> None:
    sql = "SELECT user FROM clicks ORDER BY user"
    stalled = refused_conditions(logs(), view(sql))["Stalled"]
    assert stalled["status"] == "True"
    assert "spec.sql" in stalled["message"]
    assert "orders a stream" in stalled["message"]
