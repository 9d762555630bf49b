"""A view and a job suspended and resumed under `distributary run` while records arrive, exactly.

The view counts and sums each user's events (a stateful aggregation, upsert by user); the job
(its own file, `tests/data/jobs/double_amounts.py`, a process of its own) copies each event with
its amount doubled, exactly once. Records arrive all along. Both are suspended (`spec.suspend:
true` in their file): their queries stop, their consumer groups' positions stay where they
stopped while their lag grows, nothing more is written to their outputs, and their status says
Suspended (Ready False, neither Reconciling nor Stalled). They are then resumed: the same
revisions start again on the same checkpoints (the view's state: the counts so far) and read on
from where they stopped. Once caught up, the view's output, read as a table, and the job's, as a
multiset, are exactly what every record appended implies: resumed on a fresh checkpoint, or from
the start of the input, they would hold too few or too many.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.spark_pipelines import (
    PipelineRun,
    SteadyProducer,
    latest_table,
    read_topic,
)

from distributary.local.broker import EmbeddedBroker

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: su-events}
spec: {partitions: 2, schema: "id INT, user STRING, amount INT"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: su-totals}
spec:
  inputs: [{log: su-events, alias: e}]
  sql: SELECT user, COUNT(*) AS n, SUM(amount) AS total FROM e GROUP BY user
  output: {mode: upsert, key: [user]}
  spark: {trigger: 1s}
  suspend: SUSPEND
---
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: su-doubled}
spec: {partitions: 1, schema: "id INT, user STRING, amount INT"}
---
apiVersion: distributary.dev/v1alpha1
kind: StreamJob
metadata: {name: su-job}
spec:
  image: not-used-on-one-machine
  mainApplicationFile: double_amounts.py
  inputs: [{log: su-events}]
  outputs: [{log: su-doubled}]
  suspend: SUSPEND
"""
SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "data" / "jobs" / "double_amounts.py"
RUNNING, SUSPENDED = PIPELINE.replace("SUSPEND", "false"), PIPELINE.replace("SUSPEND", "true")
OUTPUT = "su-totals.r1"
VIEW_GROUP, JOB_GROUP = "distributary.default.su-totals.r1", "distributary.default.su-job.r1"
WATCHED = 8.0  # seconds the suspended view is watched while records arrive


def status(run: PipelineRun, kind: str = "DerivedView") -> dict[str, Any]:
    assert run.local.revisions is not None
    name = "su-totals" if kind == "DerivedView" else "su-job"
    return run.local.revisions.status(kind, f"default/{name}")


def read(run: PipelineRun, group: str = VIEW_GROUP) -> int:
    """Records the view (or job) has read, as its consumer group's committed offsets say."""
    committed = run.admin.committed(group)
    return sum(sum(partitions.values()) for partitions in committed.values())


def both_read(run: PipelineRun) -> tuple[int, int]:
    return read(run), read(run, JOB_GROUP)


def ready(run: PipelineRun, kind: str = "DerivedView") -> tuple[str, str]:
    found = {c["type"]: c for c in status(run, kind).get("conditions") or []}
    return found.get("Ready", {}).get("status", ""), found.get("Ready", {}).get("reason", "")


def both_ready(run: PipelineRun) -> tuple[tuple[str, str], tuple[str, str]]:
    return ready(run), ready(run, "StreamJob")


def rounds(run: PipelineRun, what: str, probe: Any, timeout: float) -> None:
    run.rounds(what, probe, timeout, lambda: (status(run), status(run, "StreamJob")))


