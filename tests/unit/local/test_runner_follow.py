"""`distributary run`'s runner process takes changes while it runs: a revision started, stopped,
started again or edited is applied by the running process (it follows its specs file), and the
process starts again only when the change needs other process settings.

The specs file carries each revision's spec with the generation it was (re)started at; the runtime
waits for the process to acknowledge the file's generation, and reads a revision's progress
records only from its latest start.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
from tests.unit.reconcile.fakes import parts
from tests.unit.reconcile.test_view_reconcile import log, run, view

from distributary.api import parse_body
from distributary.api.view import DerivedView
from distributary.backends.base import Owner
from distributary.local import runtime as runtime_module
from distributary.local.runtime import PipelineRuntime
from distributary.plan.access.kafka_connection import KafkaSecurity
from distributary.plan.applications.runner_spec import (
    RUNNER_GENERATION,
    FollowedSpecs,
    RunnerSpec,
    applied_file,
    process_settings,
)
from distributary.plan.revisions.progress import progress_key


class Alive:
    """A runner process that runs on; it acknowledges what `acknowledge` says, when told."""

    pid = 5151

    def __init__(self) -> None:
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return None

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def stop(self, timeout: float = 30.0) -> int:
        self.send_signal(signal.SIGTERM)
        return 0


def a_spec(tmp_path: Path) -> tuple[DerivedView, RunnerSpec]:
    p = parts([log("clicks")], [])
    body = view("SELECT user, n FROM src")
    run(p, body)
    [spec] = p.runtime.specs
    found = parse_body(body, DerivedView)
    assert isinstance(found, DerivedView)
    return found, spec


def running_runtime(
    tmp_path: Path, records: dict[str, Any] | None = None
) -> tuple[PipelineRuntime, Alive]:
    """A runtime whose process runs (started without a real process)."""
    runtime = PipelineRuntime(
        tmp_path, cast(Any, None), lambda s: s, lambda: records or {}, lambda _: None
    )
    process = Alive()
    runtime.process = cast(Any, process)
    return runtime, process


def acknowledging(runtime: PipelineRuntime, pid: int) -> threading.Thread:
    """A stand-in for the process's loop: acknowledges each generation of the specs file."""

    def loop() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                said = FollowedSpecs.parse(json.loads(runtime.spec_file.read_text()))
            except (OSError, ValueError):
                time.sleep(0.01)
                continue
            applied_file(runtime.spec_file).write_text(
                json.dumps({"generation": said.generation, "pid": pid})
            )
            time.sleep(0.01)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def test_the_specs_file_round_trips_and_older_shapes_still_read() -> None:
    spec = RunnerSpec.model_validate(
        {
            "kind": "DerivedView",
            "namespace": "default",
            "name": "v",
            "revision": 2,
            "spec_hash": "h",
            "inputs": [],
            "dead_letter_topic": "d",
            "consumer_group": "g",
            "checkpoint_location": "/c",
        }
    )
    followed = FollowedSpecs(7, ((5, spec), (7, spec.model_copy(update={"revision": 3}))))
    assert FollowedSpecs.parse(json.loads(followed.to_json())) == followed
    assert FollowedSpecs.parse([spec.model_dump(mode="json")]) == FollowedSpecs(0, ((0, spec),))
    assert FollowedSpecs.parse(spec.model_dump(mode="json")) == FollowedSpecs(0, ((0, spec),))
    assert applied_file(Path("/s/runner-specs.json")) == Path("/s/runner-specs.applied.json")


def test_a_revisions_own_sql_settings_do_not_change_the_process(tmp_path: Path) -> None:
    _, spec = a_spec(tmp_path)
    other = spec.model_copy(
        update={"spark_conf": {**spec.spark_conf, "spark.sql.shuffle.partitions": "9"}}
    )
    assert process_settings([spec]) == process_settings([spec, other])
    memory = spec.model_copy(update={"spark_conf": {"spark.driver.memory": "9g"}})
    assert process_settings([memory]) != process_settings([spec])
    secured = spec.model_copy(update={"kafka_security": KafkaSecurity(protocol="SSL")})
    assert process_settings([secured]) != process_settings([spec])
    moved = spec.model_copy(update={"bootstrap_servers": "elsewhere:9092"})
    assert process_settings([moved]) != process_settings([spec])


