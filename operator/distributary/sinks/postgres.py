"""A Sink into PostgreSQL: a table kept equal to a log, exactly once.

At start the table is made from the Log's columns when it is missing (the columns the Log has
gained since are added; a type or key it cannot keep is refused), and the position is read, per
partition, from `distributary_sink_offsets` in the same database. Each poll's records are applied
in one transaction that also moves the position: the rows and the position commit together or
not at all. So a process killed at any point, or a second one started beside it (an advisory
lock per Sink), neither loses nor repeats a record; only records at or past the committed
position are applied.

In upsert mode a key's latest record in the batch replaces its row, and a tombstone (or a record
whose `__deleted` is true) deletes it; in append mode every record is a row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from distributary.kafka.records import Record
from distributary.plan.sinks.sink_plan import (
    DELETED_COLUMN,
    OFFSETS_TABLE,
    SinkRun,
    beside_table,
    create_offsets,
    create_table,
    delete,
    migration,
    quoted,
    switch_statements,
    table_name,
    upsert,
)


class SinkRefusedError(RuntimeError):
    """The store cannot be kept as the spec asks; the message says why and what to do."""


def connect_sink(run: SinkRun) -> psycopg.Connection[Any]:
    """A connection to the Sink's database as its user (autocommit: each write says its
    transaction)."""
    password = (
        Path(run.password_file).read_text("utf-8").rstrip("\n") if run.password_file else None
    )
    return psycopg.connect(
        host=run.host,
        port=run.port,
        dbname=run.database,
        user=run.user,
        password=password,
        sslmode=run.ssl_mode,
        connect_timeout=10,
        application_name=f"distributary-sink {run.name}",
        autocommit=True,  # each write is an explicit transaction (`db.transaction()`)
    )


def prepare(db: psycopg.Connection[Any], run: SinkRun) -> None:
    """The offsets table, and the target table made or migrated (or SinkRefusedError)."""
    schema, table = run.table.split(".", 1)
    with db.transaction():
        db.execute(create_offsets(run))
        rows = db.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
            (f"{quoted(schema)}.{quoted(table)}",),
        ).fetchall()
        if not rows:
            db.execute(create_table(run))
            return
        key = [
            r[0]
            for r in db.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND "
                "i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)",
                (f"{quoted(schema)}.{quoted(table)}",),
            ).fetchall()
        ]
        change = migration(run, dict(rows), key)
        if change.problems:
            raise SinkRefusedError("; ".join(change.problems))
        for statement in change.add:
            db.execute(statement)


def positions(db: psycopg.Connection[Any], run: SinkRun) -> dict[int, int]:
    """The committed position: the next offset to apply, per partition."""
    schema = run.table.split(".", 1)[0]
    rows = db.execute(
        f"SELECT partition, next_offset FROM {quoted(schema)}.{OFFSETS_TABLE} "
        "WHERE sink = %s AND topic = %s",
        (run.name, run.topic),
    ).fetchall()
    return {int(p): int(o) for p, o in rows}


def _value(raw: Any, spark: str) -> Any:
    """A JSON value as the column's SQL parameter (nested values as JSON text)."""
    if raw is None:
        return None
    if isinstance(raw, dict | list):
        return json.dumps(raw)
    if isinstance(raw, bool):
        return raw
    return str(raw) if spark.upper().startswith(("DECIMAL", "TIMESTAMP", "DATE")) else raw


def apply(db: psycopg.Connection[Any], run: SinkRun, records: Sequence[Record]) -> int:
    """Apply a poll's records and move the position, in one transaction; the records applied
    (those before the committed position are skipped: a replay)."""
    schema = run.table.split(".", 1)[0]
    with db.transaction():
        # One writer per Sink at a time, even before its position rows exist: a second process
        # of the same Sink waits here, then skips what the first applied.
        db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{run.name} {run.topic}",))
        rows = db.execute(
            f"SELECT partition, next_offset FROM {quoted(schema)}.{OFFSETS_TABLE} "
            "WHERE sink = %s AND topic = %s FOR UPDATE",
            (run.name, run.topic),
        ).fetchall()
        committed = {int(p): int(o) for p, o in rows}
        fresh = [r for r in records if r.offset >= committed.get(r.partition, 0)]
        if not fresh:
            return 0
        _write(db, run, fresh)
        ends: dict[int, int] = {}
        for record in fresh:
            ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
        with db.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {quoted(schema)}.{OFFSETS_TABLE} (sink, topic, partition, "
                "next_offset) VALUES (%s, %s, %s, %s) ON CONFLICT (sink, topic, partition) "
                "DO UPDATE SET next_offset = EXCLUDED.next_offset",
                [(run.name, run.topic, p, o) for p, o in sorted(ends.items())],
            )
    return len(fresh)


