"""The StreamJob controller with the `spark-operator` runtime on a real API server and broker.

A job becomes a Kubeflow SparkApplication owned by the job, running the job's own file with the
facts the operator injects (topics, bootstrap servers, checkpoint, consumer group) in its
environment. The Spark operator itself is not run (no kubelet runs here), so the test writes the
application's status as the Spark operator would. Edits follow the job's upgrade strategy:
InPlace re-applies the same revision, a change of inputs under InPlace is refused with a
condition that says what to do, Reprocess starts revision 2 and removes revision 1's
application. Deleting the job garbage-collects its application.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kube.operator_harness import (
    Cluster,
    Operator,
    condition,
    is_true,
    waiting,
)
from tests.integration.kube.spark_operator_bed import SPARK_CRDS

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.records import produce
from distributary.local.broker import EmbeddedBroker
from distributary.schema import RecordSchema

ROOT = Path(__file__).resolve().parents[3]
SPARK_CRD = SPARK_CRDS  # the release's CRDs, read from the Go module cache
SPARK_APPLICATION = "sparkapplications.sparkoperator.k8s.io"
NAMESPACE = "job-spark-test"
EXTRA_CRDS = (SPARK_CRD,)
OPERATOR_FLAGS = ("--spark-runtime", "spark-operator")
JOB = "enricher"
LOGS = [
    {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name},
        "spec": {"partitions": 2, "schema": "user STRING, url STRING"},
    }
    for name in ("js-clicks", "js-visits", "js-enriched")
]


def job_manifest(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "StreamJob",
        "metadata": {"name": JOB},
        "spec": {
            "image": "my-registry/enricher:1.0",
            "mainApplicationFile": "local:///app/enrich.py",
            "arguments": ["--mode", "fast"],
            "env": {"LOOKUP_URL": "http://lookup"},
            "inputs": [{"log": "js-clicks"}],
            "outputs": [{"log": "js-enriched"}],
            **spec,
        },
    }


def application(cluster: Cluster, revision: int) -> dict[str, Any] | None:
    return cluster.get(SPARK_APPLICATION, f"{JOB}-job-r{revision}")


def job(cluster: Cluster) -> dict[str, Any]:
    return cluster.get("sjob", JOB) or {}


def set_running(cluster: Cluster, revision: int) -> None:
    """Write the application's status as the Spark operator does once the driver runs."""
    status = {
        "applicationState": {"state": "RUNNING"},
        "driverInfo": {"podName": f"{JOB}-job-r{revision}-driver", "webUIPort": 4040},
        "submissionAttempts": 1,
    }
    name = f"{JOB}-job-r{revision}"
    cluster.kubectl(
        "patch", SPARK_APPLICATION, name, "-n", NAMESPACE, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip


def env_of(app: dict[str, Any]) -> dict[str, str]:
    return dict(app["spec"]["driver"].get("envVars") or {})


@pytest.fixture(scope="module")
def created(cluster: Cluster, operator: Operator) -> dict[str, Any]:
    """The job applied and its first application created."""
    cluster.apply(*LOGS, job_manifest())
    return dict(
        waiting(operator, f"SparkApplication {JOB}-job-r1", lambda: application(cluster, 1))
    )


def test_a_job_becomes_a_spark_application_running_its_own_file(
    created: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    owner = job(cluster)["metadata"]
    assert [(o["kind"], o["name"], o["uid"]) for o in created["metadata"]["ownerReferences"]] == [
        ("StreamJob", JOB, owner["uid"])
    ]
    spec = created["spec"]
    assert (spec["image"], spec["mainApplicationFile"], spec["arguments"]) == (
        "my-registry/enricher:1.0",
        "local:///app/enrich.py",
        ["--mode", "fast"],
    )
    env = env_of(created)
    assert env["LOOKUP_URL"] == "http://lookup"
    assert env["DISTRIBUTARY_INPUT_JS_CLICKS_TOPIC"] == "js-clicks"
    assert env["DISTRIBUTARY_OUTPUT_JS_ENRICHED_TOPIC"] == "js-enriched"
    assert env["DISTRIBUTARY_CONSUMER_GROUP"] == f"distributary.{NAMESPACE}.{JOB}.r1"
    assert env["DISTRIBUTARY_BOOTSTRAP_SERVERS"] == operator.bootstrap_servers
    assert (env["DISTRIBUTARY_NAMESPACE"], env["DISTRIBUTARY_NAME"]) == (NAMESPACE, JOB)
    assert env_of(created) == spec["executor"]["envVars"]


def test_the_job_is_ready_when_its_application_runs(
    created: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    starting = waiting(operator, "job Reconciling", lambda: condition(job(cluster), "Reconciling"))
    assert (starting["status"], starting["reason"]) == ("True", "Starting")
    set_running(cluster, 1)
    ready = waiting(operator, "job Ready", lambda: is_true(job(cluster), "Ready") or None)
    assert ready
    status = job(cluster)["status"]
    assert (status["revision"], status["consumerGroup"]) == (
        1,
        f"distributary.{NAMESPACE}.{JOB}.r1",
    )
    assert status["sparkApplication"]["state"] == "RUNNING"
    # Nothing was appended and nothing read: the job is caught up, at no position yet.
    assert [(i["log"], i["lag"]) for i in status["inputs"]] == [("js-clicks", 0)]

    def subscribers() -> list[dict[str, Any]]:
        found = ((cluster.get("dlog", "js-clicks") or {}).get("status") or {}).get("subscribers")
        # Listed first with its lag unknown (no key), then with the lag the job reports.
        return [s for s in found or [] if s["kind"] == "StreamJob" and "lag" in s]

    (subscriber,) = waiting(operator, "the job among the input log's subscribers", subscribers)
    assert (subscriber["name"], subscriber["revision"], subscriber["lag"]) == (JOB, 1, 0)


def test_an_in_place_edit_keeps_the_revision_and_updates_the_application(
    created: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    cluster.apply(job_manifest(arguments=["--mode", "careful"]))
    updated = waiting(
        operator,
        "the application's new arguments",
        lambda: (
            (app := application(cluster, 1))
            and app["spec"]["arguments"] == ["--mode", "careful"]
            and app
        ),
    )
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    # The status is written after the application: wait for this edit's record of the change.
    change = waiting(
        operator,
        "lastChange of this edit",
        lambda: (
            (c := job(cluster)["status"].get("lastChange"))
            and any("arguments changed" in r for r in c["reasons"])
            and c
        ),
    )
    assert change["classification"] == "RestartInPlace"
    assert job(cluster)["status"]["revision"] == 1


def test_an_edit_made_while_no_operator_ran_is_classified_against_the_spec_it_replaced(
    created: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    """What kopf last handled is kept in memory, and each finished reconcile records the spec it
    carried out in status (`status.handledSpec`), never in a write of its own: an operator that
    starts after an edit compares with that record, as the update handler would have. Without it
    the edit was an unknown change of definition ("the job's definition changed")."""

    def handled() -> bool:
        found = job(cluster)
        return json.loads((found.get("status") or {}).get("handledSpec") or "null") == found["spec"]

    waiting(operator, "the last edit recorded as carried out", handled)
    assert "distributary.dev/last-handled-configuration" not in (
        job(cluster)["metadata"].get("annotations") or {}
    )  # nothing but status holds the record
    operator.kill()
    cluster.apply(job_manifest(arguments=["--mode", "thorough"]))
    operator.start()

    def recorded() -> dict[str, Any] | None:
        found = job(cluster)
        change = (found.get("status") or {}).get("lastChange") or {}
        return change if change.get("generation") == found["metadata"]["generation"] else None

    change = waiting(operator, "lastChange of the edit made while no operator ran", recorded)
    assert change["classification"] == "RestartInPlace"
    assert any("arguments changed" in r for r in change["reasons"]), change
    app = application(cluster, 1)
    assert app is not None
    assert app["spec"]["arguments"] == ["--mode", "thorough"]
    assert app["metadata"]["uid"] == created["metadata"]["uid"]
    assert job(cluster)["status"]["revision"] == 1


def test_changing_the_inputs_in_place_is_refused_with_the_fix(
    created: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    cluster.apply(job_manifest(arguments=["--mode", "careful"], inputs=[{"log": "js-visits"}]))
    stalled = waiting(
        operator,
        "Stalled ChangeForbidden",
        lambda: (c := condition(job(cluster), "Stalled")) and c["status"] == "True" and c,
    )
    assert stalled["reason"] == "ChangeForbidden"
    assert "inputs changed (js-clicks -> js-visits)" in stalled["message"]
    assert "upgrade.strategy to Reprocess" in stalled["message"]
    # The running revision is left as it is.
    assert env_of(application(cluster, 1) or {})["DISTRIBUTARY_INPUT_JS_CLICKS_TOPIC"]
    assert job(cluster)["status"]["revision"] == 1


def test_under_reprocess_a_new_revision_replaces_the_old_application(
    created: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    cluster.apply(
        job_manifest(
            arguments=["--mode", "careful"],
            inputs=[{"log": "js-visits"}],
            upgrade={"strategy": "Reprocess"},
        )
    )
    second = waiting(operator, f"SparkApplication {JOB}-job-r2", lambda: application(cluster, 2))
    env = env_of(second)
    assert env["DISTRIBUTARY_CONSUMER_GROUP"] == f"distributary.{NAMESPACE}.{JOB}.r2"
    assert env["DISTRIBUTARY_CHECKPOINT_LOCATION"].endswith(f"/{JOB}/r2")
    assert "DISTRIBUTARY_INPUT_JS_VISITS_TOPIC" in env
    waiting(operator, "revision 1's application removed", lambda: application(cluster, 1) is None)
    set_running(cluster, 2)
    waiting(
        operator,
        "revision 2 Ready",
        lambda: job(cluster)["status"].get("revision") == 2 and is_true(job(cluster), "Ready"),
    )
    status = job(cluster)["status"]
    assert status["lastChange"]["classification"] == "Reprocess"
    assert [i["log"] for i in status["inputs"]] == ["js-visits"]
    assert condition(job(cluster), "Stalled") is None or (
        (condition(job(cluster), "Stalled") or {}).get("status") == "False"
    )


def test_a_rewind_moves_the_group_and_restarts_on_a_fresh_checkpoint(
    created: dict[str, Any], cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    schema = RecordSchema.parse("user STRING, url STRING", [])
    produce(broker.bootstrap_servers, "js-visits", [schema.encode({"user": "u", "url": "/"})] * 5)
    ends = KafkaAdmin(broker.bootstrap_servers).end_offsets(["js-visits"])["js-visits"]
    before = application(cluster, 2)
    assert before is not None
    rewind = {"requestId": "skip-backlog", "to": {"from": "Latest"}}
    spec = {
        "arguments": ["--mode", "careful"],
        "inputs": [{"log": "js-visits"}],
        "upgrade": {"strategy": "Reprocess"},
        "rewind": rewind,
    }
    cluster.apply(job_manifest(**spec))
    done = waiting(
        operator,
        "the rewind done",
        lambda: (r := job(cluster)["status"].get("lastRewind")) and r["phase"] == "Done" and r,
    )
    assert (done["requestId"], done["revision"]) == ("skip-backlog", 2)
    assert sorted((o["partition"], o["toOffset"]) for o in done["offsets"]) == sorted(ends.items())
    group = f"distributary.{NAMESPACE}.{JOB}.r2"
    assert KafkaAdmin(broker.bootstrap_servers).committed(group)["js-visits"] == ends
    after = waiting(operator, "revision 2's application again", lambda: application(cluster, 2))
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    location = env_of(after)["DISTRIBUTARY_CHECKPOINT_LOCATION"]
    assert location.endswith(f"/{JOB}/r2/rewind-skip-backlog")
    time.sleep(5)  # observer rounds: the same request is not carried out again
    again = application(cluster, 2)
    assert again is not None
    assert again["metadata"]["uid"] == after["metadata"]["uid"]


def test_a_job_writing_a_log_that_does_not_exist_stalls_and_names_it(
    cluster: Cluster, operator: Operator
) -> None:
    broken = job_manifest(outputs=[{"log": "js-nowhere"}])
    broken["metadata"]["name"] = "broken-job"
    cluster.apply(broken)

    def stalled() -> dict[str, Any] | None:
        found = condition(cluster.get("sjob", "broken-job"), "Stalled")
        return found if found and found["status"] == "True" else None

    found = waiting(operator, "broken job Stalled", stalled)
    assert "js-nowhere" in found["message"]
    assert cluster.get(SPARK_APPLICATION, "broken-job-job-r1") is None


def test_deleting_the_job_collects_its_application(
    created: dict[str, Any], cluster: Cluster, operator: Operator
) -> None:
    assert application(cluster, 2) is not None
    cluster.kubectl("delete", "sjob", JOB, "-n", NAMESPACE, "--wait=true")
    waiting(operator, "application garbage-collected", lambda: application(cluster, 2) is None)