def test_a_new_revision_joins_the_running_process(tmp_path: Path) -> None:
    found, spec = a_spec(tmp_path)
    runtime, process = running_runtime(tmp_path)
    first = runtime.view_app(found, spec)
    first.start()
    runtime.start_runner = lambda: pytest.fail("the process was started again")  # type: ignore[method-assign]
    runtime.settings = process_settings(runtime.specs)
    acknowledging(runtime, process.pid)
    assert runtime.flush() is True
    said = FollowedSpecs.parse(json.loads(runtime.spec_file.read_text()))
    assert [(since, s.revision) for since, s in said.revisions] == [(1, 1)]
    second = runtime.view_app(found, spec.model_copy(update={"revision": 2}))
    second.start()
    assert runtime.flush() is True
    said = FollowedSpecs.parse(json.loads(runtime.spec_file.read_text()))
    # Revision 1 was started at generation 1 and runs on; revision 2 starts at generation 2.
    assert said.generation == 2
    assert [(since, s.revision) for since, s in said.revisions] == [(1, 1), (2, 2)]
    assert process.signals == []
    assert runtime.flush() is False  # nothing changed
    # Revision 1 stopped: the process stops it, runs on, and the runtime says it stopped.
    stopped = runtime.stop(first_owner(found), [1])
    assert stopped == [1]
    assert runtime.stopped(first_owner(found), 1)
    said = FollowedSpecs.parse(json.loads(runtime.spec_file.read_text()))
    assert [(since, s.revision) for since, s in said.revisions] == [(2, 2)]
    assert process.signals == []


def first_owner(found: DerivedView) -> Owner:
    return Owner("DerivedView", found.metadata.namespace, found.metadata.name)


def test_a_revision_started_again_gets_a_new_generation_and_old_records_are_not_read(
    tmp_path: Path,
) -> None:
    found, spec = a_spec(tmp_path)
    key = progress_key("DerivedView", spec.namespace, spec.name, spec.revision)
    failed = {"state": "Failed", "runnerPid": Alive.pid, RUNNER_GENERATION: 1, "error": "boom"}
    records: dict[str, Any] = {key: failed}
    runtime, process = running_runtime(tmp_path, records)
    app = runtime.view_app(found, spec)
    app.start()
    runtime.settings = process_settings(runtime.specs)
    acknowledging(runtime, process.pid)
    assert runtime.flush() is True
    assert app.state().failed  # the process said it failed at this start
    app.remove()  # the reconcile starts it again after its back-off
    app.start()
    assert runtime.flush() is True
    said = FollowedSpecs.parse(json.loads(runtime.spec_file.read_text()))
    assert [since for since, _ in said.revisions] == [2]
    # The record of its first start is not read as the state of its second.
    assert app.state().running
    records[key] = {**failed, RUNNER_GENERATION: 2}
    assert app.state().failed


def test_a_process_that_does_not_acknowledge_is_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime_module, "FOLLOW_TIMEOUT", 0.3)
    found, spec = a_spec(tmp_path)
    runtime, process = running_runtime(tmp_path)
    runtime.view_app(found, spec).start()
    runtime.settings = process_settings(runtime.specs)
    starts: list[int] = []
    runtime.start_runner = lambda: starts.append(1)  # type: ignore[method-assign]
    assert runtime.flush() is True
    assert starts == [1]
    assert process.signals  # asked to stop (SIGTERM) before the new start


def test_other_process_settings_start_the_process_again(tmp_path: Path) -> None:
    found, spec = a_spec(tmp_path)
    runtime, process = running_runtime(tmp_path)
    runtime.view_app(found, spec).start()
    runtime.settings = {"spark": {"spark.driver.memory": "9g"}}
    starts: list[int] = []
    runtime.start_runner = lambda: starts.append(1)  # type: ignore[method-assign]
    assert runtime.flush() is True
    assert starts == [1]
    assert process.signals


def test_a_suspended_revision_leaves_the_process_and_keep_brings_back_what_it_ran(
    tmp_path: Path,
) -> None:
    found, spec = a_spec(tmp_path)
    runtime, process = running_runtime(tmp_path)
    starts: list[int] = []
    runtime.start_runner = lambda: starts.append(len(runtime.wanted))  # type: ignore[method-assign]
    runtime.view_app(found, spec).start()
    runtime.settings = process_settings(runtime.specs)
    acknowledging(runtime, process.pid)
    runtime.flush()
    owner, key = first_owner(found), (found.metadata.namespace, found.metadata.name, 1)
    ran = runtime.wanted[key]
    assert runtime.suspend(owner, [1]) == [1]
    assert runtime.wanted == {}  # the process runs without it (here: nothing left, it stops)
    runtime.keep(owner, [1])  # resumed beside a newer revision: what it ran, not a new spec
    assert runtime.wanted == {key: ran}
    runtime.flush()
    assert starts[-1] == 1
    # Stopped for good (retired), it is forgotten: keep brings nothing back.
    runtime.stop(owner, [1])
    runtime.keep(owner, [1])
    assert runtime.wanted == {}
