"""A view edited to SQL Spark refuses at start is Stalled, not restarted, under `distributary run`.

A first run makes revision 1. The view's SQL is then edited to a filter that is not a condition
(`WHERE amount` on an INT): the static checks pass it, Spark refuses it when revision 2 starts. A
second run goes on while a producer appends records: revision 2 is refused once and never
restarted, the view is Stalled naming spec.sql in Spark's words, and revision 1 serves on and
writes exactly what its query makes of every record appended meanwhile. A third run, on an edit
that fixes the SQL, starts a new revision that catches up and serves.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.integration.spark_pipelines import SteadyProducer, read_topic
from tests.integration.spark_pipelines import wait_for_run as wait_until
from tests.integration.test_local_run import ROOT, distributary, summary_of

from distributary.local.broker import EmbeddedBroker

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: qr-events}
spec: {partitions: 2, schema: "id INT, user STRING, amount INT"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: qr-big}
spec:
  inputs: [{log: qr-events, alias: e}]
  sql: SELECT id, user, amount FROM e WHERE CONDITION
  upgrade: {cutoverWindow: 4s}
  spark: {trigger: 2s}
"""
REFUSED = "amount"  # an INT is not a condition: Spark refuses it, the static checks do not
FIRST = 100
WATCHED = 10.0  # seconds the stalled view is watched for a restart


def pipeline(condition: str) -> str:
    return PIPELINE.replace("CONDITION", condition)


def spark_starts(said: str) -> int:
    """Queries started, as the run says: the Spark process started, or a running one asked to
    start one more."""
    return said.count("Starting Spark") + said.count("Spark (running): starting")


def view_status(state: Path) -> dict[str, Any]:
    try:
        views = json.loads((state / "revisions.json").read_text())["views"]
    except (OSError, ValueError, KeyError):
        return {}
    return dict((views.get("default/qr-big") or {}).get("status") or {})


def stalled(state: Path) -> dict[str, Any] | None:
    conditions = view_status(state).get("conditions") or []
    found = next((c for c in conditions if c["type"] == "Stalled"), None)
    return found if found and found["status"] == "True" else None


def read_all(state: Path, total: int) -> bool:
    """Whether the serving revision has read `total` records and lags by none."""
    status = view_status(state)
    inputs = status.get("inputs") or []
    read = sum(int(o) for i in inputs for o in (i.get("position") or {}).values())
    return read == total and status.get("lag") == 0


def output(broker: EmbeddedBroker, topic: str) -> Counter[tuple[int, str, int]]:
    rows = [json.loads(r.value) for r in read_topic(broker.bootstrap_servers, topic) if r.value]
    return Counter((r["id"], r["user"], r["amount"]) for r in rows)


def expected(records: list[dict[str, Any]], least: int) -> Counter[tuple[int, str, int]]:
    return Counter((r["id"], r["user"], r["amount"]) for r in records if r["amount"] >= least)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("refused")


@pytest.fixture(scope="module")
def refused(folder: Path, broker: EmbeddedBroker) -> dict[str, Any]:
    """Revision 1 made; the run on the refused edit watched while records arrive."""
    files = folder / "pipeline"
    files.mkdir()
    (files / "pipeline.yaml").write_text(pipeline("amount >= 10"))
    state = folder / "state"
    common = (
        str(files),
        "--state-dir",
        str(state),
        "--bootstrap-servers",
        broker.bootstrap_servers,
    )
    first = [SteadyProducer.record(i) for i in range(FIRST)]
    data = folder / "first.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in first))
    summary_of(distributary("run", *common, "--until-caught-up", "--produce", f"qr-events={data}"))
    (files / "pipeline.yaml").write_text(pipeline(REFUSED))
    checked = distributary("validate", str(files))
    producer = SteadyProducer(broker.bootstrap_servers, "qr-events", first=FIRST).start()
    said = folder / "run.stderr"
    with open(said, "wb") as err:
        run = subprocess.Popen(
            [sys.executable, "-m", "distributary.cli", "run", *common, "--cores", "2"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        try:
            started = time.monotonic()
            wait_until("the view is Stalled", lambda: stalled(state) is not None, run, said, 90)
            stalled_after = time.monotonic() - started
            starts = spark_starts(said.read_text())
            time.sleep(WATCHED)  # a restart, were there one, would come in this time
            starts_after = spark_starts(said.read_text())
            watched = view_status(state)
        finally:
            records = first + producer.stop()
        wait_until(
            "revision 1 has read every record",
            lambda: read_all(state, len(records)),
            run,
            said,
            timeout=90,
        )
    finally:
        run.send_signal(signal.SIGTERM)
        run.wait(120)
    runner_log = (state / "runner.log").read_text(errors="replace")
    return {
        "checked": checked,
        "stalled_after": stalled_after,
        "starts": (starts, starts_after),
        "watched": watched,
        "records": records,
        "refusals": runner_log.count("spec.sql: Spark refuses the query"),
        "common": common,
        "files": files,
        "state": state,
    }


def test_the_static_checks_pass_the_query_spark_refuses(refused: dict[str, Any]) -> None:
    assert refused["checked"].returncode == 0, refused["checked"].stderr


def test_the_view_is_stalled_naming_spec_sql_in_sparks_words(refused: dict[str, Any]) -> None:
    assert refused["stalled_after"] < 60
    conditions = {c["type"]: c for c in refused["watched"]["conditions"]}
    stall = conditions["Stalled"]
    assert stall["reason"] == "QueryRefused"
    assert "spec.sql" in stall["message"]
    assert "FILTER_NOT_BOOLEAN" in stall["message"]
    assert 'Filter expression "amount" of type "INT" is not a boolean' in stall["message"]


def test_the_refused_revision_is_not_restarted(refused: dict[str, Any]) -> None:
    starts, starts_after = refused["starts"]
    assert starts == starts_after == 1
    assert refused["refusals"] == 1  # Spark was asked once
    application = refused["watched"].get("sparkApplication") or {}
    assert not application.get("failures")
    assert not application.get("restartAt")


def test_revision_1_serves_on_and_writes_every_record_appended(
    refused: dict[str, Any], broker: EmbeddedBroker
) -> None:
    status = refused["watched"]
    assert status["servingRevision"] == 1
    phases = {r["revision"]: r["phase"] for r in status["revisions"]}
    assert phases == {1: "Serving", 2: "CatchingUp"}
    records = refused["records"]
    assert len(records) > FIRST + 100  # records kept arriving while it was stalled
    assert output(broker, "qr-big.r1") == expected(records, 10)


def test_an_edit_that_fixes_the_sql_runs_and_cuts_over(
    refused: dict[str, Any], broker: EmbeddedBroker
) -> None:
    (refused["files"] / "pipeline.yaml").write_text(pipeline("amount >= 15"))
    summary_of(distributary("run", *refused["common"], "--until-caught-up", timeout=180))
    status = view_status(refused["state"])
    assert status["servingRevision"] == 3
    assert not any(c["type"] == "Stalled" and c["status"] == "True" for c in status["conditions"])
    assert output(broker, "qr-big.r3") == expected(refused["records"], 15)
