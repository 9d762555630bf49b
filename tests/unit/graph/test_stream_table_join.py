"""A stream joined with a table, taken apart (`table_joins.stream_table_join`): the SELECT list
over the join's rows, each item without the query's own alias (the runner names the output
columns as Spark names them for the query)."""

from __future__ import annotations

from distributary.table_joins import stream_table_join

SQL = """SELECT v.user_id, coalesce(u.plan, 'unknown') AS plan, upper(v.url) AS page
FROM views v LEFT JOIN users u ON v.user_id = u.user_id WHERE v.user_id IS NOT NULL"""
COLUMNS = {"views": ["user_id", "url"], "users": ["user_id", "plan"]}


def test_an_aliased_item_is_its_expression_alone() -> None:
    join = stream_table_join(SQL, "views", "users", COLUMNS, ["user_id"])
    assert join.items == (
        "`_dtry_s`.`user_id`",
        "COALESCE(`_dtry_t`.`plan`, 'unknown')",
        "UPPER(`_dtry_s`.`url`)",
    )
    assert join.left
    assert all(" AS " not in item.upper() for item in join.items)


def test_a_star_is_each_sides_columns_unaliased() -> None:
    sql = "SELECT * FROM views v JOIN users u ON v.user_id = u.user_id"
    join = stream_table_join(sql, "views", "users", COLUMNS, ["user_id"])
    assert join.items == (
        "`_dtry_s`.`user_id`",
        "`_dtry_s`.`url`",
        "`_dtry_t`.`user_id`",
        "`_dtry_t`.`plan`",
    )
