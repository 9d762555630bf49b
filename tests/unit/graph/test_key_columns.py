"""A Log's key, and an upsert view's output key, name top-level columns of the record, each
once, compared as Spark compares names (without regard to case). Each problem names the
resource, the key's entry and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api import parse_resource
from distributary.graph import Pipeline, SpecProblem, key_problems


def log(key: list[str], schema: str = "user STRUCT<id: STRING, name: STRING>, n INT") -> Any:
    return parse_resource(
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": "users"},
            "spec": {"schema": schema, "key": key},
        }
    )


def upsert(key: list[str], sql: str = "SELECT user, n FROM u") -> Any:
    return parse_resource(
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "DerivedView",
            "metadata": {"name": "latest"},
            "spec": {
                "inputs": [{"log": "users", "alias": "u"}],
                "sql": sql,
                "output": {"mode": "upsert", "key": key},
            },
        }
    )


def problems(*resources: Any) -> list[SpecProblem]:
    return list(Pipeline.build(resources).problems)


@pytest.mark.parametrize("key", [["user.id"], ["USER.id"], ["n", "user.name"]])
def test_a_log_key_naming_a_nested_field_is_refused(key: str) -> None:
    [problem] = problems(log(key))
    assert problem.resource == "Log/default/users"
    assert problem.field == f"spec.key[{len(key) - 1}]"
    assert "a field inside column 'user'" in problem.message
    assert "top-level columns only" in problem.message


@pytest.mark.parametrize(
    ("key", "index", "first"), [(["n", "N"], 1, 0), (["user", "n", "user"], 2, 0)]
)
def test_a_log_key_naming_a_column_twice_is_refused(key: list[str], index: int, first: int) -> None:
    [problem] = problems(log(key))
    assert problem.field == f"spec.key[{index}]"
    assert f"spec.key[{first}] names it" in problem.message
    assert "remove one" in problem.message


def test_a_log_key_naming_a_missing_column_still_says_so() -> None:
    [problem] = problems(log(["nope"]))
    assert "names column 'nope', which spec.schema does not have" in problem.message


@pytest.mark.parametrize("key", [["user"], ["USER", "n"], ["n"]])
def test_a_log_key_of_top_level_columns_is_kept(key: list[str]) -> None:
    assert problems(log(key)) == []


def test_a_view_output_key_naming_a_nested_field_or_a_column_twice_is_refused() -> None:
    found = problems(log(["user"]), upsert(["user.id", "n", "N"]))
    assert [(p.resource, p.field) for p in found] == [
        ("DerivedView/default/latest", "spec.output.key[0]"),
        ("DerivedView/default/latest", "spec.output.key[2]"),
    ]
    assert "a field inside column 'user'" in found[0].message
    assert "spec.output.key[1] names it" in found[1].message


def test_a_view_output_key_is_checked_for_repeats_even_when_its_columns_are_unknown() -> None:
    schemaless = parse_resource(
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": "users"},
            "spec": {},
        }
    )
    found = problems(schemaless, upsert(["id", "ID"], sql="SELECT * FROM u"))
    assert [p.field for p in found] == ["spec.output.key[1]"]


def test_key_problems_compares_names_as_spark_does() -> None:
    assert key_problems(["A", "b"], ["a", "B"], "spec.key", "x") == []
    assert key_problems(["a.b"], None, "spec.key", "x") == []  # columns unknown
    assert key_problems(["c"], ["a"], "spec.key", "is missing") == [
        (0, "names column 'c', which is missing")
    ]


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ("user STRING, USER STRING", "names column 'user' and 'USER'"),
        ("n INT, s STRUCT<a: INT, A: INT>", "names field 'a' and 'A' in 's'"),
    ],
)
def test_a_log_schema_with_one_name_twice_is_refused_on_spec_schema(schema: str, says: str) -> None:
    [problem] = problems(log([], schema=schema))
    assert (problem.resource, problem.field) == ("Log/default/users", "spec.schema")
    assert says in problem.message
    assert problem.message.endswith("rename or remove one")
