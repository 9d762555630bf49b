"""A compacted Log is read as a table unless the input says `read: changes`, and what a view
computes over a table is either kept exact (`table_queries`) or refused by the graph, naming the
construct, the input and the fix: nothing over a table is computed as if it were a stream."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.graph import SpecProblem
from distributary.plan.views.view_plan import namespace_pipeline
from distributary.table_queries import TableQueryError, input_read, table_query

NS = "shop"
CUSTOMERS = "id INT, city STRING, balance DECIMAL(10,2), segment STRING"


def logs(compaction: bool = True, key: list[str] | None = None) -> list[dict[str, Any]]:
    customers: dict[str, Any] = {"schema": CUSTOMERS, "compaction": compaction}
    if key is not None:
        customers["key"] = key
    return [
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }
        for name, spec in [
            ("customers", customers),
            ("orders", {"schema": "id INT, customer INT, amount INT", "key": ["id"]}),
        ]
    ]


def view(
    sql: str, key: list[str] | None = None, mode: str = "upsert", **read: Any
) -> dict[str, Any]:
    output: dict[str, Any] = {"mode": mode, "key": key} if mode == "upsert" else {}
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "v", "namespace": NS, "uid": "uid-v"},
        "spec": {
            "inputs": [
                {"log": "customers", "alias": "c", **read},
                {"log": "orders", "alias": "o"},
            ],
            "sql": sql,
            "output": output,
        },
    }


def problems(document: dict[str, Any], **log: Any) -> list[SpecProblem]:
    pipeline, _, _ = namespace_pipeline(logs(**log), [document])
    return list(pipeline.problems)


def the_problem(document: dict[str, Any], field: str, *fragments: str, **log: Any) -> str:
    found = [p for p in problems(document, **log) if p.field == field]
    assert found, problems(document, **log)
    assert found[0].resource == f"DerivedView/{NS}/v"
    for fragment in fragments:
        assert fragment in found[0].message, found[0].message
    return found[0].message


GROUPED = "SELECT city, count(*) AS n, sum(balance) AS total FROM c GROUP BY city"


def test_a_compacted_log_is_read_as_a_table_and_another_as_a_stream() -> None:
    assert input_read(None, compaction=True) == "table"
    assert input_read(None, compaction=False) == "changes"
    assert input_read("changes", compaction=True) == "changes"


@pytest.mark.parametrize(
    ("sql", "key"),
    [
        (GROUPED, ["city"]),
        (
            "SELECT city, count(*) AS n, avg(balance) AS mean, min(balance) AS low, "
            "max(balance) AS high, "
            "count(DISTINCT segment) AS segments FROM c WHERE balance > 0 GROUP BY 1 "
            "HAVING count(*) > 2 AND sum(balance) > 10",
            ["city"],
        ),
        ("SELECT id, upper(city) AS city, balance FROM c WHERE balance >= 500", ["id"]),
        ("SELECT * FROM c", ["id"]),
        ("SELECT 'all' AS scope, count(*) AS n FROM c", ["scope"]),
    ],
)
def test_queries_kept_exact_over_a_table_are_valid(sql: str, key: list[str]) -> None:
    assert problems(view(sql, key), key=["id"]) == []


def test_an_aggregation_the_table_cannot_take_back_names_the_call_and_the_fixes() -> None:
    message = the_problem(
        view("SELECT city, collect_list(id) AS ids FROM c GROUP BY city", ["city"]),
        "spec.sql",
        "COLLECT_LIST(id)",
        "table 'c'",
        "read: changes",
    )
    assert "COUNT, SUM, AVG, MIN, MAX" in message


def test_the_issue_query_over_a_compacted_log_with_append_output_is_refused() -> None:
    the_problem(
        view(GROUPED, mode="append"),
        "spec.output.mode",
        "is append",
        "as a table",
        "set mode: upsert",
        "spec.inputs[0].read: changes",
    )


def test_reading_the_table_as_changes_is_todays_stream_by_name() -> None:
    assert problems(view(GROUPED, ["city"], read="changes")) == []


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("SELECT city, count(*) AS n FROM c GROUP BY city ORDER BY city", "ORDER BY"),
        ("SELECT DISTINCT city FROM c", "GROUP BY the selected columns"),
        ("SELECT city, count(*) OVER (PARTITION BY city) AS n FROM c", "window function"),
        ("SELECT city, segment FROM c GROUP BY city", "outside GROUP BY"),
        ("WITH x AS (SELECT * FROM c) SELECT city, count(*) AS n FROM x GROUP BY city", "WITH"),
        ("SELECT city, sum(DISTINCT balance) AS n FROM c GROUP BY city", "SUM(DISTINCT"),
    ],
)  # fmt: skip
def test_what_is_not_kept_exact_over_a_table_is_refused(sql: str, fragment: str) -> None:
    the_problem(view(sql, ["city"]), "spec.sql", fragment)


def test_an_output_key_that_misses_a_group_is_refused() -> None:
    sql = "SELECT city, segment, count(*) AS n FROM c GROUP BY city, segment"
    the_problem(view(sql, ["city"]), "spec.sql", "2 expression(s)", "holds 1 of them")
    assert problems(view(sql, ["city", "segment"])) == []


def test_selected_rows_must_keep_the_tables_key_in_the_output_key() -> None:
    the_problem(view("SELECT id, city FROM c", ["city"]), "spec.sql", "keyed by id", key=["id"])
    the_problem(view("SELECT id, city FROM c", ["id"]), "spec.sql", "not declared")


def test_a_table_read_of_a_log_that_is_not_compacted_is_refused() -> None:
    the_problem(
        view(GROUPED, ["city"], read="table"),
        "spec.inputs[0].read",
        "not compacted",
        "compaction: true",
        compaction=False,
    )


def test_a_table_read_from_a_later_position_or_with_a_watermark_is_refused() -> None:
    late = view(GROUPED, ["city"], startingPosition={"from": "Latest"})
    the_problem(late, "spec.inputs[0].startingPosition.from", "is Latest", "read: changes")
    marked = view(GROUPED, ["city"], watermark={"column": "city", "delay": "1m"})
    the_problem(marked, "spec.inputs[0].watermark", "read as a table")


def test_a_query_is_taken_apart_into_per_record_columns_and_aggregates() -> None:
    query = table_query(
        "SELECT city, count(*) AS n, max(balance) AS top FROM c WHERE balance > 0 "
        "GROUP BY city HAVING n > 1",
        "c",
        ["id"],
        ["city"],
    )
    assert query.grouping
    assert query.groups == ("_dtry_g0",)
    assert [(a.function, a.argument) for a in query.aggregates] == [
        ("count", None),
        ("max", "_dtry_x1"),
    ]
    assert query.post == ("_dtry_g0", "_dtry_a0", "_dtry_a1")
    assert query.having == "_dtry_a0 > 1"
    assert "COALESCE((balance > 0), FALSE) AS _dtry_match" in query.pre_sql


def test_a_refusal_is_an_error_the_caller_can_name_a_field_for() -> None:
    with pytest.raises(TableQueryError, match="LIMIT"):
        table_query("SELECT id FROM c LIMIT 3", "c", ["id"], ["id"])


JOIN = "SELECT o.id, o.amount, c.city FROM o JOIN c ON o.customer = c.id"


@pytest.mark.parametrize(
    "sql",
    [
        JOIN,
        "SELECT o.id, c.city FROM o LEFT JOIN c ON o.customer = c.id WHERE o.amount > 3",
        "SELECT o.id, c.city FROM c JOIN o ON c.id = o.customer",
        "SELECT o.*, c.city FROM o LEFT OUTER JOIN c ON c.id = o.customer + 0",
    ],
)
def test_a_stream_joined_with_a_table_on_its_key_is_valid(sql: str) -> None:
    assert problems(view(sql, mode="append"), key=["id"]) == []


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("SELECT o.id, c.city FROM o JOIN c ON o.customer = c.segment", "not on its key (id)"),
        ("SELECT o.id, c.city FROM o RIGHT JOIN c ON o.customer = c.id", "as a RIGHT JOIN"),
        ("SELECT o.id, c.city FROM o FULL JOIN c ON o.customer = c.id", "as a FULL"),
        ("SELECT o.id, c.city FROM o JOIN c ON o.customer > c.id", "an equality"),
        ("SELECT c.city, count(*) AS n FROM o JOIN c ON o.customer = c.id GROUP BY c.city",
         "aggregate"),
    ],
)  # fmt: skip
def test_a_join_with_a_table_that_is_not_kept_exact_is_refused(sql: str, fragment: str) -> None:
    the_problem(view(sql, mode="append"), "spec.sql", fragment, "read: changes", key=["id"])


def test_a_join_with_a_table_writes_events_so_its_output_is_append() -> None:
    the_problem(view(JOIN, ["id"]), "spec.output.mode", "is upsert", "set mode: append", key=["id"])


def test_a_reading_and_a_refusal_are_kept_and_each_refusal_raised_anew() -> None:
    from distributary.table_queries import cached_reading

    calls: list[str] = []

    @cached_reading
    def read(sql: str) -> str:
        calls.append(sql)
        if sql == "bad":
            raise TableQueryError("bad, fix it")
        return sql.upper()

    assert read("good") == read("good") == "GOOD"
    raised = []
    for _ in range(2):
        with pytest.raises(TableQueryError, match="bad, fix it") as caught:
            read("bad")
        raised.append(caught.value)
    assert calls == ["good", "bad"]
    assert raised[0] is not raised[1]
