"""`distributary validate --database --secrets DIR` on the command line: what it refuses before
any database is asked, and what it says when there is nothing to ask."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from distributary.cli import main

LOG = """\
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: clicks}
spec: {partitions: 1, schema: "url STRING"}
"""
SOURCE = """\
apiVersion: distributary.dev/v1alpha1
kind: Source
metadata: {name: shop}
spec:
  postgres: {host: db.example, database: shop, user: cdc, passwordSecret: {name: shop-db}}
  tables: [{name: public.orders}]
"""


def _validate(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["validate", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_secrets_without_database_is_refused(tmp_path: Path) -> None:
    (tmp_path / "log.yaml").write_text(LOG)
    code, out, err = _validate(str(tmp_path), "--secrets", str(tmp_path))
    assert (code, out) == (1, "")
    assert err == "error: --secrets is read only with --database: add --database\n"


def test_a_pipeline_without_sources_has_no_database_to_ask(tmp_path: Path) -> None:
    (tmp_path / "log.yaml").write_text(LOG)
    code, out, err = _validate(str(tmp_path), "--database")
    assert (code, err) == (0, "")
    assert out.splitlines() == ["database: no Source to check", "valid: 1 log, 0 views, 0 jobs"]


def test_a_source_without_its_password_says_where_to_put_it(tmp_path: Path) -> None:
    (tmp_path / "source.yaml").write_text(SOURCE)
    code, out, err = _validate(str(tmp_path), "--database")
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "database: Source shop: reading shop@db.example:5432 as 'cdc' ...",
        f"{tmp_path / 'source.yaml'}: Source/default/shop: spec.postgres.passwordSecret names "
        "Secret 'shop-db': give --secrets DIR with the password in DIR/shop-db/password",
        "error: 1 problem found in the Sources' databases",
    ]
