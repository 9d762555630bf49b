"""A view's output as its readers see it: a derived Log, and what later code reads about a view
(its input logs by alias, its query analysis)."""

from __future__ import annotations

from pathlib import Path

import yaml

from distributary.api import parse_resource
from distributary.graph import Pipeline, Ref, load_pipeline
from distributary.sql import OutputColumn

DATA = Path(__file__).resolve().parents[2] / "data" / "graph"
VIEW = Ref("DerivedView", "default", "enriched-views")
PLAN = Ref("DerivedView", "default", "views-per-plan")


def pipeline() -> Pipeline:
    return load_pipeline([DATA / "pipeline"])


def test_an_append_view_derives_a_log_with_its_schema_and_output_settings() -> None:
    log = pipeline().output(VIEW)
    assert log is not None
    assert (log.metadata.name, log.metadata.namespace, log.topic) == (
        "enriched-views",
        "default",
        "enriched-views",
    )
    assert log.spec.partitions == 6  # the most partitions of its inputs (6 and 2)
    assert log.spec.replicas == 2
    assert log.spec.retention is not None
    assert log.spec.retention.time == "3d"
    assert not log.spec.compaction
    assert log.spec.key is None
    assert log.spec.record_schema == (
        "user_id STRING, name STRING, plan STRING, url STRING, ts TIMESTAMP, duration_ms INT"
    )


def test_an_upsert_view_derives_a_compacted_keyed_log_named_by_its_output() -> None:
    built = pipeline()
    log = built.output(PLAN)
    assert log is not None
    assert log.metadata.name == "plan-counts"
    assert log is built.logs[Ref.log("plan-counts")]
    assert log.spec.compaction
    assert log.spec.key == ["plan", "window_start"]
    assert log.spec.record_schema == (
        "plan STRING, window_start TIMESTAMP, views BIGINT, total_ms BIGINT"
    )


def test_output_partitions_win_over_the_inputs() -> None:
    text = (DATA / "pipeline" / "views" / "enriched.yaml").read_text()
    text = text.replace("replicas: 2", "replicas: 2\n    partitions: 12")
    docs = [
        *yaml.safe_load_all((DATA / "pipeline" / "logs.yaml").read_text()),
        yaml.safe_load(text),
    ]
    built = Pipeline.build(
        parse_resource(d) for d in docs if d and d["apiVersion"].startswith("distributary")
    )
    log = built.output(VIEW)
    assert log is not None
    assert log.spec.partitions == 12


def test_a_column_of_unknown_type_is_read_as_string_and_the_key_is_kept(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        (DATA / "pipeline" / "logs.yaml").read_text()
        + "\n---\n"
        + "apiVersion: distributary.dev/v1alpha1\nkind: DerivedView\nmetadata: {name: hosts}\n"
        "spec:\n  inputs: [{log: page-views, alias: v}]\n"
        "  sql: SELECT user_id, parse_url(url, 'HOST') AS host FROM v\n"
        "  output: {mode: upsert, key: [user_id]}\n"
    )
    built = load_pipeline([tmp_path])
    log = built.output(Ref("DerivedView", "default", "hosts"))
    assert built.ok
    assert log is not None
    # Spark's from_json gives the JSON text of any value for a STRING column: nothing is lost.
    assert log.spec.record_schema == "user_id STRING, host STRING"
    assert log.spec.key == ["user_id"]
    assert log.spec.compaction


def test_the_input_logs_of_a_view_by_alias_include_derived_logs() -> None:
    built = pipeline()
    assert {a: log.metadata.name for a, log in built.inputs(VIEW).items()} == {
        "views": "page-views",
        "users": "users",
    }
    assert built.inputs(PLAN)["enriched"] is built.output(VIEW)


def test_the_analysis_of_a_view() -> None:
    analysis = pipeline().analysis(PLAN)
    assert analysis is not None
    assert analysis.tables == ("enriched",)
    assert analysis.columns[:2] == (
        OutputColumn("plan", "STRING"),
        OutputColumn("window_start", "TIMESTAMP"),
    )


def test_a_derived_log_is_a_resource_of_the_pipeline_with_its_views_file() -> None:
    built = pipeline()
    assert built.resource(Ref.log("plan-counts")) is built.output(PLAN)
    assert str(built.source(Ref.log("plan-counts"))).endswith("tables.yml")
    assert built.output(Ref.log("users")) is None


def test_the_deletion_marker_of_an_upsert_view_is_not_a_column_of_its_log(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        (DATA / "pipeline" / "logs.yaml").read_text()
        + "\n---\n"
        + "apiVersion: distributary.dev/v1alpha1\nkind: DerivedView\nmetadata: {name: live}\n"
        "spec:\n  inputs: [{log: page-views, alias: v}]\n"
        "  sql: SELECT user_id, max(duration_ms) AS longest, max(duration_ms) < 0 AS __deleted\n"
        "    FROM v GROUP BY user_id\n"
        "  output: {mode: upsert, key: [user_id]}\n"
    )
    built = load_pipeline([tmp_path])
    log = built.output(Ref("DerivedView", "default", "live"))
    assert built.ok, built.problems
    assert log is not None
    assert log.spec.record_schema == "user_id STRING, longest INT"
