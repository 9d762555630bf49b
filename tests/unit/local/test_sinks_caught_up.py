"""When `run --until-caught-up` counts a Sink as done: its store holds the whole log, or it
cannot run and has said why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distributary.api import parse_resource
from distributary.graph import Pipeline, Ref
from distributary.local.sinks import LocalSinks, _Process
from distributary.plan.sink_plan import SinkRun

LOG = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "accounts"},
    "spec": {"schema": "id INT", "key": ["id"]},
}


def _sink(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Sink",
        "metadata": {"name": name},
        "spec": {"log": "accounts", "redis": {"host": "r"}},
    }


def _sinks(tmp_path: Path) -> LocalSinks:
    pipeline = Pipeline.build([parse_resource(d) for d in (LOG, _sink("a"), _sink("b"))])
    return LocalSinks(pipeline, tmp_path, None, lambda _: None)


def _entry() -> _Process:
    return _Process(SinkRun(name="n", group="g", bootstrap_servers="k", topic="t", columns=[],
                            host="r", port=6379))  # fmt: skip


def test_every_sink_must_hold_its_whole_log(tmp_path: Path) -> None:
    sinks = _sinks(tmp_path)
    assert not sinks.caught_up()  # nothing started yet
    a, b = Ref("Sink", "default", "a"), Ref("Sink", "default", "b")
    sinks.processes = {a: _entry(), b: _entry()}
    sinks.statuses = {"default/a": {"lag": 0}, "default/b": {"lag": 3}}
    assert not sinks.caught_up()
    sinks.statuses["default/b"]["lag"] = 0
    assert sinks.caught_up()


def test_a_sink_that_cannot_run_is_not_waited_for(tmp_path: Path) -> None:
    sinks = _sinks(tmp_path)
    a, b = Ref("Sink", "default", "a"), Ref("Sink", "default", "b")
    sinks.processes = {a: _entry()}
    sinks.statuses = {"default/a": {"lag": 0}}
    sinks.blocked.add(b)
    assert sinks.caught_up()
    stalled = _entry()
    stalled.stalled = "its table has another key"
    sinks.blocked.clear()
    sinks.processes[b] = stalled
    assert sinks.caught_up()
