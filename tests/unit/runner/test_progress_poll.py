"""A runner polls each query twice a second: it reads Spark's recent progress reports (up to 100,
each fetched from the JVM and parsed) only when the last report is one it has not seen, and acts
on each batch once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from distributary.runner import main
from distributary.runner.main import Revision


@dataclass
class Progress:
    batchId: int  # noqa: N815 (pyspark's names)
    timestamp: str

    @property
    def json(self) -> str:
        return json.dumps({"batchId": self.batchId, "timestamp": self.timestamp})


class Query:
    def __init__(self) -> None:
        self.reports: list[Progress] = []
        self.reads = 0  # of recentProgress
        self.isActive = True

    @property
    def lastProgress(self) -> Progress | None:  # noqa: N802
        return self.reports[-1] if self.reports else None

    @property
    def recentProgress(self) -> list[Progress]:  # noqa: N802
        self.reads += 1
        return list(self.reports)

    def batch(self, batch_id: int) -> None:
        self.reports.append(Progress(batch_id, f"2026-12-02T07:00:{batch_id:02d}.000Z"))


@pytest.fixture
def polled(monkeypatch: pytest.MonkeyPatch) -> tuple[Revision, Query, list[int]]:
    handled: list[int] = []
    rev = Revision(spec=Any, session=Any, admin=Any, publisher=None)  # type: ignore[arg-type]
    rev.state = "Running"
    query = Query()
    rev.query = query  # type: ignore[assignment]
    monkeypatch.setattr(main, "batch_of", lambda report: report)
    monkeypatch.setattr(rev, "handle", lambda report: handled.append(report["batchId"]))
    return rev, query, handled


def test_an_idle_query_is_not_read_through(polled: tuple[Revision, Query, list[int]]) -> None:
    rev, query, handled = polled
    rev.poll()  # no report yet
    assert query.reads == 0
    query.batch(0)
    query.batch(1)
    rev.poll()
    assert (handled, query.reads) == ([0, 1], 1)
    for _ in range(20):  # ten idle seconds
        rev.poll()
    assert (handled, query.reads) == ([0, 1], 1)


def test_each_new_batch_is_handled_once(polled: tuple[Revision, Query, list[int]]) -> None:
    rev, query, handled = polled
    for batch_id in range(5):
        query.batch(batch_id)
        rev.poll()
        rev.poll()
    assert handled == [0, 1, 2, 3, 4]
    assert query.reads == 5
    query.reports = query.reports[-2:]  # Spark keeps the last ones only
    query.batch(5)
    query.batch(6)
    rev.poll()
    assert handled == [0, 1, 2, 3, 4, 5, 6]
