"""`distributary validate --database`: each Source checked against its real PostgreSQL, as
`distributary run` checks it when it starts, plus whether the server and user allow capture.

The database is the session's PostgreSQL 15 (`wal_level=logical`); two ordinary roles log in with
a password, one with REPLICATION and one without, and may read four tables: two with a primary key,
one without, one with a column of a type Distributary refuses. Each case is the real command
(click's runner over `distributary.cli.main`, and once a process of its own) on a pipeline folder
and a secrets folder laid out as Kubernetes mounts a Secret; every line it prints is checked
exactly. No Kafka, no JVM: a few seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from distributary.cli import main
from distributary.devtools.postgres import PostgresServer
from distributary.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "shop_validate"
CAPTURER = "validate_cdc"  # roles are the server's, shared by the session's modules: our own
READER = "validate_reader"  # LOGIN without REPLICATION
PASSWORD = "validate-Secret-5519"
SOURCE = """\
apiVersion: distributary.dev/v1alpha1
kind: Source
metadata: {{name: shop}}
spec:
  postgres:
    host: 127.0.0.1
    port: {port}
    database: {database}
    user: {user}
    passwordSecret: {{name: shop-db}}
    sslMode: disable
  tables:
{tables}
"""
VIEW = """\
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: big-orders}
spec:
  inputs: [{log: shop-orders, alias: o}]
  sql: SELECT id, customer, amount FROM o WHERE amount >= 10
  output: {mode: upsert, key: [id, customer]}
"""
TABLES = """
CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, customer text NOT NULL,
    amount numeric(10,2) NOT NULL, placed timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS customers (id bigint PRIMARY KEY, name text);
CREATE TABLE IF NOT EXISTS events (at timestamptz, what text);
CREATE TABLE IF NOT EXISTS places (id int PRIMARY KEY, spot point);
"""


@pytest.fixture(scope="module", autouse=True)
def spark_class_archive() -> None:
    """Nothing here starts Spark: the session's class-data archive (and its `java -version`)
    is not needed."""


@pytest.fixture(scope="module")
def database(postgres: PostgresServer) -> PostgresServer:
    postgres.create_database(DATABASE)
    for role, replication in ((CAPTURER, "REPLICATION"), (READER, "NOREPLICATION")):
        if not postgres.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)):
            postgres.execute(f"CREATE ROLE {role} LOGIN {replication} PASSWORD '{PASSWORD}'")
    for statement in TABLES.split(";"):
        if statement.strip():
            postgres.execute(statement, database=DATABASE)
    postgres.execute(
        f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {CAPTURER}, {READER}", database=DATABASE
    )
    # The capturer may make its publication, as Debezium does on the first start: it owns the
    # tables and may create in the database.
    for table in ("orders", "customers", "events", "places"):
        postgres.execute(f"ALTER TABLE {table} OWNER TO {CAPTURER}", database=DATABASE)
    postgres.execute(f"GRANT CREATE ON DATABASE {DATABASE} TO {CAPTURER}")
    return postgres


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _secrets(tmp_path_factory.mktemp("secrets"), PASSWORD)


def _secrets(folder: Path, password: str) -> Path:
    (folder / "shop-db").mkdir(parents=True)
    (folder / "shop-db" / "password").write_text(password + "\n")
    return folder


def _pipeline(
    folder: Path,
    port: int,
    tables: tuple[str, ...] = ("name: public.orders", "name: public.customers"),
    user: str = CAPTURER,
) -> Path:
    """A pipeline folder of the Source (and a view over its orders); its source.yaml's path."""
    folder.mkdir(parents=True, exist_ok=True)
    listed = "\n".join(f"    - {table}" for table in tables)
    source = SOURCE.format(port=port, database=DATABASE, user=user, tables=listed)
    (folder / "source.yaml").write_text(source)
    (folder / "view.yaml").write_text(VIEW)
    return folder / "source.yaml"


def _validate(pipeline: Path, secrets: Path) -> tuple[int, str, list[str]]:
    """The exit code, stdout, and stderr's lines but the progress lines."""
    result = CliRunner().invoke(
        main, ["validate", str(pipeline.parent), "--database", "--secrets", str(secrets)]
    )
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    said = [line for line in result.stderr.splitlines() if not line.startswith("database: ")]
    return result.exit_code, result.stdout, said


def test_a_good_pipeline_passes_and_says_what_was_checked(
    database: PostgresServer, secrets: Path, tmp_path: Path
) -> None:
    pipeline = _pipeline(tmp_path / "good", database.port)
    done = subprocess.run(
        [sys.executable, "-m", "distributary.cli", "validate", str(pipeline.parent),
         "--database", "--secrets", str(secrets)],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"Source shop: 2 tables found in {DATABASE}@127.0.0.1:{database.port}, wal_level "
        f"logical, user '{CAPTURER}' may replicate",
        "valid: 0 logs, 1 view, 0 jobs, 1 source",
    ]
    assert done.stderr.splitlines() == [
        f"database: Source shop: reading {DATABASE}@127.0.0.1:{database.port} as '{CAPTURER}' ...",
    ]


def test_a_missing_table_is_named_with_its_field_and_fix(
    database: PostgresServer, secrets: Path, tmp_path: Path
) -> None:
    pipeline = _pipeline(
        tmp_path / "p", database.port, ("name: public.orders", "name: public.nope")
    )
    code, out, said = _validate(pipeline, secrets)
    assert (code, out) == (1, "")
    assert said == [
        f"{pipeline}: Source/default/shop spec.tables[1].name: there is no table 'public.nope' "
        f"in database '{DATABASE}', or user '{CAPTURER}' may not read it: create it, grant "
        "SELECT on it, or fix the name",
        "error: 1 problem found in the Sources' databases",
    ]


