"""The examples' demo data is valid for their logs and exercises the views' filters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distributary.graph import Ref, load_pipeline
from distributary.schema import RecordSchema, check_lines

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize(
    ("example", "log"),
    [("clickstream", "page-views"), ("orders", "orders"), ("sensors", "readings")],
)
def test_the_demo_data_is_a_few_hundred_valid_records(example: str, log: str) -> None:
    pipeline = load_pipeline([EXAMPLES / example])
    schema = RecordSchema.of_log(pipeline.logs[Ref.log(log)])
    lines = (EXAMPLES / example / "data" / f"{log}.jsonl").read_text().splitlines()
    checked = list(check_lines(lines, schema))
    assert [c.problems for c in checked if c.problems] == []
    assert 200 <= len(checked) == len(lines) <= 1000


def _records(example: str, log: str) -> list[dict[str, object]]:
    text = (EXAMPLES / example / "data" / f"{log}.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_the_clickstream_data_has_records_the_views_filter_out() -> None:
    records = _records("clickstream", "page-views")
    assert sum(r.get("user_id") is None for r in records) >= 2
    assert sum(isinstance(r["duration_ms"], int) and r["duration_ms"] < 0 for r in records) >= 2
    assert any(r.get("url") is None for r in records)
    assert any(r.get("country") is None for r in records)  # counted as UNKNOWN
    assert any(r.get("referrer") in ("", None) for r in records)  # direct traffic
    users = {r.get("user_id") for r in records}
    assert 10 <= len(users) < len(records) / 3  # users come back, so the per-user table groups


def test_the_orders_data_is_a_changelog_where_most_orders_are_delivered() -> None:
    records = _records("orders", "orders")
    states: dict[str, list[object]] = {}
    for record in records:
        states.setdefault(str(record["order_id"]), []).append(record["status"])
    assert all(s[0] == "CREATED" for s in states.values())
    delivered = [s for s in states.values() if s[-1] == "DELIVERED"]
    assert len(states) / 2 < len(delivered) < len(states)
    assert all(s.count("DELIVERED") <= 1 for s in states.values())


def test_the_users_table_data_is_valid_and_some_users_change_plan() -> None:
    pipeline = load_pipeline([EXAMPLES / "clickstream"])
    schema = RecordSchema.of_log(pipeline.logs[Ref.log("users")])
    lines = (EXAMPLES / "clickstream" / "data" / "users.jsonl").read_text().splitlines()
    assert [c.problems for c in check_lines(lines, schema) if c.problems] == []
    users = [r["user_id"] for r in _records("clickstream", "users")]
    assert len(users) > len(set(users)), "a user's row changes: a second version of it"
    viewers = {r.get("user_id") for r in _records("clickstream", "page-views")} - {None}
    assert viewers - set(users), "page views of users the table does not have: unknown"