@pytest.fixture(scope="module")
def suspended(tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker) -> Iterator[dict]:
    """The view run, suspended and watched, resumed, all while records arrive; then caught up."""
    folder: Path = tmp_path_factory.mktemp("suspend")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, folder / SCRIPT.name)
    run = PipelineRun(folder, RUNNING, broker.bootstrap_servers)
    producer = SteadyProducer(broker.bootstrap_servers, "su-events", rate=20).start()
    found: dict[str, Any] = {}
    outputs = lambda: (  # noqa: E731
        len(read_topic(broker.bootstrap_servers, OUTPUT)),
        len(read_topic(broker.bootstrap_servers, "su-doubled")),
    )
    try:
        run.start()
        rounds(run, "reading", lambda: min(both_read(run)) > 0, 240)
        run.edit(folder, SUSPENDED)
        paused = ("False", "Suspended")
        rounds(run, "suspended", lambda: both_ready(run) == (paused, paused), 120)
        found["at_suspension"] = both_read(run)
        found["outputs_then"] = outputs()
        sent_then = len(producer.sent)
        deadline = time.monotonic() + WATCHED
        rounds(run, "watched", lambda: time.monotonic() > deadline, WATCHED + 30)
        found["suspended_status"] = status(run), status(run, "StreamJob")
        found["while_suspended"] = both_read(run)
        found["outputs_later"] = outputs()
        found["sent_meanwhile"] = len(producer.sent) - sent_then
        run.edit(folder, RUNNING)
        before = found["while_suspended"]
        resumed = lambda: all(n > b for n, b in zip(both_read(run), before, strict=True))  # noqa: E731
        rounds(run, "resumed", resumed, 180)
        time.sleep(2.0)  # records go on arriving while they read again
        records = producer.stop()
        everything = (len(records), len(records))
        rounds(run, "caught up", lambda: both_read(run) == everything, 180)
        serving = (("True", "Serving"), ("True", "Running"))
        rounds(run, "Ready", lambda: both_ready(run) == serving, 60)
        found["records"] = records
        found["status"] = status(run), status(run, "StreamJob")
        found["output"] = read_topic(broker.bootstrap_servers, OUTPUT)
        found["doubled"] = read_topic(broker.bootstrap_servers, "su-doubled")
        yield found
    finally:
        producer.stop()
        run.stop()


def test_suspended_they_read_and_write_nothing_while_records_arrive(
    suspended: dict[str, Any],
) -> None:
    assert suspended["sent_meanwhile"] >= 40  # records did arrive meanwhile
    assert suspended["while_suspended"] == suspended["at_suspension"]
    assert suspended["outputs_later"] == suspended["outputs_then"]


@pytest.mark.parametrize("which", [0, 1], ids=["view", "job"])
def test_suspended_each_says_so_and_its_lag_grows(suspended: dict[str, Any], which: int) -> None:
    status = suspended["suspended_status"][which]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "Suspended")
    assert "spec.suspend" in conditions["Ready"]["message"]
    assert "Reconciling" not in conditions
    assert "Stalled" not in conditions
    assert status["sparkApplication"]["state"] == "SUSPENDED"
    assert status["lag"] >= suspended["sent_meanwhile"] // 2  # observed while nothing reads


def test_the_resumed_view_goes_on_from_its_state_and_the_table_is_exact(
    suspended: dict[str, Any],
) -> None:
    expected_n: Counter[str] = Counter()
    expected_total: Counter[str] = Counter()
    for record in suspended["records"]:
        expected_n[record["user"]] += 1
        expected_total[record["user"]] += record["amount"]
    table = latest_table(suspended["output"])
    assert {row["user"]: (row["n"], row["total"]) for row in table.values()} == {
        user: (expected_n[user], expected_total[user]) for user in expected_n
    }
    view, job = suspended["status"]
    assert view["servingRevision"] == 1
    assert [r["revision"] for r in view["revisions"]] == [1]
    assert job["revision"] == 1


def test_the_resumed_job_wrote_each_event_once(suspended: dict[str, Any]) -> None:
    doubled = Counter(
        (r.json()["id"], r.json()["user"], r.json()["amount"]) for r in suspended["doubled"]
    )
    assert doubled == Counter((e["id"], e["user"], 2 * e["amount"]) for e in suspended["records"])
