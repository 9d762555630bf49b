"""A job is planned without the Logs being deleted: it makes the dead-letter topic of the Log it
writes, and would otherwise make again the topic that Log's deletion has just removed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from distributary.controllers.handling import Namespace
from distributary.controllers.settings import OperatorSettings
from distributary.graph import Ref


def log(name: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "shop", "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-24T23:00:00Z"
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": meta,
        "spec": {"schema": "user STRING", "deletionPolicy": "Delete"},
    }


JOB = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "StreamJob",
    "metadata": {"name": "shout", "namespace": "shop", "resourceVersion": "1"},
    "spec": {
        "image": "spark:job",
        "mainApplicationFile": "local:///job.py",
        "inputs": [{"log": "clicks"}],
        "outputs": [{"log": "shouts"}],
    },
}
VIEW = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": "users", "namespace": "shop", "resourceVersion": "1"},
    "spec": {"inputs": [{"log": "shouts", "alias": "s"}], "sql": "SELECT user FROM s"},
}


def namespace(*logs: dict[str, Any]) -> Namespace:
    services = SimpleNamespace(settings=OperatorSettings(bootstrap_servers="k:9092"))
    indexes = {"logs": {"shop": list(logs)}, "views": {"shop": [VIEW]}, "jobs": {"shop": [JOB]}}
    return Namespace(cast(Any, services), indexes)


def test_a_job_does_not_see_the_log_it_writes_while_that_log_is_deleted() -> None:
    logs = namespace(log("clicks"), log("shouts", deleting=True)).lineage(JOB).pipeline.logs
    assert Ref.log("clicks", "shop") in logs
    assert Ref.log("shouts", "shop") not in logs


def test_a_job_sees_the_log_it_writes_while_it_lives() -> None:
    logs = namespace(log("clicks"), log("shouts")).lineage(JOB).pipeline.logs
    assert Ref.log("shouts", "shop") in logs


def test_a_view_still_sees_a_log_being_deleted() -> None:
    logs = namespace(log("clicks"), log("shouts", deleting=True)).lineage(VIEW).pipeline.logs
    assert Ref.log("shouts", "shop") in logs
