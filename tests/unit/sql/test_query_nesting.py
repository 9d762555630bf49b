"""SQL nested deeper than `MAX_NESTING` (parentheses, subqueries, CASE) is refused with one
message naming the limit, and so is an operator chain too long to read: never a RecursionError,
whichever of parsing, canonical text, the functions called or analysis meets it first."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from distributary.sql import (
    MAX_NESTING,
    SqlError,
    analyze_query,
    canonical_sql,
    functions_called,
    parse_ddl,
)

TABLES = {"clicks": parse_ddl("user STRING, n INT")}
DEEP = 10_000


def parens(depth: int) -> str:
    return f"SELECT {'(' * depth}n{')' * depth} AS m FROM clicks"


def cases(depth: int) -> str:
    inner = "n"
    for _ in range(depth):
        inner = f"CASE WHEN n > 0 THEN {inner} END"
    return f"SELECT {inner} AS m FROM clicks"


def subqueries(depth: int) -> str:
    query = "SELECT n FROM clicks"
    for _ in range(depth):
        query = f"SELECT n FROM ({query})"
    return query


def calls(depth: int) -> str:
    return f"SELECT {'abs(' * depth}n{')' * depth} AS m FROM clicks"


READERS: list[Callable[[str], object]] = [
    lambda sql: analyze_query(sql, TABLES),
    canonical_sql,
    functions_called,
]


@pytest.mark.parametrize("build", [parens, cases, subqueries, calls])
@pytest.mark.parametrize("read", READERS)
def test_ten_thousand_levels_are_refused_naming_the_limit(
    build: Callable[[int], str], read: Callable[[str], object]
) -> None:
    with pytest.raises(SqlError) as caught:
        read(build(DEEP))
    assert f"more than {MAX_NESTING} levels deep" in str(caught.value)
    assert "WITH clause" in str(caught.value)


@pytest.mark.parametrize("build", [parens, cases, subqueries, calls])
def test_the_limit_is_one_level_past_the_deepest_query_read(build: Callable[[int], str]) -> None:
    analyze_query(build(MAX_NESTING), TABLES)
    with pytest.raises(SqlError, match="levels deep"):
        analyze_query(build(MAX_NESTING + 1), TABLES)


def test_the_message_says_where_the_limit_is_passed() -> None:
    with pytest.raises(SqlError, match=rf"\(line 1, column {len('SELECT ') + MAX_NESTING + 1}\)"):
        analyze_query(parens(DEEP), TABLES)


@pytest.mark.parametrize("read", READERS)
def test_a_chain_too_long_to_read_is_refused_without_a_recursion_error(
    read: Callable[[str], object],
) -> None:
    with pytest.raises(SqlError, match="chains operators"):
        read(f"SELECT user FROM clicks WHERE {'NOT ' * DEEP}n > 1")
