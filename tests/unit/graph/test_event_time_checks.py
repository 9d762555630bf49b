"""Event time in the pipeline graph: a watermark names a TIMESTAMP column of its input, and an
append view that aggregates groups by a window over a watermarked column (Spark cannot write a
row in append mode before it is final). Each problem names the resource, the field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from distributary.api import parse_resource
from distributary.cli import main
from distributary.graph import Pipeline

API = "distributary.dev/v1alpha1"
SCHEMA = "user STRING, page STRING, ts TIMESTAMP, seen TIMESTAMP_NTZ, ms BIGINT"
WINDOWED = (
    "SELECT window.start AS window_start, user, count(*) AS n FROM pv "
    "GROUP BY window(ts, '1 minute'), user"
)


def log(name: str = "page-views", schema: str | None = SCHEMA) -> dict[str, Any]:
    spec = {"schema": schema} if schema else {}
    return {"apiVersion": API, "kind": "Log", "metadata": {"name": name}, "spec": spec}


def view(
    sql: str,
    watermark: dict[str, str] | None = None,
    output: dict[str, Any] | None = None,
    inputs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    item: dict[str, Any] = {"log": "page-views", "alias": "pv"}
    if watermark is not None:
        item["watermark"] = watermark
    spec = {"inputs": inputs or [item], "sql": sql, "output": output or {"mode": "append"}}
    return {"apiVersion": API, "kind": "DerivedView", "metadata": {"name": "counts"}, "spec": spec}


def problems(*documents: dict[str, Any]) -> list[tuple[str, str]]:
    pipeline = Pipeline.build([parse_resource(d) for d in documents])
    return [(p.field, p.message) for p in pipeline.problems]


TS = {"column": "ts", "delay": "30s"}


@pytest.mark.parametrize(
    "sql",
    [
        WINDOWED,
        "SELECT window.start AS s, count(*) AS n FROM pv "
        "GROUP BY window(ts, '10 minutes', '1 minute')",
        "SELECT window(pv.ts, '1 minute') AS w, count(*) AS n FROM pv GROUP BY w",
        "SELECT session_window.start AS s, user, count(*) AS n FROM pv "
        "GROUP BY session_window(ts, '5 minutes'), user",
        "SELECT ts, count(*) AS n FROM pv GROUP BY ts",
        # A window over a computed time: Spark judges whether the watermark reaches it.
        "SELECT window.start AS s, count(*) AS n FROM pv "
        "GROUP BY window(ts + INTERVAL 1 HOUR, '1 minute')",
    ],
    ids=["tumbling", "sliding", "by-alias", "session", "by-the-column", "computed"],
)
def test_an_append_aggregation_over_a_watermarked_window_is_accepted(sql: str) -> None:
    assert problems(log(), view(sql, TS)) == []


def test_an_append_aggregation_without_a_window_is_refused_with_the_fix() -> None:
    [(field, message)] = problems(log(), view("SELECT user, count(*) AS n FROM pv GROUP BY user"))
    assert field == "spec.sql"
    assert message.startswith("aggregates in append mode without an event-time window")
    assert "spec.inputs[].watermark {column: ts, delay: 30s}" in message
    assert "GROUP BY window(ts, '1 minute')" in message
    assert "or set spec.output.mode: upsert with a key" in message


def test_a_global_append_aggregate_is_refused() -> None:
    [(field, _)] = problems(log(), view("SELECT count(*) AS n FROM pv", TS))
    assert field == "spec.sql"


def test_an_append_window_without_a_watermark_is_refused_on_the_input() -> None:
    [(field, message)] = problems(log(), view(WINDOWED))
    assert field == "spec.inputs[0].watermark"
    assert "is not declared on column 'ts'" in message
    assert "add watermark: {column: ts, delay: 30s} to the input" in message
    assert "or set spec.output.mode: upsert with a key" in message


def test_a_watermark_on_another_column_does_not_bound_the_window() -> None:
    other = log(schema="user STRING, ts TIMESTAMP, created TIMESTAMP")
    [(field, _)] = problems(other, view(WINDOWED, {"column": "created", "delay": "1m"}))
    assert field == "spec.inputs[0].watermark"


def test_the_window_is_matched_to_the_input_that_has_its_column() -> None:
    inputs = [
        {"log": "users", "alias": "u"},
        {"log": "page-views", "alias": "pv", "watermark": TS},
    ]
    sql = (
        "SELECT window.start AS s, u.name, count(*) AS n FROM pv JOIN u ON pv.user = u.user "
        "GROUP BY window(pv.ts, '1 minute'), u.name"
    )
    users = log("users", "user STRING, name STRING")
    assert problems(log(), users, view(sql, inputs=inputs)) == []
    del inputs[1]["watermark"]
    [(field, _)] = problems(log(), users, view(sql, inputs=inputs))
    assert field == "spec.inputs[1].watermark"


@pytest.mark.parametrize("watermark", [None, TS], ids=["without", "with"])
def test_upsert_and_stateless_views_need_no_watermark(watermark: dict[str, str] | None) -> None:
    upsert = {"mode": "upsert", "key": ["user"]}
    counts = view("SELECT user, count(*) AS n FROM pv GROUP BY user", watermark, upsert)
    assert problems(log(), counts) == []
    assert problems(log(), view("SELECT user, page FROM pv", watermark)) == []


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        ("tss", "names column 'tss', which Log/default/page-views spec.schema does not have "
         "(did you mean 'ts'?)"),
        ("page", "names column 'page' of type STRING: a watermark needs a TIMESTAMP column"),
        ("seen", "names column 'seen' of type TIMESTAMP_NTZ: a watermark needs a TIMESTAMP"),
    ],
)  # fmt: skip
def test_a_watermark_names_a_timestamp_column_of_its_input(column: str, expected: str) -> None:
    sql = "SELECT user, page FROM pv"
    [(field, message)] = problems(log(), view(sql, {"column": column, "delay": "10s"}))
    assert field == "spec.inputs[0].watermark.column"
    assert message.startswith(expected)


def test_a_watermark_on_a_log_without_schema_says_to_declare_one() -> None:
    [(field, message)] = problems(log(schema=None), view("SELECT * FROM pv", TS))
    assert field == "spec.inputs[0].watermark.column"
    assert "declares no schema: declare spec.schema on it with ts TIMESTAMP" in message


def test_validate_prints_the_refusal_with_the_file_field_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump_all([log(), view(WINDOWED)]))
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1
    line = result.stderr.splitlines()[0]
    assert line.startswith(f"{path}: DerivedView/default/counts spec.inputs[0].watermark: ")
    assert "add watermark: {column: ts, delay: 30s}" in line
