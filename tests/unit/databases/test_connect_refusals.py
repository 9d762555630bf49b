"""A connection to a Source's database that fails: one line in the server's words, the field of
the Source to look at and the fix (never libpq's preamble or a traceback)."""

from __future__ import annotations

import pytest

from distributary.api.source import PostgresConnection
from distributary.databases.postgres import connect_refused

CONNECTION = PostgresConnection.model_validate(
    {
        "host": "db.example",
        "port": 5432,
        "database": "shop",
        "user": "cdc",
        "passwordSecret": {"name": "shop-db", "key": "pw"},
    }
)
TRIED = 'connection failed: connection to server at "10.0.0.7", port 5432 failed: '
OPENING = "cannot connect to PostgreSQL at shop@db.example:5432 as 'cdc': "


def test_a_refused_password_names_the_secret_and_its_key() -> None:
    error = connect_refused(
        CONNECTION, TRIED + 'FATAL:  password authentication failed for user "cdc"'
    )
    assert error.field == "spec.postgres.passwordSecret"
    assert str(error) == (
        OPENING + 'password authentication failed for user "cdc": put the password of user '
        "'cdc' in Secret 'shop-db', key 'pw', or fix spec.postgres.user"
    )


def test_a_missing_database_names_the_database_field() -> None:
    error = connect_refused(CONNECTION, TRIED + 'FATAL:  database "shop" does not exist')
    assert error.field == "spec.postgres.database"
    assert (
        str(error)
        == OPENING + 'database "shop" does not exist: create the database, or fix the name'
    )


@pytest.mark.parametrize(
    "said",
    [
        TRIED + "Connection refused\n\tIs the server running on that host and accepting TCP/IP "
        "connections?",
        "connection failed: timeout expired",
        'connection failed: could not translate host name "db.example" to address: Name or '
        "service not known",
    ],
)
def test_a_server_that_cannot_be_reached_names_host_and_port(said: str) -> None:
    error = connect_refused(CONNECTION, said)
    assert error.field == "spec.postgres"
    assert str(error).startswith(OPENING)
    assert str(error).endswith(
        ": check spec.postgres.host and port, and that the server runs and accepts TCP "
        "connections from this machine"
    )
    assert "\n" not in str(error)
    assert "connection failed" not in str(error)


def test_a_server_that_refuses_this_machine_names_pg_hba() -> None:
    error = connect_refused(
        CONNECTION, TRIED + 'FATAL:  no pg_hba.conf entry for host "10.0.0.9", user "cdc"'
    )
    assert error.field == "spec.postgres"
    assert "pg_hba.conf" in str(error)
    assert str(error).endswith("or set spec.postgres.sslMode as it requires")
