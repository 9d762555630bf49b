"""When `run --until-caught-up` counts a Sink as done: its store holds the whole log, or it
cannot run and has said why (Stalled)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distributary.api import parse_resource
from distributary.graph import Pipeline
from distributary.local.sinks import SinkStatuses

LOG = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "accounts"},
    "spec": {"schema": "id INT", "key": ["id"]},
}
STALLED = {"conditions": [{"type": "Stalled", "status": "True", "reason": "StoreRefused",
                           "message": "its table has another key"}]}  # fmt: skip


def _sink(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Sink",
        "metadata": {"name": name},
        "spec": {"log": "accounts", "redis": {"host": "r"}},
    }


PIPELINE = Pipeline.build([parse_resource(d) for d in (LOG, _sink("a"), _sink("b"))])


def test_every_sink_must_hold_its_whole_log(tmp_path: Path) -> None:
    sinks = SinkStatuses(tmp_path)
    assert not sinks.caught_up(PIPELINE)  # nothing started yet
    sinks.statuses = {"default/a": {"lag": 0}, "default/b": {"lag": 3}}
    assert not sinks.caught_up(PIPELINE)
    sinks.statuses["default/b"]["lag"] = 0
    assert sinks.caught_up(PIPELINE)


def test_a_sink_that_cannot_run_is_not_waited_for(tmp_path: Path) -> None:
    sinks = SinkStatuses(tmp_path)
    sinks.statuses = {"default/a": {"lag": 0}, "default/b": dict(STALLED)}
    assert sinks.caught_up(PIPELINE)
    sinks.statuses["default/b"] = {"lag": None}
    assert not sinks.caught_up(PIPELINE)


def test_the_file_says_the_table_whether_it_runs_and_why_it_is_stalled(tmp_path: Path) -> None:
    sinks = SinkStatuses(tmp_path)
    sink = PIPELINE.sinks[next(iter(sorted(PIPELINE.sinks)))]
    sinks.write(sink, {"topic": "accounts", "lag": 0, "process": {"state": "RUNNING"}})
    assert sinks.statuses["default/a"]["ready"] is True
    sinks.write(sink, STALLED)
    entry = sinks.statuses["default/a"]
    assert (entry["ready"], entry["problem"]) == (False, "its table has another key")
    assert (tmp_path / "sinks.json").exists()
