"""The operator's steps of a Source's revisions: a raised epoch starts revision 2 beside the
serving one where the connectors' offsets can be read (a Connect REST endpoint) and not where
they cannot (a Strimzi KafkaConnector); a revision is retired only once the status recorded it
Retiring (the write-ahead record), its connector deleted and its slot and publication dropped."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, cast

import pytest
from tests.unit.plan.test_source_revisions import LOGS, _source

from distributary.controllers import sources
from distributary.plan.restarts import RoundMemory
from distributary.plan.source_plan import SlotReading
from distributary.plan.source_revisions import CATCHING_UP, RETIRED, RETIRING, SERVING

STREAMING = {"offsets": [{"partition": {}, "offset": {"lsn_proc": 900, "lsn_commit": 900}}]}


class FakeConnectors:
    def __init__(self, lists: bool, offsets: dict[str, Any]) -> None:
        self.lists = lists
        self.known = offsets
        self.deleted: list[str] = []

    @property
    def lists_offsets(self) -> bool:
        return self.lists

    def offsets(self, name: str, namespace: str) -> dict[str, Any] | None:
        return self.known.get(name) if self.lists else None

    def delete(self, name: str, namespace: str) -> None:
        self.deleted.append(name)


def _services(connectors: FakeConnectors) -> Any:
    return cast(Any, type("Services", (), {"connectors": connectors, "memory": RoundMemory()})())


READING = (SlotReading(True, True, 100, 0, confirmed=900), 0.0)


def test_a_raised_epoch_starts_revision_2_where_offsets_are_read() -> None:
    connectors = FakeConnectors(True, {"distributary.sales.shop": STREAMING})
    recorded = [{"revision": 1, "phase": SERVING, "epoch": 0, "snapshotDone": True}]
    step = sources._step(_services(connectors), _source(1), LOGS, recorded, {1: READING})
    assert {r["revision"]: r["phase"] for r in step.rows} == {1: SERVING, 2: CATCHING_UP}
    assert (step.serving, step.catching_up) == (1, 2)


def test_no_revision_is_started_where_offsets_cannot_be_read() -> None:
    connectors = FakeConnectors(False, {})
    recorded = [{"revision": 1, "phase": SERVING, "epoch": 0, "snapshotDone": True}]
    step = sources._step(_services(connectors), _source(1), LOGS, recorded, {1: READING})
    assert [r["revision"] for r in step.rows] == [1]
    assert (step.serving, step.catching_up, step.retire, step.cut_over) == (1, None, (), False)


def test_a_revision_is_retired_only_once_status_recorded_it_retiring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dropped: list[str] = []

    @contextlib.contextmanager
    def connect(*_: Any) -> Iterator[None]:
        yield None

    def drop_capture(_db: Any, slot: str, publication: str) -> list[str]:
        dropped.append(slot)
        return [f"slot {slot}", f"publication {publication}"]

    monkeypatch.setattr(sources, "connect", connect)
    monkeypatch.setattr(sources, "drop_capture", drop_capture)
    connectors = FakeConnectors(True, {})
    rows = (
        {"revision": 1, "phase": RETIRING, "epoch": 0},
        {"revision": 2, "phase": SERVING, "epoch": 1},
    )
    step = sources.RevisionStep(rows, 2, None, (1,), True, None)
    # The step that cut over marked revision 1 Retiring; the status did not say so yet.
    recorded = [{"revision": 1, "phase": SERVING}, {"revision": 2, "phase": CATCHING_UP}]
    kept = sources._retire(_services(connectors), _source(1), "pw", step, recorded)
    assert (connectors.deleted, dropped) == ([], [])
    assert [r["phase"] for r in kept] == [RETIRING, SERVING]
    # The next round reads it Retiring from the status: now it goes.
    recorded = [dict(r) for r in rows]
    kept = sources._retire(_services(connectors), _source(1), "pw", step, recorded)
    assert connectors.deleted == ["distributary.sales.shop"]
    assert dropped == ["distributary_sales_shop"]
    assert [r["phase"] for r in kept] == [RETIRED, SERVING]
