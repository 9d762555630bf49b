"""The rules a Log's Spark DDL schema keeps: it parses, every column has a type, and no two
columns, nor two fields of a struct nested anywhere in a column's type, have one name as Spark
reads names (without regard to case). Each refusal says what is wrong and what to do."""

from __future__ import annotations

import pytest

from distributary.sql import MAX_NESTING, SqlError, parse_ddl


def _refusal(ddl: str) -> str:
    with pytest.raises(SqlError) as caught:
        parse_ddl(ddl)
    return str(caught.value)


@pytest.mark.parametrize(
    ("ddl", "first", "second"),
    [
        ("user STRING, User INT", "user", "User"),
        ("ts TIMESTAMP, n INT, TS STRING", "ts", "TS"),
        ("`a b` INT, `A B` STRING", "a b", "A B"),
        ("Amount DECIMAL(10, 2), amount DOUBLE", "Amount", "amount"),
    ],
)
def test_two_columns_that_differ_only_in_case_are_refused_naming_both(
    ddl: str, first: str, second: str
) -> None:
    message = _refusal(ddl)
    assert f"names column {first!r} and {second!r}" in message
    assert "without regard to case" in message
    assert "rename or remove one" in message


@pytest.mark.parametrize(
    ("ddl", "field", "where"),
    [
        ("a STRUCT<x: INT, X: STRING>", "'x' and 'X'", "'a'"),
        ("a STRUCT<s: STRUCT<p INT, q INT, P INT>>", "'p' and 'P'", "'a.s'"),
        ("a ARRAY<STRUCT<x INT, x INT>>", "'x' twice", "'a[]'"),
        ("a MAP<STRING, STRUCT<b INT, B INT>>", "'b' and 'B'", "'a{value}'"),
        ("n INT, a ARRAY<ARRAY<STRUCT<Id INT, ID INT>>>", "'Id' and 'ID'", "'a[][]'"),
    ],
)
def test_duplicate_fields_in_nested_structs_are_refused_with_their_path(
    ddl: str, field: str, where: str
) -> None:
    message = _refusal(ddl)
    assert f"names field {field} in {where}" in message


def test_the_same_name_twice_is_refused() -> None:
    assert "names column 'u' twice" in _refusal("u INT, u INT")


@pytest.mark.parametrize(
    "ddl",
    [
        "a INT, b STRUCT<x INT, y ARRAY<STRUCT<x INT>>>",  # one name at different depths
        "a STRUCT<a INT>, b MAP<STRING, STRUCT<a INT, b INT>>",
        "user STRING, user_id STRING, userid STRING",
    ],
)
def test_names_that_spark_tells_apart_are_kept(ddl: str) -> None:
    assert parse_ddl(ddl)


@pytest.mark.parametrize(
    ("ddl", "says"),
    [
        ("a INT, b", "'b' has no type"),
        ("a, b INT", "'a' has no type"),
        ("a STRUCT<x>", "is not a Spark DDL schema"),
        ("a INT b STRING", "is not a Spark DDL schema"),
    ],
)
def test_a_schema_that_does_not_parse_or_lacks_a_type_is_refused(ddl: str, says: str) -> None:
    assert says in _refusal(ddl)


def test_a_parse_error_counts_its_column_in_the_schema_as_written() -> None:
    assert "(line 1, column 5)" in _refusal("a FOO")


@pytest.mark.parametrize(
    "ddl",
    [
        "a " + "(" * 200 + "STRING" + ")" * 200,
        "a " + "STRUCT<b: " * 200 + "INT" + ">" * 200,
        "a " + "ARRAY<" * 40 + "INT" + ">" * 40,
    ],
    ids=["parentheses", "structs", "arrays"],
)
def test_a_schema_nested_too_deeply_is_refused_naming_the_limit(ddl: str) -> None:
    message = _refusal(ddl)
    assert f"more than {MAX_NESTING} levels deep" in message
    assert "flatten the schema" in message


def test_a_schema_nested_to_the_limit_parses() -> None:
    ddl = "a " + "STRUCT<b: " * MAX_NESTING + "INT" + ">" * MAX_NESTING
    (column,) = parse_ddl(ddl)
    assert column.type.count("STRUCT<") == MAX_NESTING


def test_a_schema_that_closes_the_column_list_and_goes_on_is_refused() -> None:
    assert "write columns as 'name TYPE, name TYPE'" in _refusal("a INT); SELECT (1")
