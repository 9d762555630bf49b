"""Crash loops back off under the `spark-operator` runtime, for a view and a job alike.

An application that reaches RUNNING and then fails, again and again, is restarted after a
growing back-off, and after a few failures within the window its view or job is Stalled
(`ApplicationFailing`, naming the last error and the next retry) while the retries go on at the
longest back-off; once it runs stably, Stalled clears. The history lives in the resource's
status, so an operator killed while a restart is due restarts it when it is due, not at once,
and goes on counting. The Spark operator itself is not run (no kubelet runs here): the test
writes each application's status as it would, RUNNING then FAILED, through the status
subresource. The operator runs with a small restart policy (seconds instead of minutes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from tests.integration.kube.operator_harness import (
    Cluster,
    Operator,
    condition,
    is_true,
    waiting,
)
from tests.integration.kube.test_view_spark_operator import SPARK_APPLICATION, SPARK_CRD

NAMESPACE = "crash-loop"
EXTRA_CRDS = (SPARK_CRD,)
FIRST, LONGEST, STABLE, STALLED_AFTER = 2, 12, 20, 3
OPERATOR_FLAGS = (
    "--spark-runtime", "spark-operator",
    "--restart-delay", str(FIRST),
    "--max-restart-delay", str(LONGEST),
    "--stable-after", str(STABLE),
    "--failure-window", "600",
    "--failures-before-stalled", str(STALLED_AFTER),
)  # fmt: skip
LOGS = [
    {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name},
        "spec": {"partitions": 1, "schema": "user STRING, amount INT"},
    }
    for name in ("cl-clicks", "cl-enriched")
]
VIEW = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": "cl-view"},
    "spec": {
        "inputs": [{"log": "cl-clicks", "alias": "clicks"}],
        "sql": "SELECT user, amount FROM clicks",
        "output": {"mode": "append"},
    },
}
JOB = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "StreamJob",
    "metadata": {"name": "cl-job"},
    "spec": {
        "image": "my-registry/enricher:1.0",
        "mainApplicationFile": "local:///app/enrich.py",
        "inputs": [{"log": "cl-clicks"}],
        "outputs": [{"log": "cl-enriched"}],
    },
}


@dataclass(frozen=True)
class Target:
    """A view or job, and its revision's SparkApplication."""

    kind: str
    name: str
    application: str

    def body(self, cluster: Cluster) -> dict[str, Any]:
        return cluster.get(self.kind, self.name) or {}

    def record(self, cluster: Cluster) -> dict[str, Any]:
        """What the status says of the application: its restart history."""
        return dict((self.body(cluster).get("status") or {}).get("sparkApplication") or {})

    def app(self, cluster: Cluster) -> dict[str, Any] | None:
        return cluster.get(SPARK_APPLICATION, self.application)

    def set_state(self, cluster: Cluster, state: str, error: str | None = None) -> None:
        """Write the application's status as the Spark operator does."""
        applied = {"state": state, **({"errorMessage": error} if error else {})}
        status = {
            "applicationState": applied,
            "driverInfo": {"podName": f"{self.application}-driver", "webUIPort": 4040},
            "submissionAttempts": 1,
        }
        cluster.kubectl(
            "patch", SPARK_APPLICATION, self.application, "-n", NAMESPACE,
            "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip


VIEW_TARGET = Target("dview", "cl-view", "cl-view-r1")
JOB_TARGET = Target("sjob", "cl-job", "cl-job-job-r1")


def seconds(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def stalled(cluster: Cluster, target: Target) -> dict[str, Any] | None:
    found = condition(target.body(cluster), "Stalled")
    return found if found and found["status"] == "True" else None


def run_then_fail(
    cluster: Cluster, operator: Operator, target: Target, n: int
) -> tuple[str, dict[str, Any]]:
    """The application made RUNNING (and seen running by the operator), then FAILED with error
    number `n`; the application's uid and the status once the operator counted the failure."""
    app = waiting(operator, f"{target.application} (run {n})", lambda: target.app(cluster))
    target.set_state(cluster, "RUNNING")
    waiting(
        operator,
        f"{target.name} seen running (run {n})",
        lambda: target.record(cluster).get("runningSince"),
    )
    target.set_state(cluster, "FAILED", f"driver OOMKilled ({n})")
    record = waiting(
        operator,
        f"failure {n} of {target.name} counted",
        lambda: (
            (r := target.record(cluster))
            and f"OOMKilled ({n})" in (r.get("lastError") or "")
            and r.get("restartAt")
            and r
        ),
    )
    return str(app["metadata"]["uid"]), record


def restarted(
    cluster: Cluster, operator: Operator, target: Target, uid: str, record: dict[str, Any]
) -> dict[str, Any]:
    """The application once re-created after its back-off: never before its due time."""
    again = waiting(
        operator,
        f"{target.application} re-created after its back-off",
        lambda: (app := target.app(cluster)) and app["metadata"]["uid"] != uid and app,
        timeout=LONGEST + 30,
    )
    created = seconds(again["metadata"]["creationTimestamp"])
    assert created >= seconds(record["restartAt"]), (created, record)
    return dict(again)


def back_off(record: dict[str, Any]) -> float:
    """Seconds from the last failure to the restart due (status keeps whole seconds, and rounds
    the due time up)."""
    return (seconds(record["restartAt"]) - seconds(record["failures"][-1])).total_seconds()


def grew(delays: list[float], expected: list[int]) -> bool:
    """The back-offs are the expected ones (each may be a second longer: rounded up)."""
    return len(delays) == len(expected) and all(
        low <= delay <= low + 1 for delay, low in zip(delays, expected, strict=True)
    )


@pytest.fixture(scope="module")
def applied(cluster: Cluster, operator: Operator) -> None:
    cluster.apply(*LOGS, VIEW, JOB)
    for target in (VIEW_TARGET, JOB_TARGET):
        waiting(operator, f"SparkApplication {target.application}", lambda t=target: t.app(cluster))


def test_a_view_that_keeps_failing_backs_off_stalls_retries_and_recovers(
    applied: None, cluster: Cluster, operator: Operator
) -> None:
    target = VIEW_TARGET
    delays = []
    for n in (1, 2):
        uid, record = run_then_fail(cluster, operator, target, n)
        delays.append(back_off(record))
        assert (record["attempts"], len(record["failures"])) == (n, n)
        restarting = condition(target.body(cluster), "Reconciling") or {}
        assert restarting.get("reason") == "Restarting", restarting
        assert stalled(cluster, target) is None
        restarted(cluster, operator, target, uid, record)
    # The third failure within the window: Stalled, naming the last error and the next retry.
    uid, record = run_then_fail(cluster, operator, target, 3)
    delays.append(back_off(record))
    found = waiting(operator, "the view Stalled", lambda: stalled(cluster, target))
    assert found["reason"] == "ApplicationFailing"
    assert "failed 3 times within 10m" in found["message"]
    assert "driver OOMKilled (3)" in found["message"]
    assert f"the next retry is at {record['restartAt']}" in found["message"]
    ready = condition(target.body(cluster), "Ready") or {}
    assert (ready.get("status"), ready.get("reason")) == ("False", "ApplicationFailing")
    assert condition(target.body(cluster), "Reconciling") is None
    # The operator dies while the restart waits: the one that replaces it reads the history
    # from status, restarts the application when it is due (not at once) and goes on counting.
    operator.kill()
    operator.start()
    restarted(cluster, operator, target, uid, record)
    assert stalled(cluster, target) is not None  # restarted, not yet running stably
    uid, record = run_then_fail(cluster, operator, target, 4)
    delays.append(back_off(record))
    assert (record["attempts"], len(record["failures"])) == (4, 4)
    # Doubling from the first delay, then (Stalled) the longest.
    assert grew(delays, [FIRST, 2 * FIRST, LONGEST, LONGEST]), delays
    waiting(
        operator,
        "Stalled naming the fourth error",
        lambda: "driver OOMKilled (4)" in (stalled(cluster, target) or {}).get("message", ""),
    )
    # The retries go on at the cap; once the application runs stably, Stalled clears.
    restarted(cluster, operator, target, uid, record)
    target.set_state(cluster, "RUNNING")
    waiting(
        operator,
        "the view Ready again after a stable run",
        lambda: is_true(target.body(cluster), "Ready") and stalled(cluster, target) is None,
        timeout=STABLE + 30,
    )
    cleared = target.record(cluster)
    assert cleared["attempts"] == 0
    assert "failures" not in cleared
    assert "driver OOMKilled (4)" in cleared["lastError"]


def test_a_job_that_keeps_failing_backs_off_stalls_and_retries(
    applied: None, cluster: Cluster, operator: Operator
) -> None:
    target = JOB_TARGET
    delays = []
    for n in range(1, STALLED_AFTER + 1):
        uid, record = run_then_fail(cluster, operator, target, n)
        delays.append(back_off(record))
        if n < STALLED_AFTER:
            restarted(cluster, operator, target, uid, record)
    assert grew(delays, [FIRST, 2 * FIRST, LONGEST]), delays
    found = waiting(operator, "the job Stalled", lambda: stalled(cluster, target))
    assert found["reason"] == "ApplicationFailing"
    assert "driver OOMKilled (3)" in found["message"]
    assert (condition(target.body(cluster), "Ready") or {}).get("status") == "False"
    # Stalled, the job is still retried, at the longest back-off.
    restarted(cluster, operator, target, uid, record)
    assert stalled(cluster, target) is not None
