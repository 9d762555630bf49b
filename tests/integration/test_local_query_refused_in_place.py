"""A revision Spark refused is started again after an edit that keeps it, under `distributary run`.

The view's query is stateless and its upgrade strategy Auto, so an edit of its SQL restarts the
same revision in place, on the same checkpoint (`plan.revisions.classify`: Spark's checkpoint
accepts it). The run (in this process, as `distributary run` drives it: a reconcile, then the
runner's start, each round) makes revision 1 with a filter that is not a condition (`WHERE amount`
on an INT): Spark refuses it at start, the runner reports QueryRefused, the view is Stalled and the
revision is not restarted while records arrive. The SQL is then fixed in place, while records keep
arriving: the runner's report names the spec it refused (`runner_spec_hash`), which is not the one
the revision runs now, so revision 1 is started again. It reads every record exactly once and writes
exactly what the fixed query makes of them; Spark refused the query only once.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.spark_pipelines import PipelineRun, SteadyProducer, read_topic

from distributary.kafka.records import produce
from distributary.local.broker import EmbeddedBroker

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: qi-events}
spec: {partitions: 2, schema: "id INT, user STRING, amount INT"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: qi-big}
spec:
  inputs: [{log: qi-events, alias: e}]
  sql: SELECT id, user, amount FROM e WHERE CONDITION
  upgrade: {strategy: Auto, cutoverWindow: 4s}
  spark: {trigger: 2s}
"""
REFUSED = "amount"  # an INT is not a condition: Spark refuses it, the static checks do not
FIXED = "amount >= 10"
FIRST = 100
WATCHED = 6.0  # seconds the refused revision is watched for a restart, records arriving


def pipeline(condition: str) -> str:
    return PIPELINE.replace("CONDITION", condition)


def status(run: PipelineRun) -> dict[str, Any]:
    assert run.local.revisions is not None
    return run.local.revisions.status("DerivedView", "default/qi-big")


def stalled(run: PipelineRun) -> dict[str, Any] | None:
    found = next((c for c in status(run).get("conditions") or [] if c["type"] == "Stalled"), None)
    return found if found and found["status"] == "True" else None


def read(run: PipelineRun) -> int:
    """Records the revision has read: the sum of its input positions."""
    inputs = status(run).get("inputs") or []
    return sum(int(o) for i in inputs for o in (i.get("position") or {}).values())


def rounds(run: PipelineRun, what: str, probe: Any, timeout: float) -> None:
    run.rounds(what, probe, timeout, lambda: status(run))


def output(broker: EmbeddedBroker) -> Counter[tuple[int, str, int]]:
    rows = [json.loads(r.value) for r in read_topic(broker.bootstrap_servers, "qi-big.r1")]
    return Counter((r["id"], r["user"], r["amount"]) for r in rows)


@pytest.fixture(scope="module")
def edited(tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker) -> Iterator[dict]:
    """Revision 1 refused and watched while records arrive; then fixed in place."""
    folder = tmp_path_factory.mktemp("refused-in-place")
    run = PipelineRun(folder, pipeline(REFUSED), broker.bootstrap_servers)
    schema = run.schema("qi-events")
    first = [SteadyProducer.record(i) for i in range(FIRST)]
    produce(broker.bootstrap_servers, "qi-events", [schema.encode(r) for r in first])
    producer = SteadyProducer(broker.bootstrap_servers, "qi-events", first=FIRST)
    found: dict[str, Any] = {}
    try:
        run.start()
        rounds(run, "Stalled on the refused query", lambda: stalled(run) is not None, 180)
        found["refused_status"] = status(run)
        producer.start()
        runner = run.local.runner
        refused_at = run.local.runner_log.read_text(errors="replace").count("Spark refuses")
        deadline = time.monotonic() + WATCHED
        rounds(run, "watched", lambda: time.monotonic() > deadline, WATCHED + 30)
        found["watched_status"] = status(run)
        found["restarted_while_refused"] = run.local.runner is not runner
        run.edit(folder, pipeline(FIXED))
        try:
            rounds(run, "reading again", lambda: read(run) >= FIRST, 180)
        finally:
            records = first + producer.stop()
        rounds(run, "caught up", lambda: read(run) == len(records), 120)
        found["status"] = status(run)
        found["records"] = records
        log = run.local.runner_log.read_text(errors="replace")
        found["refusals"] = (refused_at, log.count("Spark refuses"))
        yield found
    finally:
        producer.stop()
        run.stop()


def test_the_refused_revision_is_stalled_and_not_restarted_while_records_arrive(
    edited: dict[str, Any],
) -> None:
    conditions = {c["type"]: c for c in edited["watched_status"]["conditions"]}
    assert (conditions["Stalled"]["status"], conditions["Stalled"]["reason"]) == (
        "True",
        "QueryRefused",
    )
    assert "FILTER_NOT_BOOLEAN" in conditions["Stalled"]["message"]
    assert not edited["restarted_while_refused"]


def test_the_fix_keeps_the_revision_and_its_checkpoint(edited: dict[str, Any]) -> None:
    before, after = edited["refused_status"], edited["status"]
    assert after["lastChange"]["classification"] == "RestartInPlace"
    assert [r["revision"] for r in after["revisions"]] == [1]
    assert after["revisions"][0]["specHash"] != before["revisions"][0]["specHash"]
    assert after["servingRevision"] == 1


def test_the_refused_revision_is_started_again_and_writes_every_record_once(
    edited: dict[str, Any], broker: EmbeddedBroker
) -> None:
    status = edited["status"]
    assert not any(c["type"] == "Stalled" and c["status"] == "True" for c in status["conditions"])
    assert status["lag"] == 0
    records = edited["records"]
    assert len(records) > FIRST + 100  # records kept arriving while it was refused and after
    wanted = Counter((r["id"], r["user"], r["amount"]) for r in records if r["amount"] >= 10)
    assert output(broker) == wanted
    assert edited["refusals"] == (1, 1)  # Spark was asked once about the refused query
