"""A reconcile that fails unexpectedly under the operator: a condition and an event, never a
traceback.

`handle` is driven as kopf drives it, with the reconcile's in-memory parts
(`tests/unit/reconcile/fakes.py`) and an API server that keeps one status. A bug deep in the
reconcile (here: the Spark runtime raising KeyError) must leave the view Stalled with
`ReconcileError` and one line, post a Warning event, log the traceback at debug level only, and
come back to kopf as a retry with back-off; once the bug is gone, the next try clears it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, cast

import kopf
import pytest
from tests.unit.reconcile.fakes import NS, Parts, parts

from distributary.controllers import events, logs
from distributary.controllers.handling import ReconcileError, handle
from distributary.controllers.services import OperatorServices
from distributary.controllers.settings import OperatorSettings
from distributary.plan.status.conditions import Problem
from distributary.plan.status.status_patch import merged
from distributary.reconcile.failures import LONGEST_RETRY, announce, retry_delay
from distributary.reconcile.ports import Services


@dataclass
class FakeKube:
    """The status subresource of one object, and the manifests applied."""

    status: dict[str, Any] = field(default_factory=dict)
    version: int = 1

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str,
        update: Mapping[str, Any], version: str | None,
    ) -> dict[str, Any]:  # fmt: skip
        self.status = merged(self.status, update)
        self.version += 1
        return {"metadata": {"resourceVersion": str(self.version)}, "status": self.status}

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return manifest

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        if manifest["kind"] == "Event" and manifest["type"] == "Warning":
            POSTED.append((manifest["reason"], manifest["message"]))
        return manifest


POSTED: list[tuple[str, str]] = []  # the Warning events the operator posted, as (reason, message)


def log(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": "1"},
        "spec": {"partitions": 1, "schema": "user STRING, n INT"},
    }


def view(status: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {
            "name": "big", "namespace": NS, "uid": "uid-big", "generation": 1,
            "resourceVersion": "1",
        },
        "spec": {
            "inputs": [{"log": "clicks", "alias": "src"}],
            "sql": "SELECT user, n FROM src WHERE n > 1",
            "output": {"mode": "append"},
        },
        "status": dict(status),
    }  # fmt: skip


def services(p: Parts, kube: FakeKube) -> OperatorServices:
    base = p.services()
    shared = {f.name: getattr(base, f.name) for f in fields(Services)}
    return OperatorServices(**shared, settings=OperatorSettings("kafka:9092"), kube=cast(Any, kube))


def reconcile(p: Parts, kube: FakeKube, retry: int = 0) -> None:
    """One kopf handler call for the view, as the API server holds it now."""
    body = view(kube.status)
    found = {
        "logs_by_namespace": {NS: [log("clicks")]},
        "views_by_namespace": {NS: [body]},
        "jobs_by_namespace": {},
        "retry": retry,
    }
    memo = kopf.Memo(services=services(p, kube))
    try:
        asyncio.run(handle("DerivedView", kopf.Body(cast(kopf.RawBody, body)), memo, None, found))
    finally:
        assert events.drain(5)  # a Warning is posted from a sender thread


def broken(*_: Any) -> Any:
    raise KeyError("driver")


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The Warning events posted (as Event objects, through the API client)."""
    POSTED.clear()
    return POSTED


def stalled(kube: FakeKube) -> dict[str, Any] | None:
    return next((c for c in kube.status.get("conditions") or [] if c["type"] == "Stalled"), None)


def test_an_unexpected_failure_becomes_a_condition_an_event_and_a_retry_with_back_off(
    warnings: list[tuple[str, str]],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p, kube = parts([log("clicks")], []), FakeKube()
    monkeypatch.setattr(p.runtime, "view_app", broken)  # a bug where nothing catches it
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ReconcileError) as raised:
        reconcile(p, kube, retry=2)
    assert isinstance(raised.value, kopf.TemporaryError)
    assert raised.value.delay == retry_delay(2) == 40
    said = str(raised.value)
    assert "\n" not in said
    assert "Traceback" not in said
    assert "DerivedView shop/big" in said
    assert "KeyError: 'driver'" in said
    condition = stalled(kube)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "ReconcileError")
    assert "KeyError: 'driver'" in condition["message"]
    assert "retried with back-off" in condition["message"]
    ready = next(c for c in kube.status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert kube.status["servingRevision"] == 1  # what was recorded before the failure stays
    assert [reason for reason, _ in warnings] == ["ReconcileError"]
    traced = [r for r in caplog.records if r.exc_info]
    assert traced
    assert all(r.levelno == logging.DEBUG for r in traced)


def test_the_next_try_without_the_failure_clears_the_condition(
    warnings: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    p, kube = parts([log("clicks")], []), FakeKube()
    with monkeypatch.context() as patched:
        patched.setattr(p.runtime, "view_app", broken)
        with pytest.raises(ReconcileError):
            reconcile(p, kube)
    reconcile(p, kube, retry=1)
    assert stalled(kube) is None
    assert p.runtime.running == {"big-r1": 1}


def test_the_back_off_doubles_up_to_its_cap() -> None:
    assert [retry_delay(n) for n in range(4)] == [10, 20, 40, 80]
    assert retry_delay(50) == LONGEST_RETRY


def test_a_log_whose_reconcile_fails_unexpectedly_says_so_and_is_retried(
    warnings: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    p, kube = parts([log("clicks")], []), FakeKube()

    async def ensure(*_: Any, **__: Any) -> Any:
        raise RuntimeError("the topic backend broke\nat line 2")

    monkeypatch.setattr(p.topics, "ensure", ensure)
    memo = kopf.Memo(services=services(p, kube))
    body = kopf.Body(cast(kopf.RawBody, {**log("clicks"), "status": {}}))
    with pytest.raises(ReconcileError) as raised:
        asyncio.run(logs.reconcile(body, memo, retry=1))
    assert events.drain(5)  # a Warning is posted from a sender thread
    assert raised.value.delay == 20
    assert "(RuntimeError: the topic backend broke);" in str(raised.value)
    condition = stalled(kube)
    assert condition is not None
    assert condition["reason"] == "ReconcileError"
    assert "Log shop/clicks" in condition["message"]
    assert [reason for reason, _ in warnings] == ["ReconcileError"]


class Said:
    """Events, as the reconcile tells them."""

    def __init__(self) -> None:
        self.warnings: list[tuple[str, str]] = []

    def info(self, reason: str, message: str) -> None:
        raise AssertionError("a problem is a warning")

    def warn(self, reason: str, message: str) -> None:
        self.warnings.append((reason, message))


def test_a_problem_is_announced_once_when_it_appears_not_at_every_reconcile() -> None:
    problems = [Problem("InvalidSpec", "spec.sql: column price is not among bg_orders' columns")]
    events = Said()
    announce(events, {}, problems)
    assert events.warnings == [("InvalidSpec", problems[0].message)]
    stalled = {"type": "Stalled", "status": "True", "message": problems[0].message + " More."}
    announce(events, {"conditions": [stalled]}, problems)
    assert len(events.warnings) == 1  # said already
    other = Problem("KafkaRefused", "Kafka refused topic t: Set spec.output.replicas to ...")
    announce(events, {"conditions": [stalled]}, [*problems, other])
    assert events.warnings[1:] == [("KafkaRefused", other.message)]
