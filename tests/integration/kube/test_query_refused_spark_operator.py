"""A query Spark refused is not restarted under the `spark-operator` runtime, even when the
runner's report is read after its application is seen to have ended.

The runner whose query Spark refuses publishes QueryRefused and exits with code 0, so its
SparkApplication COMPLETES; the operator counts that and schedules a restart after the back-off.
Here the report reaches the progress topic only after the restart is due (a reader behind, a
slow publish): the operator reads the runner's report before it restarts an application that
ended without failing, sees that Spark refused this very spec, and does not restart it. The
view is Stalled naming spec.sql, and its application is never re-created. As in the other tests
of this runtime, the test writes the application's status as the Spark operator would, and the
runner's record as the runner would (`runner.main`).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from tests.integration.kube.operator_harness import Cluster, Operator, condition, waiting
from tests.integration.kube.test_view_spark_operator import SPARK_APPLICATION, SPARK_CRD

from distributary.kafka.progress import ProgressPublisher
from distributary.local.broker import EmbeddedBroker
from distributary.plan.applications.runner_spec import (
    RUNNER_SPEC_HASH,
    RunnerSpec,
    runner_spec_hash,
)
from distributary.plan.revisions.progress import PROGRESS_TOPIC, progress_key

NAMESPACE = "refused-spark-operator"
EXTRA_CRDS = (SPARK_CRD,)
FIRST = 3  # seconds of the first back-off
OPERATOR_FLAGS = ("--spark-runtime", "spark-operator", "--restart-delay", str(FIRST))
VIEW, APPLICATION = "rq-view", "rq-view-r1"
SAID = (
    'spec.sql: Spark refuses the query: Filter expression "amount" of type "INT" is not a '
    "boolean (DATATYPE_MISMATCH.FILTER_NOT_BOOLEAN)"
)
RESOURCES = [
    {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": "rq-clicks"},
        "spec": {"partitions": 1, "schema": "user STRING, amount INT"},
    },
    {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": VIEW},
        "spec": {
            "inputs": [{"log": "rq-clicks", "alias": "clicks"}],
            "sql": "SELECT user, amount FROM clicks WHERE amount",
            "output": {"mode": "append"},
        },
    },
]


def set_state(cluster: Cluster, state: str) -> None:
    """Write the application's status as the Spark operator does."""
    status = {
        "applicationState": {"state": state},
        "driverInfo": {"podName": f"{APPLICATION}-driver", "webUIPort": 4040},
        "submissionAttempts": 1,
    }
    cluster.kubectl(
        "patch", SPARK_APPLICATION, APPLICATION, "-n", NAMESPACE,
        "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip


def sparks(cluster: Cluster) -> dict[str, Any]:
    return dict(
        ((cluster.get("dview", VIEW) or {}).get("status") or {}).get("sparkApplication") or {}
    )


def test_a_refusal_reported_after_the_restart_is_due_holds_the_restart(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    cluster.apply(*RESOURCES)
    app = waiting(operator, APPLICATION, lambda: cluster.get(SPARK_APPLICATION, APPLICATION), 90)
    uid = app["metadata"]["uid"]
    arguments = app["spec"]["arguments"]
    spec = RunnerSpec.model_validate_json(arguments[arguments.index("--spec-json") + 1])
    set_state(cluster, "RUNNING")
    waiting(operator, "the view seen running", lambda: sparks(cluster).get("runningSince"))
    set_state(cluster, "COMPLETED")  # the runner exited with code 0: its query was refused
    due = waiting(operator, "the restart scheduled", lambda: sparks(cluster).get("restartAt"))
    late = datetime.fromisoformat(due.replace("Z", "+00:00")).timestamp() + 1.5
    time.sleep(max(late - datetime.now(UTC).timestamp(), 0))  # the restart is due by now
    record = {
        "kind": "DerivedView",
        "namespace": NAMESPACE,
        "name": VIEW,
        "revision": 1,
        "consumerGroup": spec.consumer_group,
        "checkpoint": spec.checkpoint_location,
        RUNNER_SPEC_HASH: runner_spec_hash(spec),
        "state": "QueryRefused",
        "error": SAID,
        "deadLetters": 0,
    }
    publisher = ProgressPublisher(broker.bootstrap_servers, PROGRESS_TOPIC)
    publisher.publish(progress_key("DerivedView", NAMESPACE, VIEW, 1), record)
    publisher.flush()
    stalled = waiting(
        operator,
        "the view Stalled on the refused query",
        lambda: (
            (c := condition(cluster.get("dview", VIEW), "Stalled")) is not None
            and c.get("reason") == "QueryRefused"
            and c
        ),
        60,
    )
    assert stalled["status"] == "True"
    assert "spec.sql" in stalled["message"]
    assert "FILTER_NOT_BOOLEAN" in stalled["message"]
    time.sleep(3 * FIRST)  # a restart, were there one, would come in this time
    again = cluster.get(SPARK_APPLICATION, APPLICATION)
    assert again is not None
    assert again["metadata"]["uid"] == uid  # never re-created
    found = sparks(cluster)
    assert (found.get("state"), found.get("restartAt")) == ("QueryRefused", None)
    assert condition(cluster.get("dview", VIEW), "Stalled")["reason"] == "QueryRefused"
