"""Two Logs of one namespace never claim topics Kafka would take for one: the same name, a view's
revision topic `<topic>.r<N>`, or names that differ only in '.' against '_' (Kafka refuses the
second, as they collide in its metrics)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from distributary.api import parse_resource
from distributary.api.common import GROUP_VERSION
from distributary.graph import Pipeline, load_pipeline


def _log(name: str, topic: str | None = None, namespace: str = "default") -> Any:
    spec = {"topicName": topic} if topic else {}
    meta = {"name": name, "namespace": namespace}
    return parse_resource(
        {"apiVersion": GROUP_VERSION, "kind": "Log", "metadata": meta, "spec": spec}
    )


def _view(name: str, namespace: str = "default") -> Any:
    return parse_resource(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "DerivedView",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"inputs": [{"log": "clicks", "alias": "c"}], "sql": "SELECT * FROM c"},
        }
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("a", "shared"), ("b", "shared")),
        (("a", "web.clicks"), ("b", "web_clicks")),
        (("a", "x_y.z"), ("b", "x.y_z")),
    ],
)
def test_two_logs_whose_topics_kafka_takes_for_one_are_a_problem(
    first: tuple[str, str], second: tuple[str, str]
) -> None:
    built = Pipeline.build([_log("clicks"), _log(*first), _log(*second)])
    (problem,) = built.problems
    assert problem.resource == "Log/default/b"
    assert problem.field == "spec.topicName"
    assert "Log/default/a" in problem.message


@pytest.mark.parametrize("topic", ["counts.r1", "counts.r17", "counts_r2"])
def test_a_log_on_a_views_revision_topic_is_a_problem(topic: str) -> None:
    built = Pipeline.build([_log("clicks"), _view("counts"), _log("taken", topic)])
    assert [(p.resource, p.field) for p in built.problems] in (
        [("Log/default/taken", "spec.topicName")],
        [("DerivedView/default/counts", "spec.output.log")],
    )


@pytest.mark.parametrize("topic", ["counts.r", "counts.rx", "counts.r1.b", "other"])
def test_topics_that_only_look_alike_are_fine(topic: str) -> None:
    assert Pipeline.build([_log("clicks"), _view("counts"), _log("taken", topic)]).ok


def test_namespaces_share_one_kafka_cluster_so_topics_clash_across_them() -> None:
    built = Pipeline.build(
        [
            _log("clicks"),
            _log("a", "shared"),
            _log("clicks", namespace="n"),
            _log("b", "shared", "n"),
        ]
    )
    assert {(str(p.resource), p.field) for p in built.problems} == {
        ("Log/n/clicks", "spec.topicName"),
        ("Log/n/b", "spec.topicName"),
    }


def test_a_view_named_too_long_for_its_topics_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    name = "v" * 250
    (tmp_path / "pipeline.yaml").write_text(
        f"""apiVersion: {GROUP_VERSION}
kind: Log
metadata: {{name: clicks}}
---
apiVersion: {GROUP_VERSION}
kind: DerivedView
metadata: {{name: {name}}}
spec:
  inputs: [{{log: clicks, alias: c}}]
  sql: SELECT * FROM c
"""
    )
    built = load_pipeline([tmp_path])
    (problem,) = built.problems
    assert problem.resource.startswith("DerivedView/")
    assert problem.field == "metadata.name"
    assert "set spec.output.log to a name of at most 239 characters" in problem.message
