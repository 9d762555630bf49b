"""The SQL functions that run code of a view's author's choosing inside Spark: found wherever a
query calls them, in any case, and allowed only by name."""

from __future__ import annotations

import pytest

from distributary.sql import (
    UNSAFE_FUNCTIONS,
    allowed_functions,
    functions_called,
    unsafe_calls,
)


@pytest.mark.parametrize(
    ("sql", "found"),
    [
        ("SELECT reflect('java.util.UUID', 'randomUUID') AS id FROM t", ["reflect"]),
        ("SELECT JAVA_METHOD('java.lang.Math', 'abs', n) AS a FROM t", ["java_method"]),
        ("SELECT Try_Reflect('a.B', 'c') AS r FROM t", ["try_reflect"]),
        ("SELECT `reflect`('a.B', 'c') AS r FROM t", ["reflect"]),
        ("SELECT n FROM t WHERE java_method('a.B', 'c') IS NOT NULL", ["java_method"]),
        ("SELECT r FROM (SELECT reflect('a.B', 'c') AS r FROM t)", ["reflect"]),
        ("WITH c AS (SELECT try_reflect('a.B', 'c') AS r FROM t) SELECT r FROM c", ["try_reflect"]),
        ("SELECT n FROM t WHERE n IN (SELECT reflect('a.B', 'c') FROM t)", ["reflect"]),
        ("SELECT TRANSFORM(n) USING 'sh -c id' AS (out) FROM t", ["transform"]),
        (
            "SELECT reflect('a', 'b') AS x, java_method('a', 'b') AS y FROM t",
            ["reflect", "java_method"],
        ),
    ],
)
def test_each_call_of_an_unsafe_function_is_found(sql: str, found: list[str]) -> None:
    assert unsafe_calls(sql) == found


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT upper(user) AS u, count(*) AS n FROM t GROUP BY user",
        "SELECT transform(items, x -> x + 1) AS items FROM t",  # the array function
        "SELECT 'reflect' AS reflect FROM t",  # a name, not a call
        "SELECT reflection FROM t",
        "not sql at all (",  # the analysis reports SQL that does not parse
    ],
)
def test_other_sql_calls_none(sql: str) -> None:
    assert unsafe_calls(sql) == []


def test_an_allowed_function_is_not_reported_and_the_others_still_are() -> None:
    sql = "SELECT reflect('a', 'b') AS x, java_method('a', 'b') AS y FROM t"
    assert unsafe_calls(sql, frozenset({"reflect"})) == ["java_method"]
    assert unsafe_calls(sql, frozenset({"reflect", "java_method"})) == []


def test_functions_called_are_lower_cased() -> None:
    assert {"upper", "reflect"} <= functions_called("SELECT UPPER(REFLECT('a', 'b')) AS x FROM t")


@pytest.mark.parametrize(
    ("setting", "allowed"),
    [
        ("", frozenset()),
        ("reflect", frozenset({"reflect"})),
        ("REFLECT, java_method", frozenset({"reflect", "java_method"})),
        ("try_reflect transform", frozenset({"try_reflect", "transform"})),
        (["Reflect"], frozenset({"reflect"})),
    ],
)
def test_the_setting_names_functions_in_any_case(setting: str, allowed: frozenset[str]) -> None:
    assert allowed_functions(setting) == allowed


@pytest.mark.parametrize("setting", ["upper", "reflect,exec", "java-method"])
def test_the_setting_refuses_a_name_it_does_not_know(setting: str) -> None:
    with pytest.raises(ValueError, match="not a function Distributary refuses") as caught:
        allowed_functions(setting)
    assert all(name in str(caught.value) for name in UNSAFE_FUNCTIONS)
