"""PostgreSQL as a Source sees it: its tables' shapes, the replication slot, the clean-up.

Debezium reads the changes; this adapter only asks the catalog what a table is (so its Log gets
the table's columns and key) and whether the server and user allow logical decoding at all
(`validate --database`), reads the slot the connector reads from (its lag and the WAL the server
keeps for it) and drops the slot and the publication when the Source is deleted. A connection
that fails says why in the server's words and which field of the Source to fix.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from distributary.api.source import PostgresConnection
from distributary.errors import DistributaryError
from distributary.plan.sources.source_plan import CaptureRights, Column, SlotReading, TableShape

if TYPE_CHECKING:  # imported where a connection is made: the operator without Sources never
    import psycopg  # loads the driver (9 MB of its memory)

CONNECT_TIMEOUT = 10  # seconds


class DatabaseError(DistributaryError, RuntimeError):
    """The database could not be reached or refused a request; the message says which and why,
    `field` the part of the Source's spec to look at."""

    def __init__(self, message: str, field: str = "spec.postgres") -> None:
        super().__init__(message)
        self.field = field


def connect(connection: PostgresConnection, password: str) -> psycopg.Connection[Any]:
    """A connection as the Source's user, in autocommit (every read sees the latest catalog)."""
    import psycopg  # here, as the module's imports say

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
        raise connect_refused(connection, str(exc) or type(exc).__name__) from None


# libpq's message opens with where it tried, which the Source's own address says better.
_TRIED = re.compile(r'^(connection failed: )?(connection to server at "[^"]*", port \d+ failed: )?')


def connect_refused(connection: PostgresConnection, said: str) -> DatabaseError:
    """The error of a connection that failed, from what libpq `said`: what went wrong in the
    server's words, the field to look at and the fix."""
    reason = _TRIED.sub("", said.strip().splitlines()[0] if said.strip() else said)
    reason = reason.replace("FATAL:  ", "").strip()
    secret = connection.password_secret
    opening = (
        f"cannot connect to PostgreSQL at {connection.database}@{connection.host}:"
        f"{connection.port} as {connection.user!r}: {reason}"
    )
    if "password authentication failed" in reason or reason.startswith("role "):
        return DatabaseError(
            f"{opening}: put the password of user {connection.user!r} in Secret {secret.name!r}, "
            f"key {secret.key!r}, or fix spec.postgres.user",
            "spec.postgres.passwordSecret",
        )
    if reason.startswith("database ") and reason.endswith("does not exist"):
        return DatabaseError(
            f"{opening}: create the database, or fix the name", "spec.postgres.database"
        )
    if "pg_hba.conf" in reason:
        return DatabaseError(
            f"{opening}: allow this machine and user in the server's pg_hba.conf, or set "
            "spec.postgres.sslMode as it requires"
        )
    return DatabaseError(
        f"{opening}: check spec.postgres.host and port, and that the server runs and accepts "
        "TCP connections from this machine"
    )


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


_CAPTURE_RIGHTS = """
SELECT current_setting('wal_level'), r.rolreplication, r.rolsuper,
       has_database_privilege(current_database(), 'CREATE'),
       EXISTS (SELECT 1 FROM pg_publication WHERE pubname = %s)
FROM pg_roles r WHERE r.rolname = current_user
"""
_NOT_OWNED = """
SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname || '.' || c.relname = ANY(%s) AND NOT pg_has_role(current_user, c.relowner, 'USAGE')
ORDER BY 1
"""


def capture_rights(
    db: psycopg.Connection[Any], publication: str, tables: Sequence[str]
) -> CaptureRights:
    """The server's `wal_level`, whether the connected user may replicate (REPLICATION or
    superuser), and whether it may make the `publication` of `tables` (schema.table) when it
    does not exist yet (CREATE on the database, owning each table), as Debezium does."""
    with db.cursor() as cursor:
        cursor.execute(_CAPTURE_RIGHTS, (publication,))
        row = cursor.fetchone()
        if row is None:  # the user's own role is always in pg_roles; kept for the type checker
            raise DatabaseError("the connected user is not in pg_roles")
        cursor.execute(_NOT_OWNED, (list(tables),))
        not_owned = tuple(str(r[0]) for r in cursor.fetchall())
    wal_level, replication, superuser, may_create, exists = row
    return CaptureRights(
        str(wal_level), bool(replication), bool(superuser), bool(exists), bool(may_create),
        not_owned,
    )  # fmt: skip


_SLOT = """
SELECT s.active,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint,
       extract(epoch FROM r.flush_lag)::float8,
       pg_wal_lsn_diff(s.confirmed_flush_lsn, '0/0')::bigint
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
    active, retained, lag, seconds, confirmed = row
    return SlotReading(True, bool(active), retained, lag, confirmed), seconds


def drop_capture(db: psycopg.Connection[Any], slot: str, publication: str) -> list[str]:
    """Drop the Source's slot (ending the connection reading it, if any) and its publication;
    what was dropped, for people."""
    import psycopg  # here, as the module's imports say

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
