"""While an edit of a StreamJob is refused (a later revision's starting position its input does
not have, a change Spark cannot restore), the running revision is still supervised: its
application, ended, is restarted after its back-off as it last ran, by both runtimes, although
the refused plan has no launch of its own to give."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from tests.unit.plan.test_spark_application import job_app, make_job
from tests.unit.reconcile import test_job_reconcile as jobs
from tests.unit.reconcile.fakes import parts
from tests.unit.reconcile.test_view_reconcile import log

from distributary.backends.local_spark import LocalRuntime, LocalSparkRuntime
from distributary.backends.spark_operator import SparkOperatorRuntime
from distributary.plan.applications.spark_state import AppState
from distributary.reconcile.ports import TryAgain


class ApplicationsKube:
    """SparkApplications by name, as the API server keeps them (with a status)."""

    def __init__(self) -> None:
        self.apps: dict[str, dict[str, Any]] = {}
        self.journal: list[tuple[str, str]] = []

    def get(self, api: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.apps.get(name))

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        name = manifest["metadata"]["name"]
        self.journal.append(("apply", name))
        self.apps[name] = {**copy.deepcopy(manifest), "status": {}}
        return copy.deepcopy(self.apps[name])

    def delete(self, api: str, kind: str, namespace: str, name: str) -> bool:
        self.journal.append(("delete", name))
        return self.apps.pop(name, None) is not None


def test_the_spark_operator_runtime_applies_an_ended_application_again_as_it_was() -> None:
    kube = ApplicationsKube()
    runtime = SparkOperatorRuntime(kube, "dist/job:1")  # type: ignore[arg-type]
    job = make_job()
    runtime.job_app(job, 2, None, job_app(job)).start()
    (name,) = kube.apps
    first = copy.deepcopy(kube.apps[name])
    kube.apps[name]["status"] = {"applicationState": {"state": "FAILED"}}
    kube.apps[name]["metadata"]["uid"] = "given-by-the-server"
    refused = runtime.job_app(job, 2, None, None)  # an edit refused: no manifest of its own
    assert refused.state().ended
    refused.remove()
    refused.start()
    assert kube.journal[-2:] == [("delete", name), ("apply", name)]
    assert kube.apps[name]["spec"] == first["spec"]
    assert kube.apps[name]["metadata"] == first["metadata"]


def test_the_spark_operator_runtime_leaves_a_running_application_alone() -> None:
    kube = ApplicationsKube()
    runtime = SparkOperatorRuntime(kube, "dist/job:1")  # type: ignore[arg-type]
    job = make_job()
    runtime.job_app(job, 2, None, job_app(job)).start()
    kube.journal.clear()
    refused = runtime.job_app(job, 2, None, None)
    refused.state()
    refused.start()
    assert kube.journal == []


def test_the_local_runtime_starts_an_ended_process_again_on_the_spec_it_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalRuntime(tmp_path)
    started: list[tuple[Path, str, str]] = []

    def ensure(app: Any, wanted: str, module: str) -> AppState:
        started.append((app.folder, wanted, module))
        return AppState("SUBMITTED")

    monkeypatch.setattr(local, "_ensure", ensure)
    job = make_job()
    folder = local.job("shop", "sessionize", 2)
    folder.folder.mkdir(parents=True)
    folder.spec_file.write_text('{"revision": 2}')
    LocalSparkRuntime(local).job_app(job, 2, None, None).start()
    assert started == [(folder.folder, '{"revision": 2}', "distributary.runner.job")]
    started.clear()
    LocalSparkRuntime(local).job_app(job, 3, None, None).start()  # never ran here: nothing
    assert started == []


def test_a_job_whose_later_revision_is_refused_restarts_the_running_one_when_it_ends() -> None:
    p = parts([log("clicks"), log("enriched")], [])
    p.admin.ends = {"clicks": 50}
    reprocess = {"upgrade": {"strategy": "Reprocess"}}
    jobs.run(p, jobs.job(**reprocess))
    bad = {"from": "Offsets", "offsets": {"7": 0}}
    edited = jobs.job(2, image="registry/enrich:2", **reprocess)
    edited["spec"]["inputs"] = [{"log": "clicks", "startingPosition": bad}]
    jobs.run(p, edited)
    p.runtime.failing.add(1)
    with pytest.raises(TryAgain):  # seen ended: restarted after its back-off
        jobs.run(p, edited)
    p.store.saved["sparkApplication"]["restartAt"] = "2000-01-01T00:00:00Z"
    mark = len(p.journal)
    jobs.run(p, edited)
    after = p.since(mark)
    assert after.index(("remove", 1)) < after.index(("start", 1))
    assert ("start", 2) not in after
    assert p.runtime.running == {"enrich-job-r1": 1}
    stalled = next(c for c in p.store.status["conditions"] if c["type"] == "Stalled")
    assert stalled["reason"] == "StartingPositionRefused"
