"""What `resolve_sources` says of each Source's database, for `run` (its tables) and for
`validate --database` (its tables, and whether the server and user allow capture): each problem
opens with the file and the Source, then the field. The database is stood in for here; the real
one is in tests/integration/test_validate_database.py."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from distributary.databases.postgres import DatabaseError
from distributary.graph import load_pipeline
from distributary.local import sources
from distributary.plan.sources.source_plan import (
    CaptureRights,
    Column,
    TableShape,
    resolve_table,
    resolved,
)
from distributary.reconcile.source import table_logs

SOURCE = """\
apiVersion: distributary.dev/v1alpha1
kind: Source
metadata: {name: shop}
spec:
  postgres: {host: db.example, database: shop, user: cdc, passwordSecret: {name: shop-db}}
  tables: [{name: public.orders}]
"""
ORDERS = TableShape("public.orders", (Column("id", "integer"), Column("who", "text")), ("id",))


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "source.yaml").write_text(SOURCE)
    (tmp_path / "secrets" / "shop-db").mkdir(parents=True)
    (tmp_path / "secrets" / "shop-db" / "password").write_text("s3cret\n")
    return tmp_path / "source.yaml", tmp_path / "secrets"


class FakeDatabase:
    """The database as `resolve_sources` asks it: a connection, the tables, the rights."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, shape: TableShape | None) -> None:
        self.asked_rights = False
        self.rights = CaptureRights("logical", True, False)
        self.refusal: DatabaseError | None = None
        monkeypatch.setattr(sources, "connect", self.connect)
        monkeypatch.setattr(
            sources, "table_shapes", lambda _db, tables: dict.fromkeys(tables, shape)
        )
        monkeypatch.setattr(sources, "capture_rights", self.capture_rights)

    def connect(self, _connection: Any, password: str) -> contextlib.nullcontext[object]:
        assert password == "s3cret"
        if self.refusal is not None:
            raise self.refusal
        return contextlib.nullcontext(object())

    def capture_rights(self, _db: object, _publication: str, _tables: Any) -> CaptureRights:
        self.asked_rights = True
        return self.rights


def test_the_tables_columns_become_the_logs_schema(
    monkeypatch: pytest.MonkeyPatch, folders: tuple[Path, Path]
) -> None:
    database = FakeDatabase(monkeypatch, ORDERS)
    file, secrets = folders
    resolved, problems = sources.resolve_sources(load_pipeline([file]), secrets)
    assert problems == []
    assert database.asked_rights
    (log,) = resolved.table_logs(next(iter(resolved.captures))).values()
    assert log.spec.record_schema == "`id` INT, `who` STRING, __deleted BOOLEAN"


def test_run_and_validate_ask_whether_the_user_may_capture(
    monkeypatch: pytest.MonkeyPatch, folders: tuple[Path, Path]
) -> None:
    database = FakeDatabase(monkeypatch, ORDERS)
    database.rights = CaptureRights("replica", True, False)
    file, secrets = folders
    said: list[str] = []
    _, problems = sources.resolve_sources(load_pipeline([file]), secrets, say=said.append)
    assert said == ["Source shop: reading shop@db.example:5432 as 'cdc' ..."]
    assert len(problems) == 1
    assert problems[0].startswith(
        f"{file}: Source/default/shop spec.postgres: the server at shop@db.example:5432 has "
        "wal_level 'replica'"
    )


def test_each_problem_opens_with_the_file_the_source_and_the_field(
    monkeypatch: pytest.MonkeyPatch, folders: tuple[Path, Path]
) -> None:
    database = FakeDatabase(monkeypatch, None)
    file, secrets = folders
    _, problems = sources.resolve_sources(load_pipeline([file]), secrets)
    assert [p.split(": ", 2)[:2] for p in problems] == [
        [str(file), "Source/default/shop spec.tables[0].name"]
    ]
    database.refusal = DatabaseError("cannot connect: it said no", "spec.postgres.passwordSecret")
    database.asked_rights = False
    _, problems = sources.resolve_sources(load_pipeline([file]), secrets)
    assert problems == [
        f"{file}: Source/default/shop spec.postgres.passwordSecret: cannot connect: it said no"
    ]
    assert not database.asked_rights


def test_a_column_added_while_the_run_goes_on_is_said_once_and_waits_for_the_next_start(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    file, secrets = folders
    FakeDatabase(monkeypatch, ORDERS)
    pipeline, problems = sources.resolve_sources(load_pipeline([file]), secrets)
    assert problems == []
    said: list[str] = []
    run = sources.LocalSources(pipeline, tmp_path / "state", secrets, say=said.append)
    source = next(iter(pipeline.captures.values()))
    wider = TableShape("public.orders", (*ORDERS.columns, Column("note", "text")), ("id",))
    now = resolved(source, [resolve_table(source, 0, source.spec.tables[0], wider)])
    owner = {"apiVersion": "distributary.dev/v1alpha1", "kind": "Source", "name": "shop",
             "uid": "local:default/shop"}  # fmt: skip
    run.say_new_columns(table_logs(now, owner))
    run.say_new_columns(table_logs(now, owner))
    run.say_new_columns(table_logs(source, owner))  # as it was: nothing to say
    assert said == [
        "source shop: table public.orders has new column(s) note: its records carry them from "
        "the first change on; Log shop-orders's schema gains them when the run starts "
        "again (views reading it then reprocess)"
    ]


def test_the_run_says_when_a_source_reads_changes_and_once_why_it_is_stalled(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    file, secrets = folders
    FakeDatabase(monkeypatch, ORDERS)
    pipeline, _ = sources.resolve_sources(load_pipeline([file]), secrets)
    said: list[str] = []
    run = sources.LocalSources(pipeline, tmp_path / "state", secrets, say=said.append)
    source = next(iter(pipeline.captures.values()))

    def conditions(*found: tuple[str, str, str]) -> None:
        listed = [{"type": t, "status": "True" if r in ("Capturing", "Paused") or t != "Ready"
                   else "False", "reason": r, "message": f"{r}."} for t, r, _ in found]  # fmt: skip
        run.statuses["default/shop"] = {"status": {"conditions": listed}}
        run.say_state(source)

    conditions(("Ready", "Starting", ""), ("Reconciling", "Starting", ""))
    conditions(("Ready", "Capturing", ""))
    conditions(("Ready", "Capturing", ""))
    conditions(("Ready", "TableProblem", ""), ("Stalled", "TableProblem", ""))
    conditions(("Ready", "TableProblem", ""), ("Stalled", "TableProblem", ""))
    conditions(("Ready", "Paused", ""))
    assert said == [
        "source shop: reading changes",
        "source shop: TableProblem: TableProblem.",
        "source shop: paused",
    ]


def test_the_reconcile_is_given_the_source_as_declared_not_as_the_database_had_it(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Under the operator the reconcile reads the Source as applied and the tables' columns from
    the database each time; a run's reconcile too, so a column added later is no conflict with a
    schema the run filled in."""
    file, secrets = folders
    FakeDatabase(monkeypatch, ORDERS)
    pipeline, _ = sources.resolve_sources(load_pipeline([file]), secrets)
    (source,) = pipeline.captures.values()
    assert source.spec.tables[0].record_schema  # the columns, as the run started
    run = sources.LocalSources(pipeline, tmp_path / "state", secrets, say=lambda _: None)
    body = run.read(source)
    assert "schema" not in body["spec"]["tables"][0]
    assert body["metadata"] == {"name": "shop", "namespace": "default",
                                "uid": "local:default/shop", "generation": 1}  # fmt: skip
