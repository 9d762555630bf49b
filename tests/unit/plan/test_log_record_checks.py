"""Under the operator a declared Log whose record format is wrong is `Stalled` with reason
`InvalidSpec`, with the message `distributary validate` gives: the field and the fix."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from distributary.api.log import Log
from distributary.plan.logs.log_status import LogReconcile, log_status, record_problems


def log(schema: str, key: list[str] | None = None) -> Log:
    spec: dict[str, Any] = {"schema": schema}
    if key is not None:
        spec["key"] = key
    return Log.model_validate({"metadata": {"name": "users", "namespace": "shop"}, "spec": spec})


@pytest.mark.parametrize(
    ("schema", "key", "says"),
    [
        ("id STRING, ID STRING", None, "spec.schema: names column 'id' and 'ID'"),
        ("a STRUCT<x: INT, X: INT>", None, "spec.schema: names field 'x' and 'X' in 'a'"),
        ("id STRING, n", None, "spec.schema: is not a Spark DDL schema: 'n' has no type"),
        ("user STRUCT<id: STRING>", ["user.id"], "spec.key[0]: names 'user.id', a field inside"),
        ("id STRING", ["id", "ID"], "spec.key[1]: names column 'ID' again"),
        ("id STRING", ["name"], "spec.key[0]: names column 'name', which spec.schema"),
    ],
)
def test_a_log_with_a_wrong_record_format_is_stalled_naming_the_field(
    schema: str, key: list[str] | None, says: str
) -> None:
    problem = record_problems(log(schema, key))
    assert problem is not None
    assert problem.startswith(says)
    status = log_status(LogReconcile(1, "users", invalid=problem), None, datetime.now(UTC))
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "InvalidSpec")
    assert says in stalled["message"]


@pytest.mark.parametrize(
    ("schema", "key"),
    [("id STRING, n INT", ["ID"]), ("user STRUCT<id: STRING, name: STRING>", ["user"])],
)
def test_a_right_record_format_has_no_problem(schema: str, key: list[str]) -> None:
    assert record_problems(log(schema, key)) is None


def test_a_log_without_a_schema_has_no_problem() -> None:
    plain = Log.model_validate({"metadata": {"name": "raw"}, "spec": {}})
    assert record_problems(plain) is None
