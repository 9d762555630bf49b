"""Crash loops back off in `distributary run`, whose views share one runner process.

Two views read one log in the runner: `lcl-upper` copies every record, `lcl-numbers` casts a text
column to a number, which Spark refuses at run time for the record that is not one (ANSI casts).
So `lcl-numbers` reaches RUNNING and then fails, again after every restart. The run is
`LocalRun`, as `distributary run` drives it, with a small restart policy (seconds): the failed
view is restarted only once its back-off is over (the runner restarted without it meanwhile
would leave it out), the back-off grows, and after two failures within the window the view is
Stalled (`ApplicationFailing`, with Spark's error and the next retry) in its status in the state
folder, said on stderr, while it is still retried at the longest back-off. The other view runs
on and never fails.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.integration.spark_pipelines import TEST_SPARK_CONF

from distributary.graph import load_pipeline
from distributary.kafka.records import produce
from distributary.local.broker import EmbeddedBroker
from distributary.local.run import LocalRun
from distributary.plan.applications.restarts import RestartPolicy
from distributary.schema import RecordSchema

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: lcl-events}
spec: {partitions: 1, schema: "who STRING, amount STRING"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: lcl-upper}
spec:
  inputs: [{log: lcl-events, alias: e}]
  sql: SELECT upper(who) AS who, amount FROM e
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: lcl-numbers}
spec:
  inputs: [{log: lcl-events, alias: e}]
  sql: SELECT who, CAST(amount AS INT) AS amount FROM e
"""
FIRST, LONGEST = 2, 4
POLICY = RestartPolicy(
    first_delay=FIRST, max_delay=LONGEST, stable_after=600, window=600, failures_before_stalled=2
)
EVENTS = [{"who": f"u{i}", "amount": str(i) if i != 7 else "x7"} for i in range(20)]
FAILING = "default/lcl-numbers"
TIMEOUT = 420.0


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class Watched:
    """What the rounds of the run showed: each failure counted (its history as status had it
    then), each start of the runner process with the failing view in it (when), what was
    said."""

    failures: list[dict[str, Any]] = field(default_factory=list)
    starts: list[datetime] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    stalled: dict[str, Any] | None = None


@pytest.fixture(scope="module")
def said() -> list[str]:
    """What the run says on stderr, line by line."""
    return []


@pytest.fixture(scope="module")
def run(
    tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker, said: list[str]
) -> Iterator[LocalRun]:
    folder = tmp_path_factory.mktemp("crash-loop")
    (folder / "pipeline.yaml").write_text(PIPELINE)
    pipeline = load_pipeline([folder / "pipeline.yaml"])
    assert pipeline.ok, pipeline.problems
    local = LocalRun(
        pipeline,
        [folder],
        folder / "state",
        bootstrap_servers=broker.bootstrap_servers,
        say=said.append,
        spark_conf=TEST_SPARK_CONF,
        restart_policy=POLICY,
    )
    local.state_dir.mkdir(parents=True)
    try:
        local.prepare(broker.bootstrap_servers)
        schema = RecordSchema.parse("who STRING, amount STRING", [])
        produce(broker.bootstrap_servers, "lcl-events", [schema.encode(e) for e in EVENTS])
        yield local
    finally:
        local.stop()


def status(run: LocalRun, key: str) -> dict[str, Any]:
    assert run.revisions is not None
    return run.revisions.status("DerivedView", key)


def condition(found: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in found.get("conditions") or [] if c["type"] == type_), None)


def log_tail(run: LocalRun) -> str:
    try:
        return "\n".join(run.runner_log.read_text(errors="replace").splitlines()[-25:])
    except OSError:
        return ""


@pytest.fixture(scope="module")
def watched(run: LocalRun, said: list[str]) -> Watched:
    """Rounds of the run until the failing view is Stalled and then restarted once more."""
    assert run.runtime is not None
    seen = Watched()
    key = ("default", "lcl-numbers", 1)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        run.reconcile()
        before = datetime.now(UTC)  # the reconcile decided any restart before this
        if run.runtime.flush() and key in run.runtime.running:
            seen.starts.append(before)
        record = dict(status(run, FAILING).get("sparkApplication") or {})
        known = [(f["failures"], f["restartAt"]) for f in seen.failures]
        if record.get("restartAt") and (record["failures"], record["restartAt"]) not in known:
            seen.failures.append(record)
        stalled = condition(status(run, FAILING), "Stalled")
        if stalled and stalled["status"] == "True" and seen.stalled is None:
            seen.stalled = {**stalled, "ready": condition(status(run, FAILING), "Ready")}
        if seen.stalled is not None and len(seen.starts) > len(seen.failures):
            seen.said = list(said)
            return seen
        time.sleep(0.5)
    pytest.fail(
        f"the view did not stall and restart within {TIMEOUT:.0f}s: {seen}\n{log_tail(run)}"
    )


def test_the_view_that_fails_after_running_is_restarted_after_a_growing_back_off(
    watched: Watched,
) -> None:
    first, second = watched.failures[:2]
    assert (first["attempts"], second["attempts"]) == (1, 2)
    back_offs = [
        (parse(f["restartAt"]) - parse(f["failures"][-1])).total_seconds()
        for f in watched.failures[:2]
    ]
    # The first delay, then (two failures within the window: Stalled) the longest.
    assert FIRST <= back_offs[0] <= FIRST + 1, back_offs
    assert LONGEST <= back_offs[1] <= LONGEST + 1, back_offs
    # The runner ran it again only once each restart was due, never sooner.
    assert len(watched.starts) == 3, watched
    for started, failure in zip(watched.starts[1:], watched.failures, strict=False):
        assert started >= parse(failure["restartAt"]), (started, failure)


def test_the_view_is_stalled_with_the_error_and_the_next_retry(
    run: LocalRun, watched: Watched
) -> None:
    stalled = watched.stalled
    assert stalled is not None
    assert stalled["reason"] == "ApplicationFailing"
    failure = watched.failures[1]
    # The last error as the runner reported it, and when the view is tried again.
    error = failure["lastError"]
    assert error.startswith("the query failed: "), error
    assert "CAST_INVALID_INPUT" in error, error  # Spark's error, not its Python wrapper
    assert stalled["message"] == (
        f"the Spark application failed 2 times within 10m; the last error: {error}; the next "
        f"retry is at {failure['restartAt']}, and retries go on every 4s while it keeps failing"
    )
    assert (stalled["ready"]["status"], stalled["ready"]["reason"]) == (
        "False",
        "ApplicationFailing",
    )
    assert "CAST_INVALID_INPUT" in run.runner_log.read_text(errors="replace")  # what failed
    assert any(
        line.startswith("view lcl-numbers: Stalled (ApplicationFailing):") for line in watched.said
    ), watched.said


def test_the_other_view_in_the_runner_never_failed(run: LocalRun, watched: Watched) -> None:
    other = status(run, "default/lcl-upper")
    assert (other.get("sparkApplication") or {}).get("attempts") == 0
    assert "failures" not in (other.get("sparkApplication") or {})
    stalled = condition(other, "Stalled")
    assert stalled is None, stalled


def test_state_folder_keeps_the_history(run: LocalRun, watched: Watched) -> None:
    """What a second `distributary run` reads to go on counting."""
    assert run.revisions is not None
    path = Path(run.state_dir) / "revisions.json"
    assert path.exists()
    record = status(run, FAILING)["sparkApplication"]
    assert record["attempts"] >= 2
    assert len(record["failures"]) >= 2
