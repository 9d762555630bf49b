"""The StreamJob controller on a real API server, a real broker and real Spark (`local` runtime).

A user's own PySpark file (tests/data/jobs/shout.py, written against `distributary.streamjob`)
runs as a StreamJob: the operator starts it with the topics, checkpoint and consumer group in its
environment; records appended to its input reach its output; its position is committed to its
consumer group after every batch, so status reports it Ready and CaughtUp with the group's
offsets, and the input Log lists it among its subscribers. An edit under `upgrade: Reprocess`
starts revision 2 from the start of the input on a fresh checkpoint and group, and stops revision
1's process; deleting the job stops its process and leaves its Logs' data alone. The operator
makes a job's dead-letter topic (never compacted, the spec's retention) before the job runs, and
deleting the Log it belongs to under `deletionPolicy: Delete` deletes it with the Log's topic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kube.operator_harness import (
    Cluster,
    Operator,
    is_true,
    read_to_the_end,
    waiting,
)
from tests.integration.spark_pipelines import read_topic

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.records import produce
from distributary.local.broker import EmbeddedBroker
from distributary.schema import RecordSchema

NAMESPACE = "jobs-test"
OPERATOR_FLAGS = ("--spark-runtime", "local")
SCRIPT = Path(__file__).resolve().parents[2] / "data" / "jobs" / "shout.py"
SCHEMA = "user STRING, url STRING"
JOB = "shout"
LOGS = [
    {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name},
        "spec": {"partitions": partitions, "schema": SCHEMA},
    }
    for name, partitions in (("lj-clicks", 2), ("lj-shouts", 1))
]
CLICKS = [{"user": f"u{i % 3}", "url": f"/page/{i}"} for i in range(12)]


def job_manifest(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "StreamJob",
        "metadata": {"name": JOB},
        "spec": {
            "image": "not-used-by-the-local-runtime",
            "mainApplicationFile": f"local://{SCRIPT}",
            "inputs": [{"log": "lj-clicks"}],
            "outputs": [{"log": "lj-shouts"}],
            **spec,
        },
    }


def job(cluster: Cluster) -> dict[str, Any]:
    return cluster.get("sjob", JOB) or {}


def shouts(broker: EmbeddedBroker) -> list[dict[str, Any]]:
    return [
        json.loads(r.value or b"null") for r in read_topic(broker.bootstrap_servers, "lj-shouts")
    ]


def processes(operator: Operator) -> dict[str, int]:
    """The live job processes of this test, by revision folder."""
    found = {}
    for pid_file in (operator.folder / "local").rglob("job-r*/runner.pid"):
        pid = int(pid_file.read_text().strip())
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"distributary.runner.job" in cmdline:
            found[pid_file.parent.name] = pid
    return found


def caught_up_at(cluster: Cluster, broker: EmbeddedBroker, revision: int) -> bool:
    found = job(cluster)
    status = found.get("status") or {}
    return status.get("revision") == revision and read_to_the_end(found, broker.bootstrap_servers)


@pytest.fixture(scope="module")
def running(cluster: Cluster, operator: Operator, broker: EmbeddedBroker) -> None:
    """The Logs, the clicks, and the job's revision 1 caught up."""
    cluster.apply(*LOGS)
    for log in ("lj-clicks", "lj-shouts"):
        waiting(
            operator, f"Log {log} Ready", lambda log=log: is_true(cluster.get("dlog", log), "Ready")
        )
    schema = RecordSchema.parse(SCHEMA, [])
    produce(broker.bootstrap_servers, "lj-clicks", [schema.encode(r) for r in CLICKS])
    cluster.apply(job_manifest())
    waiting(operator, "revision 1 caught up", lambda: caught_up_at(cluster, broker, 1), timeout=240)


def test_the_jobs_own_code_turns_the_input_into_the_output(
    running: None, broker: EmbeddedBroker
) -> None:
    found = shouts(broker)
    expected = [{"user": c["user"], "url": c["url"].upper()} for c in CLICKS]
    key = lambda r: (r["user"], r["url"])  # noqa: E731
    assert sorted(found, key=key) == sorted(expected, key=key)


