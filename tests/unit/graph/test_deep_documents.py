"""A pipeline file nested too deeply, in its YAML or in a view's SQL, is refused with one problem
naming the limit, by `distributary validate` and by the planners: never a RecursionError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from tests.unit.graph.refused import refused_conditions

from distributary.api.documents import MAX_YAML_DEPTH
from distributary.cli import main
from distributary.graph import load, load_pipeline
from distributary.plan.views.view_plan import namespace_pipeline
from distributary.sql import MAX_NESTING

DEEP = 10_000
HEAD = "apiVersion: distributary.dev/v1alpha1\nkind: Log\nmetadata: {name: clicks}\nspec:\n"


def documents() -> list[dict[str, Any]]:
    log = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": "clicks", "namespace": "shop"},
        "spec": {"schema": "user STRING, n INT"},
    }
    view = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "v", "namespace": "shop", "uid": "uid-v"},
        "spec": {
            "inputs": [{"log": "clicks", "alias": "clicks"}],
            "sql": f"SELECT {'(' * DEEP}n{')' * DEEP} AS m FROM clicks",
        },
    }
    return [log, view]


@pytest.mark.parametrize(
    "text",
    [
        HEAD + "  config: " + "[" * DEEP + "]" * DEEP + "\n",
        HEAD + "  config: " + "{a: " * DEEP + "1" + "}" * DEEP + "\n",
        "".join("  " * level + "- \n" for level in range(DEEP)),
        "".join("  " * level + "a:\n" for level in range(DEEP)) + "  " * DEEP + "b\n",
    ],
    ids=["flow-lists", "flow-maps", "block-lists", "block-maps"],
)
def test_yaml_nested_ten_thousand_levels_is_one_problem_naming_the_limit(
    tmp_path: Path, text: str
) -> None:
    (tmp_path / "deep.yaml").write_text(text)
    (problem,) = load([tmp_path]).problems
    assert problem.source == str(tmp_path / "deep.yaml")
    assert f"more than {MAX_YAML_DEPTH} levels deep" in problem.message
    assert "flatten the document" in problem.message
    assert "(line " in problem.message


def test_yaml_at_the_limit_is_read(tmp_path: Path) -> None:
    depth = MAX_YAML_DEPTH - 3  # the document, spec and config mappings are three levels
    config = "[" * depth + "]" * depth
    (tmp_path / "ok.yaml").write_text(HEAD + f"  config: {{k: {config}}}\n")
    problems = load([tmp_path]).problems
    assert not any("levels deep" in p.message for p in problems)
    (tmp_path / "ok.yaml").write_text(HEAD + f"  config: {{k: [{config}]}}\n")
    assert any("levels deep" in p.message for p in load([tmp_path]).problems)


def test_validate_reports_deep_yaml_and_deep_sql_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "deep.yaml").write_text("[" * DEEP + "]" * DEEP + "\n")
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump_all(documents()))
    result = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert f"more than {MAX_YAML_DEPTH} levels deep" in result.output
    assert "DerivedView/shop/v spec.sql: nests parentheses" in result.output
    assert "Traceback" not in result.output
    assert load_pipeline([tmp_path]).views  # the good file is still read


def test_the_planners_refuse_deep_sql_as_a_problem_of_the_view() -> None:
    pipeline, _, _ = namespace_pipeline(documents()[:1], documents()[1:])
    (problem,) = pipeline.problems
    assert (problem.resource, problem.field) == ("DerivedView/shop/v", "spec.sql")
    assert f"more than {MAX_NESTING} levels deep" in problem.message


def test_a_view_with_deep_sql_is_stalled_not_crashed() -> None:
    logs, views = documents()[:1], documents()[1:]
    refused_conditions(logs, views[0])
