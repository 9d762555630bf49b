"""A view whose SQL calls a function that runs code inside Spark (`reflect`, `java_method`, ...)
is refused unless the operator's settings allow that function: `distributary validate`, the
planners and the view's condition all say so, naming the resource, `spec.sql`, the function and
the setting that allows it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from tests.unit.graph.refused import refused_conditions

from distributary.cli import main
from distributary.graph import Pipeline, load_pipeline
from distributary.plan.views.view_plan import namespace_pipeline
from distributary.sql import ALLOW_FUNCTIONS_ENV

NS = "shop"
UUID = "SELECT reflect('java.util.UUID', 'randomUUID') AS id, user FROM src"


def log() -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": "clicks", "namespace": NS},
        "spec": {"schema": "user STRING, n INT"},
    }


def view(sql: str) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "ids", "namespace": NS, "uid": "uid-ids"},
        "spec": {"inputs": [{"log": "clicks", "alias": "src"}], "sql": sql},
    }


@pytest.mark.parametrize(
    ("sql", "name"),
    [
        (UUID, "reflect"),
        ("SELECT JAVA_METHOD('java.lang.System', 'getenv', 'HOME') AS h FROM src", "java_method"),
        ("SELECT user FROM src WHERE try_reflect('a.B', 'c') IS NULL", "try_reflect"),
        ("SELECT TRANSFORM(user) USING 'id' AS (out) FROM src", "transform"),
    ],
)
def test_a_view_calling_an_unsafe_function_is_refused_by_default(sql: str, name: str) -> None:
    pipeline, _, _ = namespace_pipeline([log()], [view(sql)])
    [problem] = [p for p in pipeline.problems if p.message.startswith("calls ")]
    assert problem.resource == f"DerivedView/{NS}/ids"
    assert problem.field == "spec.sql"
    assert f"calls {name}, which" in problem.message
    assert f"--allow-sql-functions {name}" in problem.message
    assert f"DISTRIBUTARY_ALLOW_SQL_FUNCTIONS={name}" in problem.message


def test_the_operator_setting_allows_the_functions_it_names_and_no_others() -> None:
    sql = "SELECT reflect('a.B', 'c') AS r, java_method('a.B', 'c') AS j FROM src"
    pipeline, _, _ = namespace_pipeline(
        [log()], [view(sql)], allowed_functions=frozenset({"reflect"})
    )
    assert ["java_method" in p.message for p in pipeline.problems] == [True]
    both = frozenset({"reflect", "java_method"})
    assert namespace_pipeline([log()], [view(sql)], allowed_functions=both)[0].ok


def test_the_kept_graph_is_not_given_for_another_setting() -> None:
    logs, views = [log()], [view(UUID)]
    logs[0]["metadata"]["resourceVersion"] = "1"
    views[0]["metadata"]["resourceVersion"] = "2"
    refused, _, _ = namespace_pipeline(logs, views)
    allowed, _, _ = namespace_pipeline(logs, views, allowed_functions=frozenset({"reflect"}))
    assert not refused.ok
    assert allowed.ok


def test_the_refusal_stalls_the_view_with_invalid_spec() -> None:
    conditions = refused_conditions([log()], view(UUID))
    assert conditions["Stalled"]["status"] == "True"
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Stalled"]["reason"] == "InvalidSpec"
    assert "spec.sql" in conditions["Stalled"]["message"]
    assert "reflect" in conditions["Stalled"]["message"]


def test_files_are_checked_with_the_same_default(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(yaml.safe_dump_all([log(), view(UUID)]))
    assert not load_pipeline([tmp_path]).ok
    assert load_pipeline([tmp_path], allowed_functions=frozenset({"reflect"})).ok


def test_a_safe_view_is_untouched() -> None:
    pipeline = Pipeline.build([])
    assert pipeline.ok
    checked, _, _ = namespace_pipeline([log()], [view("SELECT upper(user) AS u FROM src")])
    assert checked.ok


def test_the_commands_take_the_operators_setting_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "p.yaml").write_text(yaml.safe_dump_all([log(), view(UUID)]))
    monkeypatch.delenv(ALLOW_FUNCTIONS_ENV, raising=False)
    refused = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert refused.exit_code == 1
    assert "reflect" in refused.output
    assert ALLOW_FUNCTIONS_ENV in refused.output
    monkeypatch.setenv(ALLOW_FUNCTIONS_ENV, "reflect")
    allowed = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert allowed.exit_code == 0, allowed.output
    monkeypatch.setenv(ALLOW_FUNCTIONS_ENV, "reflect,system")
    wrong = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert wrong.exit_code != 0
    assert f"{ALLOW_FUNCTIONS_ENV}: system: not a function Distributary refuses" in wrong.output