def test_the_position_is_the_consumer_groups_and_the_log_lists_the_job(
    running: None, cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    status = job(cluster)["status"]
    group = f"distributary.{NAMESPACE}.{JOB}.r1"
    assert status["consumerGroup"] == group
    committed = KafkaAdmin(broker.bootstrap_servers).committed(group)["lj-clicks"]
    assert sum(committed.values()) == len(CLICKS)
    (row,) = status["inputs"]
    assert row["position"] == {str(p): o for p, o in committed.items()}
    assert row["lag"] == 0

    def subscriber() -> dict[str, Any] | None:
        found = ((cluster.get("dlog", "lj-clicks") or {}).get("status") or {}).get("subscribers")
        # The Log lists what the job's status said at its last observation: lag 0 soon.
        return next((s for s in found or [] if s["kind"] == "StreamJob" and s["lag"] == 0), None)

    listed = waiting(operator, "the job among lj-clicks' subscribers", subscriber)
    assert (listed["name"], listed["consumerGroup"], listed["revision"]) == (JOB, group, 1)


def test_a_reprocess_edit_runs_revision_2_from_the_start_and_stops_revision_1(
    running: None, cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    assert list(processes(operator)) == ["job-r1"]
    cluster.apply(job_manifest(arguments=["--suffix", "!"], upgrade={"strategy": "Reprocess"}))
    waiting(operator, "revision 2 caught up", lambda: caught_up_at(cluster, broker, 2), timeout=240)
    assert list(processes(operator)) == ["job-r2"]
    # Revision 2 read the input again from its start, with its own group.
    found = shouts(broker)
    assert len(found) == 2 * len(CLICKS)
    assert sorted(r["url"] for r in found if r["url"].endswith("!")) == sorted(
        c["url"].upper() + "!" for c in CLICKS
    )
    group = KafkaAdmin(broker.bootstrap_servers).committed(f"distributary.{NAMESPACE}.{JOB}.r2")
    assert sum(group["lj-clicks"].values()) == len(CLICKS)
    assert job(cluster)["status"]["lastChange"]["classification"] == "Reprocess"


def test_deleting_the_job_stops_it_and_keeps_the_logs_data(
    running: None, cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    cluster.kubectl("delete", "sjob", JOB, "-n", NAMESPACE, "--wait=true")
    waiting(operator, "the job's process stopped", lambda: not processes(operator), timeout=90)
    assert len(shouts(broker)) == 2 * len(CLICKS)


def test_the_operator_makes_a_jobs_dead_letter_topic_which_goes_with_its_output(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    """Another job, whose file is nowhere (it fails at once: the topic comes first), writing a
    Log under `deletionPolicy: Delete`: deleting that Log deletes the job's dead letters too."""
    admin = KafkaAdmin(broker.bootstrap_servers)
    topic = f"distributary.{NAMESPACE}.dl-job.dlq"
    output = {"partitions": 3, "schema": SCHEMA, "deletionPolicy": "Delete"}
    cluster.apply(
        {**LOGS[0], "metadata": {"name": "dl-in"}},
        {**LOGS[0], "metadata": {"name": "dl-out"}, "spec": output},
    )
    for log in ("dl-in", "dl-out"):
        ready = lambda log=log: is_true(cluster.get("dlog", log), "Ready")  # noqa: E731
        waiting(operator, f"Log {log} Ready", ready)
    failing = job_manifest(
        mainApplicationFile="local:///nowhere/job.py",
        inputs=[{"log": "dl-in"}],
        outputs=[{"log": "dl-out"}],
        deadLetters={"retention": "2d"},
    )
    cluster.apply({**failing, "metadata": {"name": "dl-job"}})
    made = waiting(operator, "the job's dead-letter topic", lambda: admin.describe_topic(topic))
    assert made.partitions == 3  # as its output's
    assert made.configs["cleanup.policy"] == "delete"
    assert made.configs["retention.ms"] == str(2 * 24 * 3600 * 1000)
    cluster.kubectl("delete", "dlog", "dl-out", "-n", NAMESPACE, "--timeout=60s")
    waiting(operator, "the dead-letter topic deleted", lambda: admin.describe_topic(topic) is None)
    assert admin.describe_topic("dl-in") is not None
    cluster.kubectl("delete", "sjob/dl-job", "dlog/dl-in", "-n", NAMESPACE, "--wait=true")
