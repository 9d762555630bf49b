"""`distributary run` cuts over an edited view while records keep arriving.

A first run makes revision 1. The view's SQL is edited and a second run started while a producer
appends records at a steady rate (about 40 a second) throughout, as in production, where a lag
of exactly 0 never comes: revision 2 reprocesses beside revision 1 and serves once it keeps up.
Then the producer stops, the run reads the rest, and revision 2's topic must hold exactly what
the new query makes of every record appended.
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
metadata: {name: ll-events}
spec: {partitions: 2, schema: "id INT, user STRING, amount INT"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: ll-big}
spec:
  inputs: [{log: ll-events, alias: e}]
  sql: SELECT id, user, amount FROM e WHERE amount >= THRESHOLD
  upgrade: {cutoverWindow: 3s}
  spark: {trigger: 500ms}
"""


def view_status(state: Path) -> dict[str, Any]:
    try:
        views = json.loads((state / "revisions.json").read_text())["views"]
    except (OSError, ValueError, KeyError):
        return {}
    return dict((views.get("default/ll-big") or {}).get("status") or {})


def read_all(state: Path, total: int) -> bool:
    """Whether the serving revision has read `total` records and lags by none."""
    status = view_status(state)
    inputs = status.get("inputs") or []
    read = sum(int(o) for i in inputs for o in (i.get("position") or {}).values())
    return read == total and status.get("lag") == 0


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("live")


@pytest.fixture(scope="module")
def live(folder: Path, broker: EmbeddedBroker) -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
    pipeline = folder / "pipeline"
    pipeline.mkdir()
    (pipeline / "pipeline.yaml").write_text(PIPELINE.replace("THRESHOLD", "10"))
    state = folder / "state"
    common = (
        str(pipeline),
        "--state-dir",
        str(state),
        "--bootstrap-servers",
        broker.bootstrap_servers,
    )
    first_records = [SteadyProducer.record(i) for i in range(200)]
    data = folder / "first.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in first_records))
    summary_of(distributary("run", *common, "--until-caught-up", "--produce", f"ll-events={data}"))
    (pipeline / "pipeline.yaml").write_text(PIPELINE.replace("THRESHOLD", "15"))
    producer = SteadyProducer(
        broker.bootstrap_servers, "ll-events", first=len(first_records)
    ).start()
    said = folder / "run.stderr"
    # A reader follows the view's output from here, as `distributary tail --follow` does.
    following = ("tail", "ll-big", "-f", "-n", "0", *common[1:])
    with open(folder / "tail.stdout", "wb") as out, open(folder / "tail.stderr", "wb") as err:
        follower = subprocess.Popen(
            [sys.executable, "-m", "distributary.cli", *following],
            cwd=ROOT,
            stdout=out,
            stderr=err,
        )
    with open(said, "wb") as err:
        run = subprocess.Popen(
            [sys.executable, "-m", "distributary.cli", "run", *common, "--cores", "2"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        try:
            wait_until(
                "revision 2 serving while records arrive",
                lambda: view_status(state).get("servingRevision") == 2,
                run,
                said,
                timeout=300,
            )
            sent_at_cutover = len(producer.sent)
            time.sleep(2)  # records still arrive after the cutover
        finally:
            records = first_records + producer.stop()
        wait_until(
            "revision 2 has read every record",
            lambda: read_all(state, len(records)),
            run,
            said,
            timeout=240,
        )
        time.sleep(3)  # the follower reads what revision 2 wrote last
    finally:
        follower.send_signal(signal.SIGINT)
        try:
            follower.wait(60)
        finally:
            run.send_signal(signal.SIGTERM)
            run.wait(120)
    return records, sent_at_cutover, view_status(state)


def test_the_edit_cuts_over_while_records_keep_arriving(
    live: tuple[list[dict[str, Any]], int, dict[str, Any]],
) -> None:
    records, sent_at_cutover, status = live
    assert len(records) - 200 > sent_at_cutover  # the producer ran on past the cutover
    rows = {r["revision"]: r["phase"] for r in status["revisions"]}
    assert rows == {1: "Retiring", 2: "Serving"}
    caught = next(c for c in status["conditions"] if c["type"] == "CaughtUp")
    assert caught["status"] == "True"


def test_revision_2_holds_exactly_what_the_new_query_makes_of_every_record(
    live: tuple[list[dict[str, Any]], int, dict[str, Any]], broker: EmbeddedBroker
) -> None:
    records, _, _ = live
    rows = [
        json.loads(r.value) for r in read_topic(broker.bootstrap_servers, "ll-big.r2") if r.value
    ]
    written = Counter((r["id"], r["user"], r["amount"]) for r in rows)
    assert written == Counter(
        (r["id"], r["user"], r["amount"]) for r in records if r["amount"] >= 15
    )


def tailed(line: str) -> tuple[int, int, str]:
    """(partition, offset, value) of a line `distributary tail` printed."""
    place, _key, value = line.split(" ", 2)
    partition, offset = place.split("/")
    return int(partition), int(offset), value


def test_a_follower_switches_at_the_cutover_and_sees_revision_2_whole(
    live: tuple[list[dict[str, Any]], int, dict[str, Any]], folder: Path, broker: EmbeddedBroker
) -> None:
    said = (folder / "tail.stderr").read_text()
    assert said.count("a new revision serves from topic ll-big.r2 (was ll-big.r1)") == 1, said
    lines = [tailed(line) for line in (folder / "tail.stdout").read_text().splitlines()]
    revision_2 = [
        (r.partition, r.offset, r.value.decode())
        for r in read_topic(broker.bootstrap_servers, "ll-big.r2")
        if r.value
    ]
    before, after = lines[: len(lines) - len(revision_2)], lines[len(lines) - len(revision_2) :]
    # After the switch: revision 2 whole, from its first record, each once.
    assert Counter(after) == Counter(revision_2)
    # Before it: records revision 1 wrote while it served, each once, none of revision 2's.
    revision_1 = {
        (r.partition, r.offset, r.value.decode())
        for r in read_topic(broker.bootstrap_servers, "ll-big.r1")
        if r.value
    }
    assert before, "the follower saw nothing of revision 1 before the cutover"
    assert set(before) <= revision_1
    assert len(set(before)) == len(before)