def test_a_table_without_a_primary_key_or_with_a_refused_type_or_another_key_is_refused(
    database: PostgresServer, secrets: Path, tmp_path: Path
) -> None:
    tables = (
        "name: public.events",
        "name: public.places",
        "{name: public.orders, key: [customer]}",
    )
    pipeline = _pipeline(tmp_path / "p", database.port, tables)
    code, out, said = _validate(pipeline, secrets)
    assert (code, out) == (1, "")
    where = f"{pipeline}: Source/default/shop"
    assert said == [
        f"{where} spec.tables[0].name: table 'public.events' has no primary key, so its rows "
        "have no key and a delete or update could not be told apart: add a primary key to the "
        "table",
        f"{where} spec.tables[1].name: column 'spot' of 'public.places' is of type 'point', "
        "which Distributary cannot carry exactly yet: change the column's type or capture a "
        "view of the table without it",
        f"{where} spec.tables[2].key: is ['customer'] but the primary key of 'public.orders' is "
        "['id']: the Log is keyed as the connector keys its records, by the primary key; remove "
        "spec.tables[].key or set it to the primary key",
        "error: 3 problems found in the Sources' databases",
    ]


def test_a_wrong_password_names_the_secret(database: PostgresServer, tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path / "p", database.port)
    code, out, said = _validate(pipeline, _secrets(tmp_path / "secrets", "not-the-password"))
    assert (code, out) == (1, "")
    assert said == [
        f"{pipeline}: Source/default/shop spec.postgres.passwordSecret: cannot connect to "
        f"PostgreSQL at {DATABASE}@127.0.0.1:{database.port} as '{CAPTURER}': password "
        f'authentication failed for user "{CAPTURER}": put the password of user '
        f"'{CAPTURER}' in Secret 'shop-db', key 'password', or fix spec.postgres.user",
        "error: 1 problem found in the Sources' databases",
    ]


def test_a_user_without_replication_cannot_capture_nor_make_the_publication(
    database: PostgresServer, secrets: Path, tmp_path: Path
) -> None:
    pipeline = _pipeline(tmp_path / "p", database.port, user=READER)
    code, out, said = _validate(pipeline, secrets)
    assert (code, out) == (1, "")
    make = "or make it yourself: CREATE PUBLICATION distributary_default_shop FOR TABLE "
    tables = "public.orders, public.customers"
    assert said == [
        f"{pipeline}: Source/default/shop spec.postgres.user: user '{READER}' has neither "
        f"REPLICATION nor superuser, so it may not read the server's changes: ALTER ROLE "
        f'"{READER}" REPLICATION as a superuser, or name a user that has it',
        f"{pipeline}: Source/default/shop spec.postgres.user: user '{READER}' may not create "
        f"the Source's publication distributary_default_shop in database '{DATABASE}': GRANT "
        f'CREATE ON DATABASE "{DATABASE}" TO "{READER}", {make}{tables}',
        f"{pipeline}: Source/default/shop spec.tables: user '{READER}' does not own "
        "public.customers, public.orders, and only a table's owner may publish it: make "
        f"'{READER}' the owner (ALTER TABLE ... OWNER TO), {make}{tables}",
        "error: 3 problems found in the Sources' databases",
    ]
    # Once the publication exists (made by its owner), making it is not asked of the user.
    database.execute(
        f"CREATE PUBLICATION distributary_default_shop FOR TABLE {tables}", database=DATABASE
    )
    try:
        code, _, said = _validate(pipeline, secrets)
    finally:
        database.execute("DROP PUBLICATION distributary_default_shop", database=DATABASE)
    assert code == 1
    assert [line.split(": ", 2)[1] for line in said[:-1]] == [
        "Source/default/shop spec.postgres.user"
    ]


def test_a_database_that_cannot_be_reached_is_one_line_not_a_traceback(
    database: PostgresServer, secrets: Path, tmp_path: Path
) -> None:
    port = free_port()
    pipeline = _pipeline(tmp_path / "p", port)
    code, out, said = _validate(pipeline, secrets)
    assert (code, out) == (1, "")
    assert said == [
        f"{pipeline}: Source/default/shop spec.postgres: cannot connect to PostgreSQL at "
        f"{DATABASE}@127.0.0.1:{port} as '{CAPTURER}': Connection refused: check "
        "spec.postgres.host and port, and that the server runs and accepts TCP connections "
        "from this machine",
        "error: 1 problem found in the Sources' databases",
    ]


def test_a_view_over_a_column_the_table_lacks_is_refused_as_run_refuses_it(
    database: PostgresServer, secrets: Path, tmp_path: Path
) -> None:
    pipeline = _pipeline(tmp_path / "p", database.port)
    view = pipeline.parent / "view.yaml"
    view.write_text(VIEW.replace("customer, amount", "customer, total"))
    code, out, said = _validate(pipeline, secrets)
    assert (code, out) == (1, "")
    assert len(said) == 2
    assert said[0].startswith(f"{view}: DerivedView/default/big-orders spec.sql: ")
    assert "total" in said[0]
    assert said[1] == "error: 1 problem found in the Sources' databases"
