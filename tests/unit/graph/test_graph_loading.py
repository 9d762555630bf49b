"""Loading resources from files and folders: recursion, multi-document files, skipped documents,
and problems that name the file instead of stopping the load."""

from __future__ import annotations

from pathlib import Path

from distributary.graph import Ref, load, load_pipeline

DATA = Path(__file__).resolve().parents[2] / "data" / "graph"


def test_a_folder_is_read_recursively_in_name_order() -> None:
    loaded = load([DATA / "pipeline"])
    assert [Ref.of(d.resource).name for d in loaded.resources] == [
        "page-views",
        "users",
        "alerts",
        "enriched-views",
        "views-per-plan",
        "alerter",
    ]
    assert loaded.problems == ()


def test_each_resource_knows_its_file() -> None:
    loaded = load([DATA / "pipeline"])
    sources = {Ref.of(d.resource).name: Path(str(d.source)).name for d in loaded.resources}
    assert sources["users"] == "logs.yaml"
    assert sources["views-per-plan"] == "tables.yml"


def test_documents_of_other_apis_are_skipped_and_counted_and_empty_ones_ignored() -> None:
    assert load([DATA / "pipeline" / "logs.yaml"]).skipped == 1


def test_files_and_folders_can_be_mixed() -> None:
    loaded = load([DATA / "pipeline" / "logs.yaml", DATA / "pipeline" / "views"])
    assert len(loaded.resources) == 6


def test_yaml_syntax_errors_name_the_file_and_the_line() -> None:
    loaded = load([DATA / "broken" / "syntax.yaml"])
    (problem,) = loaded.problems
    assert problem.source is not None
    assert problem.source.endswith("syntax.yaml")
    assert "is not valid YAML" in problem.message
    assert "(line 5, column 1)" in problem.message


def test_invalid_resources_become_problems_and_the_rest_still_load() -> None:
    loaded = load([DATA / "broken" / "invalid.yaml"])
    assert [Ref.of(d.resource).name for d in loaded.resources] == ["fine"]
    problems = {(p.resource, p.field) for p in loaded.problems}
    assert problems == {
        ("Log/shop/bad", "spec.partitions"),
        ("DerivedView/default/no-inputs", "spec.inputs"),
    }
    assert all(str(p.source).endswith("invalid.yaml") for p in loaded.problems)


def test_a_missing_path_is_a_problem() -> None:
    loaded = load([DATA / "nowhere"])
    (problem,) = loaded.problems
    assert "no such file or folder" in problem.message


def test_a_document_that_is_not_a_mapping_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "list.yaml").write_text("- just\n- a list\n")
    (problem,) = load([tmp_path]).problems
    assert "document 1 is not a mapping" in problem.message


def test_load_pipeline_puts_loading_problems_first(tmp_path: Path) -> None:
    (tmp_path / "a-view.yaml").write_text(
        "apiVersion: distributary.dev/v1alpha1\nkind: DerivedView\nmetadata: {name: v}\n"
        "spec: {inputs: [{log: ghost, alias: g}], sql: SELECT x FROM g}\n"
    )
    (tmp_path / "b-broken.yaml").write_text("kind: [\n")
    pipeline = load_pipeline([tmp_path, DATA / "pipeline"])
    assert pipeline.skipped == 1
    assert [(p.resource, p.field) for p in pipeline.problems] == [
        ("", ""),
        ("DerivedView/default/v", "spec.inputs[0].log"),
    ]
    assert str(pipeline.problems[0]).startswith(f"{tmp_path / 'b-broken.yaml'}: is not valid YAML")
    assert Ref.log("plan-counts") in pipeline.logs


def test_the_fixture_pipeline_is_valid() -> None:
    pipeline = load_pipeline([DATA / "pipeline"])
    assert pipeline.ok, [str(p) for p in pipeline.problems]
