"""PostgreSQL as a Source sees it: its tables' shapes, the replication slot, the clean-up.

Debezium reads the changes; this adapter only asks the catalog what a table is (so its Log gets
the table's columns and key), reads the slot the connector reads from (its lag and the WAL the
server keeps for it) and drops the slot and the publication when the Source is deleted.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import psycopg

from distributary.api.source import PostgresConnection
from distributary.errors import DistributaryError
from distributary.plan.source_plan import Column, SlotReading, TableShape

CONNECT_TIMEOUT = 10  # seconds


class DatabaseError(DistributaryError, RuntimeError):
    """The database could not be reached or refused a request; the message says which and why."""


def connect(connection: PostgresConnection, password: str) -> psycopg.Connection[Any]:
    """A connection as the Source's user, in autocommit (every read sees the latest catalog)."""
    try:
        return psycopg.connect(
            host=connection.host,
            port=connection.port,
            dbname=connection.database,
            user=connection.user,
            password=password,
            sslmode=connection.ssl_mode,
            connect_timeout=CONNECT_TIMEOUT,
            autocommit=True,
            application_name="distributary",
        )
    except psycopg.Error as exc:
        where = f"{connection.host}:{connection.port}/{connection.database}"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatabaseError(
            f"cannot connect to PostgreSQL at {where} as {connection.user!r}: {first}"
        ) from None


_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typtype = 'e'
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""
_PRIMARY_KEY = """
SELECT a.attname
FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = %s::regclass AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)
"""


def table_shapes(
    db: psycopg.Connection[Any], tables: Iterable[str]
) -> dict[str, TableShape | None]:
    """Each table's columns and primary key; None for a table that does not exist or that the
    user may not see."""
    shapes: dict[str, TableShape | None] = {}
    for table in tables:
        schema, name = table.split(".", 1)
        qualified = f'"{schema}"."{name}"'
        with db.cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL AND has_table_privilege("
                           "to_regclass(%s), 'SELECT')", (qualified, qualified))  # fmt: skip
            row = cursor.fetchone()
            if not row or not row[0]:
                shapes[table] = None
                continue
            cursor.execute(_COLUMNS, (qualified,))
            columns = tuple(Column(n, t, bool(e)) for n, t, e in cursor.fetchall())
            cursor.execute(_PRIMARY_KEY, (qualified,))
            key = tuple(r[0] for r in cursor.fetchall())
        shapes[table] = TableShape(table, columns, key)
    return shapes


_SLOT = """
SELECT s.active,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint,
       extract(epoch FROM r.flush_lag)::float8
FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.slot_name = %s
"""


def slot_reading(db: psycopg.Connection[Any], slot: str) -> tuple[SlotReading, float | None]:
    """The slot's state, and how far behind (in seconds) the connector's confirmations are, as
    the server's walsender measures it (None while nothing reads the slot)."""
    with db.cursor() as cursor:
        cursor.execute(_SLOT, (slot,))
        row = cursor.fetchone()
    if row is None:
        return SlotReading(exists=False), None
    active, retained, lag, seconds = row
    return SlotReading(True, bool(active), retained, lag), seconds


def drop_capture(db: psycopg.Connection[Any], slot: str, publication: str) -> list[str]:
    """Drop the Source's slot (ending the connection reading it, if any) and its publication;
    what was dropped, for people."""
    dropped = []
    with db.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE slot_name = %s AND active_pid IS NOT NULL",
            (slot,),
        )
        cursor.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        if cursor.fetchone():
            for _ in range(50):  # the ended walsender releases the slot within moments
                try:
                    cursor.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    dropped.append(f"replication slot {slot}")
                    break
                except psycopg.errors.ObjectInUse:
                    time.sleep(0.2)
        cursor.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
        if cursor.fetchone():
            cursor.execute(f'DROP PUBLICATION "{publication}"')
            dropped.append(f"publication {publication}")
    return dropped
