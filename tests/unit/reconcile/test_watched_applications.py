"""The spark-operator runtime reads the SparkApplications the operator's watch holds instead of
asking the API server again; what the watch does not hold (not seen yet, deleted) is read.

With 300 views, every reconcile that read its application again (on each change of its state and
in every observe round) cost the API server a request: 665 reads while the views turned Ready."""

from __future__ import annotations

import asyncio
import copy
from types import SimpleNamespace
from typing import Any

import kopf
from tests.unit.plan.test_spark_application import job_app, make_job
from tests.unit.reconcile.test_driver_not_starting import PodsKube

from distributary.backends.spark_operator import SparkOperatorRuntime, WatchedApplications
from distributary.controllers import observer


def reads(kube: PodsKube) -> list[tuple[str, str]]:
    return [entry for entry in kube.journal if entry[0] == "get"]


def test_an_application_the_watch_holds_is_not_read_again() -> None:
    kube, watched = PodsKube("RUNNING", None), WatchedApplications()
    runtime = SparkOperatorRuntime(kube, "dist/job:1", watched=watched)  # type: ignore[arg-type]
    job = make_job()
    app = runtime.job_app(job, 2, None, job_app(job))
    assert app.state().state == "ABSENT"  # not held: asked
    app.start()  # applied; the answer is held
    kube.journal.clear()
    again = runtime.job_app(job, 2, None, job_app(job))
    assert again.state().state == "RUNNING"
    assert again.start().state == "RUNNING"  # as held: nothing applied
    assert kube.journal == []


def test_a_deleted_application_is_read_again_and_started() -> None:
    kube, watched = PodsKube("RUNNING", None), WatchedApplications()
    runtime = SparkOperatorRuntime(kube, "dist/job:1")  # type: ignore[arg-type]
    job = make_job()
    runtime.job_app(job, 2, None, job_app(job)).start()
    assert kube.app is not None
    watched.saw(kube.app)  # the watch saw it; then it was deleted
    watched.gone(kube.app["metadata"]["namespace"], kube.app["metadata"]["name"])
    kube.app = None
    runtime = SparkOperatorRuntime(kube, "dist/job:1", watched=watched)  # type: ignore[arg-type]
    app = runtime.job_app(job, 2, None, job_app(job))
    assert app.state().state == "ABSENT"
    assert ("get", "SparkApplication") in reads(kube)
    assert app.start().state == "RUNNING"
    assert kube.app is not None


def test_stopping_a_revision_forgets_its_application() -> None:
    kube, watched = PodsKube("RUNNING", None), WatchedApplications()
    runtime = SparkOperatorRuntime(kube, "dist/job:1", watched=watched)  # type: ignore[arg-type]
    job = make_job()
    app = runtime.job_app(job, 2, None, job_app(job))
    app.start()
    assert kube.app is not None
    meta = kube.app["metadata"]
    app.remove()
    assert watched.get(meta["namespace"], meta["name"]) is None


def event(app: dict[str, Any], state: str, version: str) -> kopf.Body:
    seen = copy.deepcopy(app)
    seen["metadata"]["resourceVersion"] = version
    seen["status"] = {"applicationState": {"state": state}}
    return kopf.Body(seen)


def test_only_news_reconciles_the_owner(monkeypatch: Any) -> None:
    """The operator's own apply is held at once: the watch's event for it is no news, and an
    event older than what is held changes nothing; a new state reconciles the owner."""
    kube, watched = PodsKube("", None), WatchedApplications()
    runtime = SparkOperatorRuntime(kube, "dist/job:1", watched=watched)  # type: ignore[arg-type]
    job = make_job()
    kube.apply = lambda manifest: {  # type: ignore[method-assign]
        **copy.deepcopy(manifest),
        "metadata": {**manifest["metadata"], "resourceVersion": "10"},
    }
    runtime.job_app(job, 2, None, job_app(job)).start()
    app = watched.get(job.metadata.namespace, "sessionize-job-r2")
    assert app is not None
    app = {**app, "metadata": {**app["metadata"], "ownerReferences": []}}
    nudged: list[str] = []

    async def observe(services: Any, item: Any, indexes: Any, wait: bool = False) -> bool:
        nudged.append(item["metadata"]["name"])
        return True

    monkeypatch.setattr(observer, "_observe", observe)
    memo = SimpleNamespace(services=SimpleNamespace(applications=watched))
    owner = {"kind": "StreamJob", "name": job.metadata.name, "controller": True}
    app["metadata"]["ownerReferences"] = [owner]
    jobs = {"jobs_by_namespace": {job.metadata.namespace: [{"metadata": {"name": owner["name"]}}]}}

    def changed(body: kopf.Body) -> None:
        asyncio.run(observer.application_changed(body, "MODIFIED", memo, **jobs))  # type: ignore[arg-type]

    changed(event(app, "", "10"))  # the operator's own apply, seen by the watch
    changed(event(app, "SUBMITTED", "9"))  # older than what is held
    assert nudged == []
    changed(event(app, "RUNNING", "11"))
    assert nudged == [owner["name"]]
    assert watched.state(job.metadata.namespace, "sessionize-job-r2") == "RUNNING"
