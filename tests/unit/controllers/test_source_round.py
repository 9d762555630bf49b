"""The operator's round of a Source, with the database, Connect, Kafka and the API server stood in
for: a re-snapshot's cutover points the table Log at the new revision's topic and records the old
revision Retiring without dropping it; the next round, reading that status, retires it; where the
connectors' offsets cannot be listed a raised epoch is Stalled while the connector is kept."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from distributary.controllers import sources
from distributary.plan.restarts import RestartPolicy, RoundMemory
from distributary.plan.source_plan import (
    CaptureRights,
    Column,
    ConnectorState,
    SlotReading,
    TableShape,
)
from distributary.plan.source_revisions import CATCHING_UP, RETIRED, RETIRING, SERVING
from distributary.plan.view_plan import SERVING_ANNOTATION

R1, R2 = "distributary.sales.shop", "distributary.sales.shop.r2"


def _offsets(lsn: int) -> dict[str, Any]:
    return {"offsets": [{"partition": {}, "offset": {"lsn_proc": lsn, "lsn_commit": lsn}}]}


class Connectors:
    """Connect as the round sees it: every connector running, offsets as given."""

    where = "Connect at http://connect:8083"

    def __init__(self, lists: bool, offsets: dict[str, Any]) -> None:
        self.lists = lists
        self.known = offsets
        self.applied: list[str] = []
        self.deleted: list[str] = []

    @property
    def lists_offsets(self) -> bool:
        return self.lists

    def apply(self, name: str, config: Any, paused: bool, owner: Any, namespace: str) -> None:
        self.applied.append(name)

    def state(self, name: str, namespace: str) -> ConnectorState:
        return ConnectorState("RUNNING", ("RUNNING",))

    def offsets(self, name: str, namespace: str) -> dict[str, Any] | None:
        return self.known.get(name) if self.lists else None

    def delete(self, name: str, namespace: str) -> None:
        self.deleted.append(name)


class Kube:
    """The API server: Logs applied and their status patched."""

    def __init__(self) -> None:
        self.logs: dict[str, dict[str, Any]] = {}
        self.patched: list[tuple[str, dict[str, Any]]] = []

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Any:
        return self.logs.get(name)

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.logs[manifest["metadata"]["name"]] = manifest
        return manifest

    def patch_status(self, api_version: str, kind: str, namespace: str, name: str,
                     status: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
        self.patched.append((name, dict(status)))
        return {}


@pytest.fixture
def dropped(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The database and Kafka stood in for; the slots dropped, in order."""
    gone: list[str] = []

    @contextlib.contextmanager
    def connect(*_: Any) -> Iterator[None]:
        yield None

    shape = TableShape(
        "public.orders", (Column("id", "integer"), Column("amount", "integer")), ("id",)
    )
    monkeypatch.setattr(sources, "connect", connect)
    monkeypatch.setattr(sources, "secret_value", lambda *_: "pw")
    monkeypatch.setattr(sources, "table_shapes", lambda *_: {"public.orders": shape})
    monkeypatch.setattr(sources, "capture_rights", lambda *_: CaptureRights("logical", True, True))
    reading = SlotReading(True, True, 100, 0, confirmed=900)
    monkeypatch.setattr(sources, "slot_reading", lambda *_: (reading, 0.0))
    monkeypatch.setattr(sources, "drop_capture", lambda _db, slot, _p: gone.append(slot) or [slot])
    monkeypatch.setattr(
        sources, "DirectTopics", lambda _admin: SimpleNamespace(apply=lambda _t: None)
    )
    return gone


def _round(connectors: Connectors, kube: Kube, epoch: int, status: dict[str, Any]) -> Any:
    services = SimpleNamespace(
        connectors=connectors,
        kube=kube,
        admin=None,
        settings=SimpleNamespace(connect_secrets="kubernetes"),
        memory=RoundMemory(),
        restart_policy=RestartPolicy(),
    )
    body = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Source",
        "metadata": {"name": "shop", "namespace": "sales", "uid": "u", "generation": 2},
        "spec": {
            "postgres": {"host": "db", "database": "shop", "user": "cdc",
                         "passwordSecret": {"name": "db"}},
            "tables": [{"name": "public.orders"}],
            "snapshot": {"epoch": epoch},
        },
        "status": status,
    }  # fmt: skip
    return sources._round(services, body)  # type: ignore[arg-type]


def _phases(status: dict[str, Any]) -> dict[int, str]:
    return {r["revision"]: r["phase"] for r in status["revisions"]}


def test_the_cutover_serves_the_new_topic_and_the_old_revision_goes_a_round_later(
    dropped: list[str],
) -> None:
    connectors = Connectors(True, {R1: _offsets(900)})
    kube = Kube()
    first = {"revisions": [{"revision": 1, "phase": SERVING, "epoch": 0, "snapshotDone": True}]}
    recorded = _round(connectors, kube, 1, first)  # the epoch raised: revision 2 beside
    assert _phases(recorded) == {1: SERVING, 2: CATCHING_UP}
    assert connectors.applied == [R1, R2]
    assert kube.patched == []
    connectors.applied.clear()
    connectors.known[R2] = _offsets(950)  # whole, and past what revision 1 has written
    status = _round(connectors, kube, 1, recorded)
    assert status["servingRevision"] == 2
    assert _phases(status) == {1: RETIRING, 2: SERVING}
    log = kube.logs["shop-orders"]
    assert log["metadata"]["annotations"] == {SERVING_ANNOTATION: "2"}
    topic = status["tables"][0]["topic"]
    assert topic.endswith(".r2")
    assert kube.patched == [("shop-orders", {"topicName": topic})]
    # Recorded Retiring in this round's status only: nothing is dropped yet.
    assert (connectors.deleted, dropped) == ([], [])
    assert connectors.applied == [R2]  # revision 1's connector is left to the next round
    status = _round(connectors, kube, 1, status)
    assert _phases(status) == {1: RETIRED, 2: SERVING}
    assert connectors.deleted == [R1]
    assert dropped == ["distributary_sales_shop"]
    assert status["connector"] == R2
    assert status["publication"] == "distributary_sales_shop_r2"


def test_a_raised_epoch_is_stalled_where_offsets_cannot_be_listed_and_the_connector_kept(
    dropped: list[str],
) -> None:
    connectors = Connectors(False, {})
    kube = Kube()
    recorded = {
        "servingRevision": 1,
        "revisions": [{"revision": 1, "phase": SERVING, "epoch": 0, "snapshotDone": True}],
    }
    status = _round(connectors, kube, 1, recorded)
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "ResnapshotUnsupported")
    assert "spec.snapshot.epoch" in stalled["message"]
    assert connectors.applied == [R1]  # the serving connector is kept as before
    assert _phases(status) == {1: SERVING}
    assert (connectors.deleted, dropped) == ([], [])
