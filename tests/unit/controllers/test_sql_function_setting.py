"""The operator's setting that allows unsafe SQL functions in views: none by default, names
checked when the operator starts, and given to every graph a view is planned in."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from click.testing import CliRunner

from distributary.cli.operator import operator
from distributary.controllers.handling import Namespace
from distributary.controllers.settings import OperatorSettings


def test_by_default_no_function_is_allowed() -> None:
    assert OperatorSettings(bootstrap_servers="k:9092").allowed_sql_functions == frozenset()


def test_the_flag_refuses_a_function_it_does_not_know() -> None:
    result = CliRunner().invoke(
        operator, ["--bootstrap-servers", "k:9092", "--allow-sql-functions", "upper"]
    )
    assert result.exit_code == 2
    assert "not a function Distributary refuses" in result.output


def test_the_environment_variable_is_read_too() -> None:
    result = CliRunner().invoke(
        operator,
        ["--bootstrap-servers", "k:9092"],
        env={"DISTRIBUTARY_ALLOW_SQL_FUNCTIONS": "reflect,exec"},
    )
    assert result.exit_code == 2
    assert "exec" in result.output


def _namespace(allowed: frozenset[str]) -> Namespace:
    log = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": "clicks", "namespace": "shop"},
        "spec": {"schema": "user STRING"},
    }
    services = SimpleNamespace(
        settings=OperatorSettings(bootstrap_servers="k:9092", allowed_sql_functions=allowed)
    )
    indexes = {"logs": {"shop": [log]}, "views": {"shop": [VIEW]}, "jobs": {}}
    return Namespace(cast(Any, services), indexes)


VIEW = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": "ids", "namespace": "shop"},
    "spec": {
        "inputs": [{"log": "clicks", "alias": "src"}],
        "sql": "SELECT java_method('java.util.UUID', 'randomUUID') AS id FROM src",
    },
}


def test_a_views_lineage_is_checked_with_the_operators_setting() -> None:
    refused = _namespace(frozenset()).lineage(VIEW).pipeline
    assert [p.field for p in refused.problems] == ["spec.sql"]
    assert _namespace(frozenset({"java_method"})).lineage(VIEW).pipeline.ok
