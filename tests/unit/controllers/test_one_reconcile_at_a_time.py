"""A view's reconciles never overlap in the operator: kopf's handler and the observer's round.

Both reconcile, and both act on the world before they write status: two at once started the
same revision's runner twice (a process the runtime then lost track of, writing on after its
revision retired), or restarted a runner that a rewind had just stopped. `handle` waits for an
observer's reconcile that has begun; the observer leaves alone a resource its handler is at, and
reads the resource again under the lock, so it never acts on a listing older than a handler's
reconcile that finished meanwhile.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from distributary.backends.spark_operator import WatchedApplications
from distributary.controllers import handling, logs, observer

NS, NAME = "team", "big"


def item(version: str) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": NAME, "namespace": NS, "resourceVersion": version},
        "spec": {},
    }


class Kube:
    """The API server's copy of the view: what the observer reads again."""

    def __init__(self, version: str) -> None:
        self.version = version

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        assert (kind, namespace, name) == ("DerivedView", NS, NAME)
        body = item(self.version)
        del body["kind"]  # a GET of one object names its kind; the operator adds it anyway
        return body


@pytest.fixture
def timeline(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """(event, who, resourceVersion) of each reconcile's start and end, in order."""
    seen: list[tuple[str, str, str]] = []

    async def reconcile(body: Any, services: Any, indexes: Any, *rest: Any) -> None:
        who = "handler" if rest else "observer"
        version = str(body["metadata"]["resourceVersion"])
        seen.append(("start", who, version))
        await asyncio.sleep(0.05)  # acting on the world: threads, the API server, Kafka
        seen.append(("end", who, version))

    monkeypatch.setattr(handling, "reconcile_resource", reconcile)
    monkeypatch.setattr(observer, "reconcile_resource", reconcile)
    monkeypatch.setattr(handling, "_RECONCILING", {})  # each test runs its own event loop
    return seen


def services(version: str) -> Any:
    return SimpleNamespace(kube=Kube(version))


async def handler(version: str, svc: Any) -> None:
    memo = SimpleNamespace(services=svc)
    body = kopf.Body(item(version))  # type: ignore[arg-type]
    await handling.handle("DerivedView", body, memo, None, {})  # type: ignore[arg-type]


def test_the_observer_leaves_alone_a_view_its_handler_reconciles(
    timeline: list[tuple[str, str, str]],
) -> None:
    async def both() -> None:
        svc = services("7")
        first = asyncio.create_task(handler("7", svc))
        await asyncio.sleep(0.01)  # the handler's reconcile has begun
        assert await observer._observe(svc, item("6"), {}) is True
        await first

    asyncio.run(both())
    assert timeline == [("start", "handler", "7"), ("end", "handler", "7")]


def test_an_application_change_seen_during_the_handlers_reconcile_reconciles_after_it(
    timeline: list[tuple[str, str, str]],
) -> None:
    """The handler may have read the application before it changed (its driver now runs): a
    change seen meanwhile is reconciled once the handler's reconcile ends, not left to the next
    round (which made 300 views wait up to a whole observe interval to turn Ready)."""

    async def both() -> None:
        svc = services("8")  # the handler's own status write moved the view on: version 8
        svc.applications = WatchedApplications()
        first = asyncio.create_task(handler("7", svc))
        await asyncio.sleep(0.01)  # the handler's reconcile has begun
        app = {
            "metadata": {
                "namespace": NS,
                "name": "big-r1",
                "ownerReferences": [{"kind": "DerivedView", "name": NAME, "controller": True}],
            },
            "status": {"applicationState": {"state": "RUNNING"}},
        }
        views = {"views_by_namespace": {NS: [item("7")]}}
        memo = SimpleNamespace(services=svc)
        await observer.application_changed(kopf.Body(app), "MODIFIED", memo, **views)  # type: ignore[arg-type]
        await first

    asyncio.run(both())
    assert timeline == [
        ("start", "handler", "7"),
        ("end", "handler", "7"),
        ("start", "observer", "8"),
        ("end", "observer", "8"),
    ]


def test_a_handler_waits_for_the_observers_reconcile_and_it_acts_on_a_fresh_read(
    timeline: list[tuple[str, str, str]],
) -> None:
    async def both() -> None:
        svc = services("9")  # the listing the round holds is older: version 6
        first = asyncio.create_task(observer._observe(svc, item("6"), {}))
        await asyncio.sleep(0.01)  # the observer's reconcile has begun
        await asyncio.gather(first, handler("9", svc))

    asyncio.run(both())
    assert timeline == [
        ("start", "observer", "9"),
        ("end", "observer", "9"),
        ("start", "handler", "9"),
        ("end", "handler", "9"),
    ]


def test_a_deleted_view_is_not_reconciled_by_the_observer(
    timeline: list[tuple[str, str, str]],
) -> None:
    svc = SimpleNamespace(kube=SimpleNamespace(get=lambda *_: None))
    assert asyncio.run(observer._observe(svc, item("6"), {})) is True
    assert timeline == []


def output_log() -> dict[str, Any]:
    """The view's output Log, as garbage collection deletes it after the view."""
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {
            "name": NAME,
            "namespace": NS,
            "labels": {"distributary.dev/view": NAME},
            "uid": "log-uid",
        },
        "spec": {"schema": "user STRING", "deletionPolicy": "Delete"},
    }


class Topics:
    """The topic backend: when each topic was deleted, beside the view's reconcile."""

    def __init__(self, seen: list[tuple[str, str, str]]) -> None:
        self.seen = seen

    async def delete(self, log: Any, topic: str) -> None:
        self.seen.append(("deleted", "log", topic))

    async def release(self, namespace: str, name: str) -> list[str]:
        return []


def test_a_views_output_log_deletes_its_topics_only_after_the_views_reconcile_ends(
    timeline: list[tuple[str, str, str]],
) -> None:
    """A reconcile of the view in flight when the view was deleted makes its revision topics; a
    deletion between would leave them made again (the topic outlived `deletionPolicy: Delete`)."""

    async def both() -> None:
        svc = services("7")
        svc.kube.create = lambda manifest: None  # the events
        svc.topics = Topics(timeline)
        first = asyncio.create_task(observer._observe(svc, item("7"), {}))
        await asyncio.sleep(0.01)  # the observer's reconcile has begun; then the view is deleted
        await logs.delete_topic(
            body=kopf.Body(output_log()),  # type: ignore[arg-type]
            status={"topicName": f"{NAME}.r1"},  # type: ignore[arg-type]
            memo=SimpleNamespace(services=svc),  # type: ignore[arg-type]
            runtime=timedelta(0),
        )
        await first

    asyncio.run(both())
    assert timeline == [
        ("start", "observer", "7"),
        ("end", "observer", "7"),
        ("deleted", "log", f"{NAME}.r1"),
        ("deleted", "log", f"distributary.{NS}.{NAME}.dlq"),
    ]
