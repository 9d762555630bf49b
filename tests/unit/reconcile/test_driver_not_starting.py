"""A revision whose driver pod the cluster cannot start (a Secret missing in its namespace, an
image that cannot be pulled): the view or job says why, warns once, and nothing is deleted or
restarted because of it; once the pod runs, the condition goes by itself."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from tests.unit.plan.test_spark_application import job_app, make_job
from tests.unit.reconcile import test_job_reconcile as jobs
from tests.unit.reconcile import test_view_reconcile as views
from tests.unit.reconcile.fakes import NS, Parts, parts
from tests.unit.reconcile.test_view_reconcile import log

from distributary.backends import spark_operator
from distributary.backends.spark_operator import SparkOperatorRuntime
from distributary.plan.applications.driver_pods import DRIVER_NOT_STARTING
from distributary.plan.status.conditions import Problem

STUCK = Problem(
    DRIVER_NOT_STARTING,
    f"revision 1's driver pod {NS}/x-driver does not start: CreateContainerConfigError: "
    f'secret "kafka-user" not found; create Secret kafka-user in namespace {NS}',
)


def conditions(p: Parts) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in p.store.status["conditions"]}


def view_run(p: Parts) -> None:
    views.run(p, views.view())


def job_run(p: Parts) -> None:
    jobs.run(p, jobs.job())


@pytest.mark.parametrize("run", [view_run, job_run], ids=["view", "job"])
def test_a_driver_that_cannot_start_is_said_once_and_clears_when_it_runs(
    run: Callable[[Parts], None],
) -> None:
    p = parts([log("clicks"), log("enriched")], [])
    run(p)
    assert conditions(p)["Ready"]["status"] == "True"
    p.runtime.stuck[1] = STUCK
    mark = len(p.journal)
    run(p)
    run(p)  # found again: not said again
    found = conditions(p)
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", DRIVER_NOT_STARTING)
    assert found["Stalled"]["reason"] == DRIVER_NOT_STARTING
    assert found["Ready"]["message"] == STUCK.message
    after = p.since(mark)
    assert [e for e in after if e[0] == "warning"] == [("warning", DRIVER_NOT_STARTING)]
    # The cluster's to fix: the application is left as it is, never removed nor started again.
    assert not [e for e in after if e[0] in ("remove", "start", "stop")]
    assert p.store.status["sparkApplication"]["state"] == "SUBMITTED"
    del p.runtime.stuck[1]  # the Secret made: the pod runs
    run(p)
    found = conditions(p)
    assert found["Ready"]["status"] == "True"
    assert "Stalled" not in found


class PodsKube:
    """A SparkApplication and its driver pod, as the API server keeps them; the reads."""

    def __init__(self, state: str, pod: dict[str, Any] | None) -> None:
        self.state, self.pod = state, pod
        self.app: dict[str, Any] | None = None
        self.journal: list[tuple[str, str]] = []

    def get(self, api: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.journal.append(("get", kind))
        if kind == "Pod":  # the driver of the application, once there is one
            return copy.deepcopy(self.pod) if self.app is not None else None
        return copy.deepcopy(self.app)

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.journal.append(("apply", manifest["metadata"]["name"]))
        self.app = {
            **copy.deepcopy(manifest),
            "status": {"applicationState": {"state": self.state}},
        }
        return copy.deepcopy(self.app)

    def delete(self, api: str, kind: str, namespace: str, name: str) -> bool:
        self.journal.append(("delete", name))
        return True


def waiting_pod(reason: str, message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "sessionize-job-r2-driver", "namespace": NS},
        "spec": {"containers": [{"name": "spark", "image": "registry/s:1"}]},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "spark", "state": {"waiting": {"reason": reason, "message": message}}}
            ],
        },
    }


def test_the_spark_operator_runtime_reads_the_driver_pod_of_a_submitted_application() -> None:
    kube = PodsKube(
        "SUBMITTED", waiting_pod("CreateContainerConfigError", 'secret "kafka-user" not found')
    )
    runtime = SparkOperatorRuntime(kube, "dist/job:1")  # type: ignore[arg-type]
    job = make_job()
    started = runtime.job_app(job, 2, None, job_app(job)).start()  # applied, then its pod read
    assert started.not_starting is not None
    assert started.not_starting.reason == DRIVER_NOT_STARTING
    assert "revision 2's driver pod" in started.not_starting.message
    kube.journal.clear()
    again = runtime.job_app(job, 2, None, job_app(job))
    seen = again.state()
    assert again.start() == seen  # as it was read: nothing applied, the pod not read again
    assert kube.journal == [("get", "SparkApplication"), ("get", "Pod")]
    assert seen.not_starting == started.not_starting


@pytest.mark.parametrize(
    ("state", "pod"),
    [
        ("SUBMITTED", None),  # not made yet
        ("SUBMITTED", waiting_pod("ContainerCreating", "")),
        ("RUNNING", waiting_pod("ImagePullBackOff", "never read")),
        ("FAILED", waiting_pod("ImagePullBackOff", "never read")),
    ],
)
def test_a_driver_that_starts_or_is_not_made_yet_is_no_problem(
    state: str, pod: dict[str, Any] | None
) -> None:
    kube = PodsKube(state, pod)
    runtime = SparkOperatorRuntime(kube, "dist/job:1")  # type: ignore[arg-type]
    job = make_job()
    runtime.job_app(job, 2, None, job_app(job)).start()
    kube.journal.clear()
    assert runtime.job_app(job, 2, None, job_app(job)).state().not_starting is None
    assert (("get", "Pod") in kube.journal) == (state == "SUBMITTED")


class LeftoverKube(PodsKube):
    """No application, and the driver pod a deleted one left, gone after `reads` reads."""

    def __init__(self, reads: int) -> None:
        super().__init__("SUBMITTED", waiting_pod("", ""))
        self.reads = reads

    def get(self, api: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "Pod" and self.app is None:
            self.journal.append(("get", kind))
            self.reads -= 1
            return copy.deepcopy(self.pod) if self.reads >= 0 else None
        return super().get(api, kind, namespace, name)


def test_an_application_applied_afresh_waits_until_the_old_driver_pod_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A pod of the same name would make the Spark operator's submission fail.
    monkeypatch.setattr(spark_operator, "DRIVER_GONE_POLL", 0.01)
    kube = LeftoverKube(reads=2)
    runtime = SparkOperatorRuntime(kube, "dist/job:1")  # type: ignore[arg-type]
    job = make_job()
    runtime.job_app(job, 2, None, job_app(job)).start()
    assert [e for e in kube.journal if e != ("get", "SparkApplication")][:4] == [
        ("get", "Pod"), ("get", "Pod"), ("get", "Pod"), ("apply", "sessionize-job-r2"),
    ]  # fmt: skip


def test_a_driver_pod_that_stays_is_waited_for_only_so_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spark_operator, "DRIVER_GONE_POLL", 0.01)
    monkeypatch.setattr(spark_operator, "DRIVER_GONE_WAIT", 0.1)
    kube = LeftoverKube(reads=10_000)
    runtime = SparkOperatorRuntime(kube, "dist/job:1")  # type: ignore[arg-type]
    job = make_job()
    runtime.job_app(job, 2, None, job_app(job)).start()
    assert ("apply", "sessionize-job-r2") in kube.journal
