"""A Source's database, as its reconcile asks it: the tables' shapes, whether the server and user
allow capture, each live revision's replication slot, and dropping a revision's slot and
publication. The `CaptureDatabases` contract of `backends.base`, built on `databases.postgres`
(the only code that talks to PostgreSQL); the unit tests keep it in memory."""

from __future__ import annotations

from collections.abc import Sequence

from distributary.api.source import Source
from distributary.backends.base import CaptureReading
from distributary.databases.postgres import (
    capture_rights,
    connect,
    drop_capture,
    slot_reading,
    table_shapes,
)


class PostgresCaptures:
    """Asks each Source's PostgreSQL server, one connection per call. Raises `DatabaseError`."""

    def read(self, source: Source, password: str, revisions: Sequence[int]) -> CaptureReading:
        """The tables' shapes, the capture rights and the slot of each of `revisions`."""
        names = [t.name for t in source.spec.tables]
        with connect(source.spec.postgres, password) as db:
            shapes = table_shapes(db, names)
            rights = capture_rights(db, source.identifier, names)
            readings = {r: slot_reading(db, source.revision_identifier(r)) for r in revisions}
        return CaptureReading(shapes, rights, readings)

    def drop(self, source: Source, password: str, revision: int) -> list[str]:
        """Drop a revision's slot and publication; what was dropped."""
        identifier = source.revision_identifier(revision)
        with connect(source.spec.postgres, password) as db:
            return drop_capture(db, identifier, identifier)
