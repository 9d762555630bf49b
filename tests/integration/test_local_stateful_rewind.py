"""A view that keeps state never resumes on empty state: `distributary run` rebuilds it.

An upsert view counts each user's records. Records arrive at a steady rate (about 40 a second)
throughout, as in production. Mid-stream the run is stopped and a rewind asked for: moving a
stateful view's positions would resume it on empty state, whose counts would overwrite the
table's with partial ones, so revision 2 rebuilds the state from the start of the input beside
revision 1 and serves once it keeps up, while records keep arriving. With the producer stopped
and every record read, the serving revision's table must equal, row by row, the counts and sums
the input implies; and no revision ever wrote a count lower than one it had written before for
the same user (a partial count over a correct one).

A lost checkpoint takes the same path (the runner reports it, and the view reconcile rebuilds the
state as a new revision): that is checked end to end under the operator, whose runner is killed
and its checkpoint deleted while records arrive (`kube/test_view_state_rebuilt.py`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.integration.spark_pipelines import SteadyProducer, read_topic, wait_for_run
from tests.integration.test_local_run import ROOT

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.records import produce as append
from distributary.local.broker import EmbeddedBroker

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: rewound-events}
spec: {partitions: 2, schema: "id INT, user STRING, amount INT"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: rewound-counts}
spec:
  inputs: [{log: rewound-events, alias: e}]
  sql: SELECT user, COUNT(*) AS n, SUM(amount) AS total FROM e GROUP BY user
  output: {mode: upsert, key: [user]}
  upgrade: {cutoverWindow: 3s}
  spark: {trigger: 2s}
"""
REWIND = "  rewind: {requestId: again, to: {from: Earliest}}\n"


def status_of(state: Path) -> dict[str, Any]:
    try:
        views = json.loads((state / "revisions.json").read_text())["views"]
    except (OSError, ValueError, KeyError):
        return {}
    return dict((views.get("default/rewound-counts") or {}).get("status") or {})


def read_count(state: Path) -> int:
    """Records the serving revision has read (its group's positions)."""
    inputs = status_of(state).get("inputs") or []
    return sum(int(o) for i in inputs for o in (i.get("position") or {}).values())


class Runs:
    """`distributary run` of the pipeline, started and stopped while records arrive."""

    def __init__(self, folder: Path, bootstrap: str) -> None:
        self.folder = folder
        self.pipeline = folder / "pipeline"
        self.pipeline.mkdir()
        (self.pipeline / "pipeline.yaml").write_text(PIPELINE)
        self.state = folder / "state"
        self.common = (
            str(self.pipeline),
            "--state-dir",
            str(self.state),
            "--bootstrap-servers",
            bootstrap,
        )
        self.said = folder / "run.stderr"
        self.run: subprocess.Popen[bytes] | None = None

    def start(self) -> subprocess.Popen[bytes]:
        with open(self.said, "ab") as err:
            self.run = subprocess.Popen(
                [sys.executable, "-m", "distributary.cli", "run", *self.common, "--cores", "2"],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        return self.run

    def stop(self) -> None:
        if self.run is not None and self.run.poll() is None:
            self.run.send_signal(signal.SIGTERM)
            self.run.wait(120)

    def until(self, what: str, probe: Any, timeout: float = 300) -> None:
        assert self.run is not None
        wait_for_run(what, probe, self.run, self.said, timeout)


def serving(state: Path, revision: int) -> bool:
    return status_of(state).get("servingRevision") == revision


def drained(state: Path, bootstrap: str) -> bool:
    """Whether the serving revision has read every record the input holds."""
    ends = KafkaAdmin(bootstrap).end_offsets(["rewound-events"])["rewound-events"]
    return read_count(state) == sum(ends.values()) and status_of(state).get("lag") == 0


def input_records(bootstrap: str) -> list[dict[str, Any]]:
    """Every record the input holds: what the outputs must be made of."""
    return [json.loads(r.value) for r in read_topic(bootstrap, "rewound-events") if r.value]


@pytest.fixture(scope="module")
def rewound(tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker) -> dict[str, Any]:
    """The status once revision 2, rebuilt for the rewind, has read every record; what was sent."""
    bootstrap = broker.bootstrap_servers
    runs = Runs(tmp_path_factory.mktemp("rewind"), bootstrap)
    # A backlog the first batch reads, then records arriving until revision 2 serves.
    first = [SteadyProducer.record(i) for i in range(200)]
    producer = SteadyProducer(bootstrap, "rewound-events", first=len(first))
    sent = list(first)
    try:
        runs.start()
        admin = KafkaAdmin(bootstrap)
        runs.until(
            "the run made the input's topic", lambda: "rewound-events" in admin.topic_names()
        )
        append(bootstrap, "rewound-events", [producer.schema.encode(r) for r in first])
        producer.start()
        runs.until("revision 1 reads live records", lambda: read_count(runs.state) > 300)
        runs.stop()
        (runs.pipeline / "pipeline.yaml").write_text(PIPELINE + REWIND)
        runs.start()
        runs.until("revision 2 rebuilt for the rewind and serving", lambda: serving(runs.state, 2))
        sent += producer.stop()
        runs.until("revision 2 read every record", lambda: drained(runs.state, bootstrap))
        status = status_of(runs.state)
    finally:
        producer.stop()
        runs.stop()
    status["sent"] = sent
    status["records"] = input_records(bootstrap)
    return status


def test_every_record_sent_reached_the_input(rewound: dict[str, Any]) -> None:
    key = json.dumps
    assert Counter(map(key, rewound["sent"])) <= Counter(map(key, rewound["records"]))


def table(bootstrap: str, topic: str) -> dict[str, tuple[int, int]]:
    """The upsert table a reader of `topic` holds: the last row of each user."""
    rows: dict[str, tuple[int, int]] = {}
    for record in read_topic(bootstrap, topic):
        if record.value is not None:
            row = json.loads(record.value)
            rows[row["user"]] = (row["n"], row["total"])
    return rows


def expected(records: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    counts = Counter(r["user"] for r in records)
    sums = Counter[str]()
    for r in records:
        sums[r["user"]] += r["amount"]
    return {user: (counts[user], sums[user]) for user in counts}


def never_lowered(bootstrap: str, topic: str) -> list[str]:
    """Rows of `topic` whose count is lower than one written before for the same user."""
    best: dict[str, int] = {}
    lowered = []
    for record in read_topic(bootstrap, topic):
        if record.value is None:
            continue
        row = json.loads(record.value)
        if row["n"] < best.get(row["user"], 0):
            lowered.append(f"{row['user']}: {row['n']} after {best[row['user']]}")
        best[row["user"]] = max(best.get(row["user"], 0), row["n"])
    return lowered


def test_no_revision_wrote_a_partial_count_over_a_correct_one(
    rewound: dict[str, Any], broker: EmbeddedBroker
) -> None:
    for topic in ("rewound-counts.r1", "rewound-counts.r2"):
        assert never_lowered(broker.bootstrap_servers, topic) == [], topic


def test_a_rewind_of_a_stateful_view_rebuilds_it_and_its_table_is_exact(
    rewound: dict[str, Any], broker: EmbeddedBroker
) -> None:
    rows = {r["revision"]: r for r in rewound["revisions"]}
    assert rows[2]["phase"] == "Serving"
    assert rows[2]["reason"] == "Rewind"
    assert rows[1]["phase"] in ("Retiring", "Retired")
    assert table(broker.bootstrap_servers, "rewound-counts.r2") == expected(rewound["records"])
