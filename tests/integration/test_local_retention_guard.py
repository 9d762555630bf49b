"""The retention guard in `distributary run`: no reprocess over an input that lost its history.

A first run appends records and runs the view at revision 1. Then the head of one partition of
its input is deleted (the Admin API's delete_records, as retention would), so that partition no
longer starts at 0, and the view's SQL is changed: the second run refuses to start revision 2,
keeps serving revision 1, and says why (log, partition, first offset, what to do) on stderr, in
the summary, in run.json and in revisions.json. A third run, whose spec allows partial history,
reprocesses what remains and cuts over. The runs use the session's broker
(`--bootstrap-servers`), so the test can delete records between them.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from tests.integration.spark_pipelines import read_topic
from tests.integration.test_local_run import distributary, summary_of

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.cluster import client_config
from distributary.local.broker import EmbeddedBroker

LOG, VIEW = "guard-clicks", "guard-big"
KEPT, STRICTER = "n >= 0", "n >= 1"
DELETED = 2  # records deleted from the head of the fullest partition

LOGS = f"""
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {{name: {LOG}}}
spec:
  partitions: 2
  schema: "who STRING, n INT"
"""

VIEWS = f"""
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {{name: {VIEW}}}
spec:
  inputs: [{{log: {LOG}, alias: src}}]
  upgrade: {{cutoverWindow: 1s}}
  sql: SELECT who, n FROM src WHERE {KEPT}
"""


@dataclass
class Runs:
    """The three runs' results, what the state folder held after the refused one, and the
    partition whose head was deleted."""

    results: list[subprocess.CompletedProcess[str]] = field(default_factory=list)
    refused_state: dict[str, Any] = field(default_factory=dict)
    partition: int = -1
    bootstrap: str = ""
    topic_r2_after_refusal: bool = False


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker) -> Runs:
    folder = tmp_path_factory.mktemp("guard")
    (folder / "pipeline").mkdir()
    (folder / "pipeline" / "logs.yaml").write_text(LOGS)
    views = folder / "pipeline" / "views.yaml"
    views.write_text(VIEWS)
    data = folder / "clicks.jsonl"
    data.write_text("".join(json.dumps({"who": f"u{i % 5}", "n": i}) + "\n" for i in range(20)))
    state = folder / "state"
    found = Runs(bootstrap=broker.bootstrap_servers)

    common = ("--state-dir", str(state), "--bootstrap-servers", found.bootstrap)

    def run(*extra: str) -> None:
        pipeline = str(folder / "pipeline")
        result = distributary("run", pipeline, *common, "--until-caught-up", "--cores", "2", *extra)
        found.results.append(result)
        summary_of(result)

    run("--produce", f"{LOG}={data}")
    # Retention's work, done at once: the head of a partition with enough records goes.
    ends = KafkaAdmin(found.bootstrap).end_offsets([LOG])[LOG]
    found.partition = next(p for p, end in sorted(ends.items()) if end > DELETED)
    client = AdminClient(client_config(found.bootstrap))
    for future in client.delete_records([TopicPartition(LOG, found.partition, DELETED)]).values():
        future.result(timeout=30)
    views.write_text(VIEWS.replace(KEPT, STRICTER))
    run()
    found.topic_r2_after_refusal = (
        KafkaAdmin(found.bootstrap).describe_topic(f"{VIEW}.r2") is not None
    )
    found.refused_state = {
        name: json.loads((state / name).read_text())
        for name in ("revisions.json", "run.json", "runner-specs.json")
    }
    views.write_text(
        VIEWS.replace(KEPT, STRICTER).replace(
            "{cutoverWindow: 1s}", "{cutoverWindow: 1s, allowPartialHistory: true}"
        )
    )
    run()
    return found


def lost(runs: Runs) -> str:
    return (
        f"input log {LOG} (topic {LOG}) has lost its history to retention: partition "
        f"{runs.partition} starts at offset {DELETED}, not 0"
    )


def test_the_refused_run_serves_revision_1_and_says_why_and_what_to_do(runs: Runs) -> None:
    refused = runs.results[1]
    view = summary_of(refused)["views"][VIEW]
    assert (view["revision"], view["outputTopic"], view["lag"]) == (1, f"{VIEW}.r1", 0)
    assert view["problem"]["reason"] == "HistoryIncomplete"
    assert lost(runs) in view["problem"]["message"]
    assert "allowPartialHistory: true" in view["problem"]["message"]
    said = " ".join(refused.stderr.split())
    assert f"view {VIEW}: change refused (HistoryIncomplete): {lost(runs)}" in said
    assert "(revert the change); or restore the input's history" in said
    assert "and run again. Revision 1 keeps serving." in said
    assert said.count("change refused (HistoryIncomplete)") == 1  # said once, not every second


def test_the_refused_run_started_no_revision_2(runs: Runs) -> None:
    specs = [r["spec"] for r in runs.refused_state["runner-specs.json"]["revisions"]]
    assert [(s["name"], s["revision"]) for s in specs] == [(VIEW, 1)]
    assert summary_of(runs.results[1])["logs"][VIEW]["topic"] == f"{VIEW}.r1"
    assert not runs.topic_r2_after_refusal
    assert f"Starting Spark for 1 view(s) ({VIEW} r1)" in runs.results[1].stderr


def test_the_state_folder_says_why_while_the_change_is_refused(runs: Runs) -> None:
    entry = runs.refused_state["revisions.json"]["views"][f"default/{VIEW}"]
    status = entry["status"]
    assert status["problem"]["reason"] == "HistoryIncomplete"
    assert lost(runs) in status["problem"]["message"]
    assert [(r["revision"], r["phase"]) for r in status["revisions"]] == [(1, "Serving")]
    assert KEPT in entry["view"]["spec"]["sql"]  # what runs, which the next run compares with
    state = runs.refused_state["run.json"]["views"][VIEW]
    assert state["servingRevision"] == 1
    assert state["problem"] == status["problem"]


def test_allowing_partial_history_reprocesses_what_remains_and_cuts_over(runs: Runs) -> None:
    final = summary_of(runs.results[2])
    view = final["views"][VIEW]
    assert (view["revision"], view["outputTopic"], view["lag"]) == (2, f"{VIEW}.r2", 0)
    assert "problem" not in view
    remaining = [r.json() for r in read_topic(runs.bootstrap, LOG)]
    assert len(remaining) == 20 - DELETED
    kept = sorted((r["who"], r["n"]) for r in remaining if r["n"] >= 1)
    written = [r.json() for r in read_topic(runs.bootstrap, f"{VIEW}.r2")]
    assert sorted((r["who"], r["n"]) for r in written) == kept
    assert final["logs"][VIEW]["topic"] == f"{VIEW}.r2"
