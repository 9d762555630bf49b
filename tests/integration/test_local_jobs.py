"""StreamJobs under `distributary run`: the user's own PySpark file, run and tracked as under the
operator, beside the pipeline's views.

The pipeline folder holds the job's file next to its YAML (`mainApplicationFile: shout.py`, a
path relative to the file that declares the job). `distributary run --until-caught-up` runs the
job's file in a process of its own with the topics, checkpoint and consumer group in its
environment, and a view in the shared runner process; it exits once both have read everything.
The job's output must hold exactly what its code makes of the input, its position must be its
consumer group's offsets, and a second run after more records arrived must process only those.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.integration.spark_pipelines import read_topic
from tests.integration.test_local_run import distributary, summary_of

from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "data" / "jobs" / "shout.py"
PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: lj-clicks}
spec: {topicName: local-jobs.clicks, partitions: 2, schema: "user STRING, url STRING"}
---
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: lj-shouts}
spec: {topicName: local-jobs.shouts, partitions: 1, schema: "user STRING, url STRING"}
---
apiVersion: distributary.dev/v1alpha1
kind: StreamJob
metadata: {name: shout}
spec:
  image: not-used-on-one-machine
  mainApplicationFile: shout.py
  arguments: ["--suffix", "!"]
  inputs: [{log: lj-clicks}]
  outputs: [{log: lj-shouts}]
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: local-jobs-per-user}
spec:
  inputs: [{log: lj-clicks, alias: c}]
  sql: SELECT user, url FROM c WHERE user = 'u1'
"""
GROUP = "distributary.default.shout.r1"


def clicks(first: int, last: int) -> list[dict[str, Any]]:
    return [{"user": f"u{i % 3}", "url": f"/page/{i}"} for i in range(first, last)]


def write_lines(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def shouted(records: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter((r["user"], r["url"].upper() + "!") for r in records)


def read(broker: EmbeddedBroker, topic: str) -> Counter[tuple[str, str]]:
    values = [json.loads(r.value or b"null") for r in read_topic(broker.bootstrap_servers, topic)]
    return Counter((v["user"], v["url"]) for v in values)


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker
) -> tuple[Path, dict[str, Any], dict[str, Any], Counter[tuple[str, str]]]:
    folder = tmp_path_factory.mktemp("jobs")
    pipeline = folder / "pipeline"
    pipeline.mkdir()
    (pipeline / "pipeline.yaml").write_text(PIPELINE)
    shutil.copy(SCRIPT, pipeline / "shout.py")
    state = folder / "state"
    common = (
        str(pipeline),
        "--state-dir",
        str(state),
        "--bootstrap-servers",
        broker.bootstrap_servers,
        "--until-caught-up",
        "--cores",
        "2",
    )
    first_file = write_lines(folder / "first.jsonl", clicks(0, 20))
    first = summary_of(distributary("run", *common, "--produce", f"lj-clicks={first_file}"))
    after_first = read(broker, "local-jobs.shouts")
    second_file = write_lines(folder / "second.jsonl", clicks(20, 32))
    second = summary_of(distributary("run", *common, "--produce", f"lj-clicks={second_file}"))
    return state, first, second, after_first


def test_the_jobs_own_file_turns_the_input_into_exactly_its_output(
    runs: tuple[Path, dict[str, Any], dict[str, Any], Counter[tuple[str, str]]],
    broker: EmbeddedBroker,
) -> None:
    _, _, _, after_first = runs
    assert after_first == shouted(clicks(0, 20))
    # The second run resumes from the job's checkpoint: the new records once, nothing again.
    assert read(broker, "local-jobs.shouts") == shouted(clicks(0, 32))


def test_the_jobs_position_is_its_consumer_groups_offsets_in_the_summary(
    runs: tuple[Path, dict[str, Any], dict[str, Any], Counter[tuple[str, str]]],
    broker: EmbeddedBroker,
) -> None:
    _, first, second, _ = runs
    ends = KafkaAdmin(broker.bootstrap_servers).end_offsets(["local-jobs.clicks"])
    committed = KafkaAdmin(broker.bootstrap_servers).committed(GROUP)
    assert committed == ends
    job = second["jobs"]["shout"]
    assert (job["revision"], job["lag"], job["state"]) == (1, 0, "Running")
    assert job["position"] == {
        "local-jobs.clicks": {str(p): o for p, o in ends["local-jobs.clicks"].items()}
    }
    assert first["jobs"]["shout"]["lag"] == 0


def test_the_view_beside_the_job_runs_as_before(
    runs: tuple[Path, dict[str, Any], dict[str, Any], Counter[tuple[str, str]]],
    broker: EmbeddedBroker,
) -> None:
    _, _, second, _ = runs
    assert second["views"]["local-jobs-per-user"]["lag"] == 0
    kept = Counter((r["user"], r["url"]) for r in clicks(0, 32) if r["user"] == "u1")
    assert read(broker, "local-jobs-per-user.r1") == kept


def test_the_state_folder_records_the_jobs_status(
    runs: tuple[Path, dict[str, Any], dict[str, Any], Counter[tuple[str, str]]],
) -> None:
    state, _, _, _ = runs
    entry = json.loads((state / "revisions.json").read_text())["jobs"]["default/shout"]
    status = entry["status"]
    assert (status["revision"], status["consumerGroup"], status["lag"]) == (1, GROUP, 0)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert "pendingAction" not in status