def _write(db: psycopg.Connection[Any], run: SinkRun, records: Sequence[Record]) -> None:
    names = [n for n, _ in run.columns]
    types = [t for _, t in run.columns]
    if run.mode != "upsert":
        rows = []
        for record in records:
            if record.value is None:
                continue
            value = json.loads(record.value)
            rows.append([_value(value.get(n), t) for n, t in run.columns])
        with db.cursor() as cursor:
            cursor.executemany(upsert(run), rows)
        return
    latest: dict[bytes, Record] = {}
    for record in records:  # in offset order per partition; a key lives in one partition
        latest[record.key or b""] = record
    upserts, deletes = [], []
    key_types = dict(run.columns)
    for key, record in latest.items():
        value = json.loads(record.value) if record.value is not None else None
        if value is None or value.get(DELETED_COLUMN) in (True, "true"):
            key_value = json.loads(key) if key else {}
            deletes.append([_value(key_value.get(k), key_types.get(k, "STRING")) for k in run.key])
        else:
            upserts.append([_value(value.get(n), t) for n, t in zip(names, types, strict=True)])
    with db.cursor() as cursor:
        if deletes:
            cursor.executemany(delete(run), deletes)
        if upserts:
            cursor.executemany(upsert(run), upserts)


def _exists(db: psycopg.Connection[Any], table: str) -> bool:
    schema, name = table.split(".", 1)
    row = db.execute("SELECT to_regclass(%s)", (f"{quoted(schema)}.{quoted(name)}",)).fetchone()
    return row is not None and row[0] is not None


def _other_topics(db: psycopg.Connection[Any], run: SinkRun) -> list[str]:
    """The topics other than the Sink's own that its table holds the rows of (the revisions
    before), as its position rows say."""
    schema = run.table.split(".", 1)[0]
    rows = db.execute(
        f"SELECT DISTINCT topic FROM {quoted(schema)}.{OFFSETS_TABLE} "
        "WHERE sink = %s AND topic <> %s ORDER BY topic",
        (run.name, run.topic),
    ).fetchall()
    return [str(r[0]) for r in rows]


def target_table(db: psycopg.Connection[Any], run: SinkRun) -> str:
    """The table the Sink writes now: its own, or the one beside it that it fills with a new
    revision of its Log (a topic the table does not hold yet, while it holds another's rows),
    until it switches readers over."""
    beside = beside_table(run.table, run.topic)
    if _exists(db, beside):
        return beside
    db.execute(create_offsets(run))
    if _exists(db, run.table) and _other_topics(db, run) and not positions(db, run):
        return beside
    return run.table


def reader_positions(db: psycopg.Connection[Any], run: SinkRun) -> dict[int, int]:
    """The position readers of the Sink's table see: none while the Sink still fills the
    table of its topic beside the one they read."""
    if _exists(db, beside_table(run.table, run.topic)):
        return {}
    return positions(db, run)


def switch(db: psycopg.Connection[Any], run: SinkRun) -> str | None:
    """Switch readers of the Sink's table to the table filled beside it, in one transaction:
    the rows readers saw keep their table under the previous revision's name, the filled table
    takes the Sink's name and the grants the previous one had, and the previous revision's
    position rows go. What was done, in words (None: the table was switched already)."""
    schema = run.table.split(".", 1)[0]
    beside = beside_table(run.table, run.topic)
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{run.name} {run.topic}",))
        if not _exists(db, beside):
            return None
        previous = _other_topics(db, run)
        retired = beside_table(run.table, previous[-1]) if previous else None
        if not _exists(db, run.table):
            retired = None
        elif retired is not None and _exists(db, retired):
            raise SinkRefusedError(
                f"the table {run.table} is to keep its rows as {retired}, which exists: rename "
                "or drop it, and the Sink switches readers to the new revision's table"
            )
        grants = (
            db.execute(
                "SELECT g.grantee::regrole::text, g.privilege_type FROM pg_class c, "
                "aclexplode(c.relacl) g WHERE c.oid = to_regclass(%s) AND g.grantee <> c.relowner "
                "AND g.grantee <> 0",
                (table_name(run.table),),
            ).fetchall()
            if retired is not None
            else []
        )
        for statement in switch_statements(run, beside, retired):
            db.execute(statement)
        for grantee, privilege in grants:
            db.execute(f"GRANT {privilege} ON {table_name(run.table)} TO {grantee}")
        db.execute(
            f"DELETE FROM {quoted(schema)}.{OFFSETS_TABLE} WHERE sink = %s AND topic <> %s",
            (run.name, run.topic),
        )
    kept = f"; the rows of {previous[-1]} stay in {retired}" if retired and previous else ""
    return f"readers of {run.table} now read the rows of {run.topic}{kept}"


class PostgresStore:
    """A table and its position in one PostgreSQL database (see the module's docstring)."""

    def __init__(self, run: SinkRun) -> None:
        self.sink = run
        self.db = connect_sink(run)
        target = target_table(self.db, run)
        self.run = run.model_copy(update={"table": target})
        prepare(self.db, self.run)

    @property
    def filling(self) -> bool:
        """Whether it fills a new revision's table beside the one readers read."""
        return self.run.table != self.sink.table

    def positions(self) -> dict[int, int]:
        """The committed position per partition."""
        return positions(self.db, self.run)

    def apply(self, records: Sequence[Record]) -> int:
        """Apply records and move the position in one transaction."""
        return apply(self.db, self.run, records)

    def switch(self) -> str | None:
        """Switch readers to the table filled beside theirs (see `switch`); from then on the
        Sink writes the table they read."""
        done = switch(self.db, self.sink)
        self.run = self.sink
        return done

    def close(self) -> None:
        """Close the connection."""
        self.db.close()
