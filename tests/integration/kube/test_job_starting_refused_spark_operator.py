"""A StreamJob's later revision that would start where its input has no such place is refused,
and the running revision runs on: real API server and broker, `spark-operator` runtime.

Under `upgrade.strategy: Reprocess`, an edit of what the job runs starts revision 2 from its
inputs' starting positions. While records keep arriving, the job is edited to start revision 2
at a partition its input does not have, then at a time no record has reached: each edit is
refused with reason StartingPositionRefused naming the field, no application of revision 2 is
made, and revision 1's application is left exactly as it was (the same object), its status
kept. Revision 1 is still supervised: when its application fails, it is made again as it was
after its back-off, although the refused plan has no manifest of its own. A corrected starting
position then starts revision 2 and retires revision 1. As in the other tests of this runtime,
the test writes the applications' status as the Spark operator would.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import count
from typing import Any

import pytest
from tests.integration.kube.operator_harness import (
    Cluster,
    Operator,
    condition,
    is_true,
    wait_for,
    waiting,
)
from tests.integration.kube.test_job_spark_operator import SPARK_APPLICATION, SPARK_CRD

from distributary.kafka.records import produce
from distributary.local.broker import EmbeddedBroker
from distributary.schema import RecordSchema

NAMESPACE = "job-starting-refused"
EXTRA_CRDS = (SPARK_CRD,)
FIRST = 2  # seconds of the first back-off
OPERATOR_FLAGS = ("--spark-runtime", "spark-operator", "--restart-delay", str(FIRST))
JOB, INPUT, OUTPUT = "sr-job", "sr-clicks", "sr-enriched"
SCHEMA = "user STRING, url STRING"
LOGS = [
    {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name},
        "spec": {"partitions": 2, "schema": SCHEMA},
    }
    for name in (INPUT, OUTPUT)
]


def job_manifest(image: str, position: dict[str, Any] | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"log": INPUT}
    if position is not None:
        item["startingPosition"] = position
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "StreamJob",
        "metadata": {"name": JOB},
        "spec": {
            "image": image,
            "mainApplicationFile": "local:///app/enrich.py",
            "inputs": [item],
            "outputs": [{"log": OUTPUT}],
            "upgrade": {"strategy": "Reprocess"},
        },
    }


def application(cluster: Cluster, revision: int) -> dict[str, Any] | None:
    return cluster.get(SPARK_APPLICATION, f"{JOB}-job-r{revision}")


def job(cluster: Cluster) -> dict[str, Any]:
    return cluster.get("sjob", JOB) or {}


def set_state(cluster: Cluster, revision: int, state: str) -> None:
    """Write the application's status as the Spark operator does."""
    status = {
        "applicationState": {"state": state},
        "driverInfo": {"podName": f"{JOB}-job-r{revision}-driver", "webUIPort": 4040},
        "submissionAttempts": 1,
    }
    cluster.kubectl(
        "patch", SPARK_APPLICATION, f"{JOB}-job-r{revision}", "-n", NAMESPACE,
        "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip


def refused_with(cluster: Cluster, said: str) -> dict[str, Any] | None:
    found = condition(job(cluster), "Stalled")
    if found and found["status"] == "True" and said in found.get("message", ""):
        return found
    return None


@pytest.fixture(scope="module")
def arriving(cluster: Cluster, operator: Operator, broker: EmbeddedBroker) -> Iterator[list[int]]:
    """The Logs made, and records appended to the input all along; the count so far."""
    cluster.apply(*LOGS)
    for name in (INPUT, OUTPUT):
        waiting(
            operator, f"Log {name} Ready", lambda n=name: is_true(cluster.get("dlog", n), "Ready")
        )
    schema = RecordSchema.parse(SCHEMA, [])
    stop, sent = threading.Event(), [0]
    numbers = count()

    def keep_appending() -> None:
        while not stop.wait(0.2):
            record = {"user": f"u{next(numbers) % 3}", "url": "/"}
            produce(broker.bootstrap_servers, INPUT, [schema.encode(record)])
            sent[0] += 1

    thread = threading.Thread(target=keep_appending, daemon=True)
    thread.start()
    yield sent
    stop.set()
    thread.join(10)


@pytest.fixture(scope="module")
def running(cluster: Cluster, operator: Operator, arriving: list[int]) -> dict[str, Any]:
    """Revision 1 applied and running, records arriving; its application and status."""
    cluster.apply(job_manifest("my-registry/enricher:1.0"))
    first = waiting(operator, "revision 1's application", lambda: application(cluster, 1), 90)
    set_state(cluster, 1, "RUNNING")
    waiting(operator, "the job Ready", lambda: is_true(job(cluster), "Ready") or None)
    return {"app": first, "status": job(cluster)["status"]}


@pytest.mark.parametrize(
    ("position", "said"),
    [
        (
            {"from": "Offsets", "offsets": {"5": 0}},
            f"spec.inputs[0].startingPosition.offsets names partition 5, but log {INPUT} has 2 "
            "partitions (0 to 1)",
        ),
        (
            {"from": "Timestamp", "timestamp": "2099-01-01T00:00:00Z"},
            "spec.inputs[0].startingPosition.timestamp is 2099-01-01T00:00:00.000Z, but no record",
        ),
    ],
)
def test_the_later_revision_is_refused_and_the_running_one_left_as_it_is(
    running: dict[str, Any],
    cluster: Cluster,
    operator: Operator,
    broker: EmbeddedBroker,
    position: dict[str, Any],
    said: str,
) -> None:
    cluster.apply(job_manifest("my-registry/enricher:2.0", position))
    stalled = waiting(operator, "the edit refused", lambda: refused_with(cluster, said), 60)
    assert stalled["reason"] == "StartingPositionRefused"
    assert stalled["message"].startswith("revision 2 does not start: ")
    assert "revision 1 runs on unchanged" in stalled["message"]
    time.sleep(4)  # observer rounds look at the refused edit again
    assert application(cluster, 2) is None
    now = application(cluster, 1)
    assert now is not None
    assert now["metadata"]["uid"] == running["app"]["metadata"]["uid"]
    assert now["spec"] == running["app"]["spec"]  # still revision 1's image and checkpoint
    status = job(cluster)["status"]
    kept = ("revision", "specHash", "consumerGroup")
    assert {k: status[k] for k in kept} == {k: running["status"][k] for k in kept}
    assert [i["log"] for i in status["inputs"]] == [INPUT]


def test_the_running_revision_is_restarted_as_it_was_while_the_edit_is_refused(
    running: dict[str, Any], cluster: Cluster, operator: Operator, arriving: list[int]
) -> None:
    set_state(cluster, 1, "FAILED")
    again = waiting(
        operator,
        "revision 1's application made again after its back-off",
        lambda: (
            (app := application(cluster, 1))
            and app["metadata"]["uid"] != running["app"]["metadata"]["uid"]
            and app
        ),
        FIRST + 40,
    )
    assert again["spec"] == running["app"]["spec"]
    assert again["metadata"]["ownerReferences"] == running["app"]["metadata"]["ownerReferences"]
    assert application(cluster, 2) is None
    assert condition(job(cluster), "Stalled")["reason"] == "StartingPositionRefused"
    running["app"] = again


def test_a_corrected_starting_position_starts_revision_2(
    running: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    moment = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    time.sleep(2)  # records reach that time meanwhile
    cluster.apply(
        job_manifest("my-registry/enricher:2.0", {"from": "Timestamp", "timestamp": moment})
    )
    second = waiting(operator, "revision 2's application", lambda: application(cluster, 2), 60)
    assert second["spec"]["image"] == "my-registry/enricher:2.0"
    waiting(operator, "revision 1's application removed", lambda: application(cluster, 1) is None)
    set_state(cluster, 2, "RUNNING")
    waiting(
        operator,
        "revision 2 Ready",
        lambda: job(cluster)["status"].get("revision") == 2 and is_true(job(cluster), "Ready"),
    )
    found = condition(job(cluster), "Stalled")
    assert found is None or found["status"] == "False"


def test_records_arrived_all_along(arriving: list[int]) -> None:
    """The appender ran through every test above and still appends: the tests before may take
    less than the 10 s that 50 records take (two test workers finish them sooner), so it is
    given the time."""
    before = arriving[0]
    wait_for(
        "50 records appended, and more after the tests",
        lambda: arriving[0] >= max(50, before + 5),
        60,
    )
