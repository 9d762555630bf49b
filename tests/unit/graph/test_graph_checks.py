"""Each check of the pipeline graph: the bad case is found, and the problem names the resource,
the field and the fix. Other resources are still checked when one is bad."""

from __future__ import annotations

import textwrap

import yaml

from distributary.api import DerivedView, parse_resource
from distributary.graph import Declared, Pipeline, Ref, SpecProblem

LOGS = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: page-views}
spec:
  partitions: 4
  schema: user_id STRING, url STRING, ts TIMESTAMP
---
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: users}
spec:
  schema: user_id STRING, name STRING
"""


def view(
    name: str,
    sql: str,
    inputs: str = "page-views:views",
    output: str = "{}",
    namespace: str = "default",
) -> str:
    listed = ", ".join(
        f"{{log: {i.split(':')[0]}, alias: {i.split(':')[1]}}}" for i in inputs.split(",")
    )
    return textwrap.dedent(f"""
        apiVersion: distributary.dev/v1alpha1
        kind: DerivedView
        metadata: {{name: {name}, namespace: {namespace}}}
        spec:
          inputs: [{listed}]
          sql: "{sql}"
          output: {output}
        """)


def job(name: str, inputs: list[str], outputs: list[str]) -> str:
    return textwrap.dedent(f"""
        apiVersion: distributary.dev/v1alpha1
        kind: StreamJob
        metadata: {{name: {name}}}
        spec:
          image: example.org/job:1
          mainApplicationFile: local:///app/job.py
          inputs: [{", ".join(f"{{log: {i}}}" for i in inputs)}]
          outputs: [{", ".join(f"{{log: {o}}}" for o in outputs)}]
        """)


def build(*documents: str) -> Pipeline:
    text = "\n---\n".join(documents)
    return Pipeline.build(parse_resource(d) for d in yaml.safe_load_all(text) if d)


def only(pipeline: Pipeline, resource: str, field: str) -> SpecProblem:
    found = [p for p in pipeline.problems if p.resource == resource and p.field == field]
    assert len(found) == 1, [str(p) for p in pipeline.problems]
    return found[0]


def test_a_valid_pipeline_has_no_problem() -> None:
    pipeline = build(LOGS, view("clicks", "SELECT user_id, url FROM views"))
    assert pipeline.ok, [str(p) for p in pipeline.problems]


def test_an_input_that_names_no_log() -> None:
    pipeline = build(LOGS, view("clicks", "SELECT * FROM views", "page-view:views"))
    problem = only(pipeline, "DerivedView/default/clicks", "spec.inputs[0].log")
    assert "names no Log 'page-view'" in problem.message
    assert "did you mean 'page-views'?" in problem.message
    assert "declare a Log" in problem.message


def test_an_input_resolves_only_within_its_namespace() -> None:
    pipeline = build(LOGS, view("clicks", "SELECT * FROM views", namespace="shop"))
    problem = only(pipeline, "DerivedView/shop/clicks", "spec.inputs[0].log")
    assert "in namespace 'shop'" in problem.message


def test_a_job_input_that_names_no_log() -> None:
    pipeline = build(LOGS, job("audit", ["missing"], []))
    problem = only(pipeline, "StreamJob/default/audit", "spec.inputs[0].log")
    assert "names no Log 'missing'" in problem.message


def test_a_job_output_that_names_no_declared_log() -> None:
    pipeline = build(LOGS, job("audit", ["users"], ["audit-trail"]))
    problem = only(pipeline, "StreamJob/default/audit", "spec.outputs[0].log")
    assert "names no declared Log 'audit-trail'" in problem.message
    assert "declare a Log for the job to write" in problem.message


def test_a_cycle_names_every_resource_on_it() -> None:
    pipeline = build(
        LOGS,
        view("a", "SELECT user_id FROM x", "page-views:p,b:x"),
        view("b", "SELECT user_id FROM y", "a:y"),
    )
    problem = only(pipeline, "DerivedView/default/a", "spec.inputs[1].log")
    assert (
        "DerivedView/default/a -> Log/default/a -> DerivedView/default/b -> Log/default/b"
        " -> DerivedView/default/a"
    ) in problem.message
    assert "remove one of these inputs" in problem.message
    assert set(pipeline.order[-4:]) == {
        Ref("DerivedView", "default", "a"),
        Ref.log("a"),
        Ref("DerivedView", "default", "b"),
        Ref.log("b"),
    }


def test_a_job_reading_what_it_writes_is_a_cycle() -> None:
    pipeline = build(LOGS, job("loop", ["users"], ["users"]))
    problem = only(pipeline, "StreamJob/default/loop", "spec.inputs[0].log")
    assert "is on a cycle: StreamJob/default/loop -> Log/default/users" in problem.message


def test_two_views_writing_one_log() -> None:
    pipeline = build(
        LOGS,
        view("a", "SELECT url FROM views", output="{log: urls}"),
        view("b", "SELECT url FROM views", output="{log: urls}"),
    )
    problem = only(pipeline, "DerivedView/default/b", "spec.output.log")
    assert "DerivedView/default/a writes too" in problem.message
    assert "set spec.output.log to another name" in problem.message
    assert not [p for p in pipeline.problems if p.resource == "DerivedView/default/a"]


def test_a_view_writing_a_declared_log() -> None:
    pipeline = build(LOGS, view("users", "SELECT user_id FROM views"))
    problem = only(pipeline, "DerivedView/default/users", "spec.output.log")
    assert "declared as a Log too" in problem.message
    assert "set spec.output.log to another name or remove the Log" in problem.message
    assert pipeline.output(Ref("DerivedView", "default", "users")) is None


def test_a_view_and_a_job_writing_one_log() -> None:
    pipeline = build(LOGS, view("urls", "SELECT url FROM views"), job("j", ["users"], ["urls"]))
    problem = only(pipeline, "StreamJob/default/j", "spec.outputs[0].log")
    assert "DerivedView/default/urls writes too" in problem.message
    assert "write to a Log of the job's own" in problem.message


def test_two_jobs_writing_one_log() -> None:
    pipeline = build(LOGS, job("j1", ["page-views"], ["users"]), job("j2", [], ["users"]))
    problem = only(pipeline, "StreamJob/default/j2", "spec.outputs[0].log")
    assert "StreamJob/default/j1 writes too" in problem.message


def test_a_duplicate_name_names_both_files() -> None:
    first, second = (
        parse_resource(d)
        for d in yaml.safe_load_all(LOGS + "\n---\n" + LOGS)
        if d and d["metadata"]["name"] == "users"
    )
    pipeline = Pipeline.build([Declared(first, "a.yaml"), Declared(second, "b.yaml")])
    problem = only(pipeline, "Log/default/users", "metadata.name")
    assert problem.source == "b.yaml"
    assert "is declared twice (also in a.yaml)" in problem.message
    assert "rename one or remove the copy" in problem.message


def test_the_same_name_in_two_kinds_or_namespaces_is_no_duplicate() -> None:
    pipeline = build(
        LOGS,
        view("clicks", "SELECT url FROM views", output="{log: clicks-out}"),
        view("clicks", "SELECT 1 AS one FROM views", namespace="other", inputs="missing:views"),
    )
    assert [p.field for p in pipeline.problems] == ["spec.inputs[0].log"]


def test_an_upsert_view_without_key_is_refused_even_when_the_model_let_it_through() -> None:
    resource = parse_resource(
        yaml.safe_load(
            view("t", "SELECT user_id FROM views", output="{mode: upsert, key: [user_id]}")
        )
    )
    assert isinstance(resource, DerivedView)
    resource.spec.output.key = None
    pipeline = Pipeline.build([*(parse_resource(d) for d in yaml.safe_load_all(LOGS)), resource])
    problem = only(pipeline, "DerivedView/default/t", "spec.output.key")
    assert "is required when spec.output.mode is upsert" in problem.message


def test_sql_that_does_not_parse() -> None:
    pipeline = build(LOGS, view("v", "SELECT url FROM views WHERE"))
    problem = only(pipeline, "DerivedView/default/v", "spec.sql")
    assert "does not parse as Spark SQL" in problem.message


def test_sql_reading_a_table_that_is_not_an_alias() -> None:
    pipeline = build(LOGS, view("v", "SELECT url FROM page_views"))
    problem = only(pipeline, "DerivedView/default/v", "spec.sql")
    assert "reads table 'page_views', which is not an input alias" in problem.message
    assert "use one of views, or add an input with alias 'page_views'" in problem.message


def test_sql_using_a_column_the_input_schema_does_not_have() -> None:
    pipeline = build(LOGS, view("v", "SELECT user_id, urll FROM views"))
    problem = only(pipeline, "DerivedView/default/v", "spec.sql")
    assert "uses column 'urll', which table 'views' does not have" in problem.message
    assert "did you mean 'url'?" in problem.message
    assert "as declared in Log/default/page-views spec.schema" in problem.message


def test_an_upsert_key_the_query_does_not_output() -> None:
    pipeline = build(
        LOGS,
        view(
            "v",
            "SELECT user_id, count(*) AS n FROM views GROUP BY user_id",
            output="{mode: upsert, key: [user_id, day]}",
        ),
    )
    problem = only(pipeline, "DerivedView/default/v", "spec.output.key[1]")
    assert "names column 'day', which the query does not output" in problem.message
    assert "(it outputs user_id, n)" in problem.message
    assert "add it to the SELECT list or fix the key" in problem.message


def test_a_view_reading_a_view_is_checked_against_the_derived_schema() -> None:
    pipeline = build(
        LOGS,
        view("urls", "SELECT url, ts FROM views"),
        view("hosts", "SELECT user_id FROM u", "urls:u"),
    )
    problem = only(pipeline, "DerivedView/default/hosts", "spec.sql")
    assert "uses column 'user_id', which table 'u' does not have" in problem.message
    assert "Log/default/urls spec.schema" in problem.message


def test_a_log_schema_that_is_not_ddl() -> None:
    pipeline = build(
        LOGS.replace("user_id STRING, name STRING", "user_id STRING,, name"),
        view("v", "SELECT anything FROM u", "users:u"),
    )
    problem = only(pipeline, "Log/default/users", "spec.schema")
    assert "write it as Spark DDL" in problem.message
    assert pipeline.analysis(Ref("DerivedView", "default", "v")) is not None


def test_a_log_key_outside_its_schema() -> None:
    pipeline = build(LOGS.replace("name STRING", "name STRING\n  key: [id]"))
    problem = only(pipeline, "Log/default/users", "spec.key[0]")
    assert "spec.schema does not have" in problem.message


def test_one_bad_resource_does_not_stop_the_checks_of_the_others() -> None:
    pipeline = build(
        LOGS,
        view("a", "SELECT nope FROM views"),
        view("b", "SELEC"),
        view("c", "SELECT url FROM views", "ghost:views"),
        view("d", "SELECT url FROM views"),
    )
    assert {p.resource for p in pipeline.problems} == {
        "DerivedView/default/a",
        "DerivedView/default/b",
        "DerivedView/default/c",
    }
    assert pipeline.output(Ref("DerivedView", "default", "d")) is not None


def test_a_problem_reads_as_one_line() -> None:
    problem = SpecProblem(
        "DerivedView/default/v", "spec.sql", "uses column 'x'\nsomewhere", "views.yaml"
    )
    assert str(problem) == "views.yaml: DerivedView/default/v spec.sql: uses column 'x' somewhere"
    assert str(SpecProblem("", "", "is not valid YAML", "a.yaml")) == "a.yaml: is not valid YAML"
