"""How `distributary run` finds a Source's password: a secrets folder laid out as Kubernetes
mounts a Secret, and a reference Connect resolves itself in place of the password."""

from __future__ import annotations

from pathlib import Path

import pytest

from distributary.api.source import SecretKey
from distributary.backends.base import SecretMissingError
from distributary.graph import Pipeline
from distributary.local.sources import LocalSources, SourceError, secret_value
from distributary.plan.sources.source_plan import password_reference


def test_the_password_is_read_from_the_secrets_folder(tmp_path: Path) -> None:
    (tmp_path / "shop-db").mkdir()
    (tmp_path / "shop-db" / "password").write_text("s3cret\n")
    assert secret_value(tmp_path, SecretKey(name="shop-db"), "Source/default/shop") == "s3cret"


def test_a_missing_folder_or_file_names_the_field_and_what_to_write(tmp_path: Path) -> None:
    secret = SecretKey(name="shop-db", key="pw")
    with pytest.raises(SourceError) as no_folder:
        secret_value(None, secret, "Source/default/shop")
    assert str(no_folder.value) == (
        "Source/default/shop: spec.postgres.passwordSecret names Secret 'shop-db': give "
        "--secrets DIR with the password in DIR/shop-db/pw"
    )
    with pytest.raises(SourceError) as no_file:
        secret_value(tmp_path, secret, "Source/default/shop")
    assert str(no_file.value) == (
        f"Source/default/shop: spec.postgres.passwordSecret: there is no file "
        f"{tmp_path}/shop-db/pw: write the password of Secret 'shop-db', key 'pw', there"
    )


def run_sources(secrets: Path | None, state: Path) -> LocalSources:
    return LocalSources(Pipeline(), state, secrets, say=lambda _: None)


def test_connect_is_given_a_reference_not_the_password(tmp_path: Path) -> None:
    sources = run_sources(tmp_path, tmp_path / "state")
    reference = password_reference(sources.connect_secrets, "default", SecretKey(name="shop-db"))
    assert reference == f"${{dir:{tmp_path.resolve()}/shop-db:password}}"


def test_the_reconcile_reads_the_secret_from_the_folder_or_is_told_it_is_missing(
    tmp_path: Path,
) -> None:
    (tmp_path / "shop-db").mkdir()
    (tmp_path / "shop-db" / "password").write_text("s3cret\n")
    sources = run_sources(tmp_path, tmp_path / "state")
    field = "spec.postgres.passwordSecret"
    assert sources.secret("default", SecretKey(name="shop-db"), field) == "s3cret"
    with pytest.raises(SecretMissingError) as missing:
        sources.secret("default", SecretKey(name="other"), field)
    assert f"{field}: there is no file {tmp_path}/other/password" in str(missing.value)
