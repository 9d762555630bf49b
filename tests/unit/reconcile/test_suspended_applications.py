"""The spark-operator runtime keeps a suspended revision's SparkApplication manifest, and brings
the application back from it: a revision that serves beside a new one after an edit made while
the view was suspended runs what it ran, which the view's spec no longer says."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.unit.plan.test_spark_application import job_app, make_job

from distributary.backends.base import Owner
from distributary.backends.spark_operator import (
    SUSPENDED_KEY,
    SparkOperatorRuntime,
    WatchedApplications,
    as_applied,
    suspended_name,
)


class ObjectsKube:
    """Objects by (kind, namespace, name), as the API server keeps them; every request."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.journal: list[tuple[str, str, str]] = []

    def get(self, api: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.journal.append(("get", kind, name))
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        meta = manifest["metadata"]
        self.journal.append(("apply", manifest["kind"], meta["name"]))
        stored = copy.deepcopy(manifest)
        if manifest["kind"] == "SparkApplication":
            stored["status"] = {"applicationState": {"state": "RUNNING"}}
        stored["metadata"]["resourceVersion"] = str(len(self.journal))
        self.objects[(manifest["kind"], meta["namespace"], meta["name"])] = stored
        return copy.deepcopy(stored)

    def delete(self, api: str, kind: str, namespace: str, name: str) -> bool:
        self.journal.append(("delete", kind, name))
        return self.objects.pop((kind, namespace, name), None) is not None


def started() -> tuple[ObjectsKube, SparkOperatorRuntime, Owner, dict[str, Any]]:
    kube = ObjectsKube()
    runtime = SparkOperatorRuntime(kube, "dist/job:1", watched=WatchedApplications())  # type: ignore[arg-type]
    job = make_job()
    manifest = job_app(job)
    owner_ref = {"apiVersion": "distributary.dev/v1alpha1", "kind": "StreamJob", "uid": "u-1"}
    manifest["metadata"]["ownerReferences"] = [{**owner_ref, "name": job.metadata.name}]
    runtime.job_app(job, 2, None, manifest).start()
    owner = Owner("StreamJob", job.metadata.namespace, job.metadata.name)
    (app,) = [o for (kind, _, _), o in kube.objects.items() if kind == "SparkApplication"]
    return kube, runtime, owner, app


def test_a_suspended_revision_keeps_its_manifest_beside_it_and_its_application_goes() -> None:
    kube, runtime, owner, app = started()
    meta = app["metadata"]
    assert runtime.suspend(owner, [2]) == [2]
    assert ("SparkApplication", meta["namespace"], meta["name"]) not in kube.objects
    kept = kube.objects[("ConfigMap", meta["namespace"], suspended_name(meta["name"]))]
    assert json.loads(kept["data"][SUSPENDED_KEY]) == as_applied(app)
    # It goes with its view or job: the garbage collector follows the same owner.
    assert kept["metadata"]["ownerReferences"] == meta["ownerReferences"]


def test_keep_brings_a_suspended_revision_back_as_it_ran_once() -> None:
    kube, runtime, owner, app = started()
    meta = app["metadata"]
    runtime.suspend(owner, [2])
    runtime.keep(owner, [2])
    back = kube.objects[("SparkApplication", meta["namespace"], meta["name"])]
    assert as_applied(back) == as_applied(app)
    assert ("ConfigMap", meta["namespace"], suspended_name(meta["name"])) not in kube.objects
    kube.journal.clear()
    runtime.keep(owner, [2])  # running, as the watch holds it: nothing asked, nothing applied
    assert kube.journal == []


def test_keep_of_a_revision_never_suspended_applies_nothing() -> None:
    kube, runtime, owner, _ = started()
    runtime.stop(owner, [2])  # stopped for good (retired): no manifest kept
    kube.journal.clear()
    runtime.keep(owner, [2])
    assert [entry[0] for entry in kube.journal] == ["get"]


def test_a_kept_manifest_never_replaces_an_application_that_runs() -> None:
    kube, runtime, owner, app = started()
    meta = app["metadata"]
    runtime.suspend(owner, [2])
    runtime.job_app(make_job(), 2, None, job_app(make_job())).start()  # resumed from the spec
    assert runtime.watched is not None
    runtime.watched.gone(meta["namespace"], meta["name"])  # a watch that has not seen it yet
    kube.journal.clear()
    runtime.keep(owner, [2])
    assert not [entry for entry in kube.journal if entry[0] == "apply"]
    assert ("ConfigMap", meta["namespace"], suspended_name(meta["name"])) not in kube.objects
