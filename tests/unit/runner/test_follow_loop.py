"""The following runner process's loop takes every generation of its specs file, also one written
while its Spark session was starting (before the loop first looked at the file), and one written
within the same tick of the file system's clock with the same size.

Spark, Kafka and the revisions' queries are stand-ins here; the loop, the file and the
acknowledgements are the runner's own (`distributary.runner.main.run`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from distributary.plan.applications.runner_spec import FollowedSpecs, RunnerSpec, applied_file
from distributary.runner import main as runner_main


def spec(revision: int) -> RunnerSpec:
    return RunnerSpec.model_validate(
        {
            "kind": "DerivedView",
            "namespace": "default",
            "name": "v",
            "revision": revision,
            "spec_hash": "h",
            "inputs": [],
            "dead_letter_topic": "d",
            "consumer_group": f"g{revision}",
            "checkpoint_location": f"/c{revision}",
            "bootstrap_servers": "127.0.0.1:9",
        }
    )


class Query:
    """A revision's stand-in: what was started and stopped, and when."""

    def __init__(self, spec: RunnerSpec, generation: int, events: list[str]):
        self.spec, self.generation, self.events = spec, generation, events
        self.state = "Running"
        self.query = None
        self.output = None
        events.append(f"start r{spec.revision}")

    def poll(self) -> None:
        pass

    def stop(self) -> None:
        self.events.append(f"stop r{self.spec.revision}")


class Stop:
    """Stops the loop once the process acknowledged `until` (or after `polls` polls)."""

    def __init__(self, file: Path, until: int, polls: int = 400):
        self.file, self.until, self.polls = file, until, polls

    @property
    def requested(self) -> bool:
        self.polls -= 1
        try:
            said = json.loads(applied_file(self.file).read_text())
        except (OSError, ValueError):
            said = {}
        return self.polls <= 0 or int(said.get("generation", -1)) >= self.until


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    happened: list[str] = []

    def start(self: Any, spec: RunnerSpec, generation: int) -> None:
        self.revisions[runner_main._key(spec)] = Query(spec, generation, happened)

    monkeypatch.setattr(runner_main._Process, "start", start)
    monkeypatch.setattr(runner_main._Process, "close", lambda self: None)
    monkeypatch.setattr(runner_main, "KafkaAdmin", lambda *a, **k: object())
    monkeypatch.setattr(runner_main, "refresh_seconds", lambda admin: 60.0)
    monkeypatch.setattr(runner_main, "POLL_SECONDS", 0.005)
    return happened


def write(file: Path, followed: FollowedSpecs, stamp: os.stat_result | None = None) -> None:
    temporary = file.with_suffix(".tmp")
    temporary.write_text(followed.to_json())
    temporary.replace(file)
    if stamp is not None:  # the same tick of a coarse clock
        os.utime(file, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))


def test_a_generation_written_while_spark_starts_is_taken(
    tmp_path: Path, events: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "runner-specs.json"
    first = FollowedSpecs(1, ((1, spec(1)), (1, spec(2))))
    write(file, first)
    loaded = FollowedSpecs.parse(json.loads(file.read_text()))

    def session_while_the_file_changes(specs: list[RunnerSpec]) -> object:
        # The runtime stops r2 and starts r3 while the process is still building its session.
        write(file, FollowedSpecs(2, ((1, spec(1)), (2, spec(3)))))
        return object()

    monkeypatch.setattr(runner_main, "build_session", session_while_the_file_changes)
    runner_main.run(loaded, Stop(file, until=2), file)  # type: ignore[arg-type]
    assert events == ["start r1", "start r2", "stop r2", "start r3"]
    assert json.loads(applied_file(file).read_text())["generation"] == 2


def test_a_change_of_the_same_size_in_the_same_clock_tick_is_taken(
    tmp_path: Path, events: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "runner-specs.json"
    write(file, FollowedSpecs(1, ((1, spec(2)),)))
    loaded = FollowedSpecs.parse(json.loads(file.read_text()))
    monkeypatch.setattr(runner_main, "build_session", lambda specs: object())
    before = file.stat()
    polls: list[int] = []

    def poll(self: Query) -> None:
        polls.append(1)
        if len(polls) == 3:  # the loop runs: r2 replaced by r3, as long, in the same tick
            write(file, FollowedSpecs(2, ((2, spec(3)),)), before)
            assert file.stat().st_size == before.st_size

    monkeypatch.setattr(Query, "poll", poll)
    runner_main.run(loaded, Stop(file, until=2), file)  # type: ignore[arg-type]
    assert events == ["start r2", "stop r2", "start r3"]
