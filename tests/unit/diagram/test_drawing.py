"""Drawing a pipeline: shapes per kind, aliases on edges, stable ids, namespaces apart."""

from __future__ import annotations

from typing import Any

from distributary.api import parse_resource
from distributary.api.names import DEFAULT_TOPIC_NAMES, use_topic_names
from distributary.diagram import draw, to_dot, to_mermaid
from distributary.graph import Pipeline

GV = "distributary.dev/v1alpha1"


def doc(kind: str, name: str, spec: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": GV,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def pipeline(namespace: str = "default") -> list[dict[str, Any]]:
    return [
        doc("Log", "page-views", {"schema": "user_id STRING"}, namespace),
        doc(
            "DerivedView",
            "per-user",
            {
                "inputs": [{"log": "page-views", "alias": "pv"}],
                "sql": "SELECT user_id, count(*) AS n FROM pv GROUP BY user_id",
                "output": {"mode": "upsert", "key": ["user_id"]},
            },
            namespace,
        ),
    ]


def build(documents: list[dict[str, Any]]) -> Pipeline:
    built = Pipeline.build(parse_resource(d) for d in documents)
    assert built.ok
    return built


def test_mermaid_draws_logs_as_cylinders_views_as_rounded_and_labels_aliases() -> None:
    text = to_mermaid(build(pipeline()))
    assert text.startswith("flowchart LR\n")
    assert '    log_default_page_views[("page-views")]' in text
    assert '    view_default_per_user("per-user<br/>upsert by user_id")' in text
    assert "    log_default_page_views -- pv --> view_default_per_user" in text
    assert "    view_default_per_user --> log_default_per_user" in text


def test_dot_uses_cylinders_and_labelled_edges() -> None:
    text = to_dot(build(pipeline()))
    assert 'log_default_page_views [label="page-views", shape=cylinder];' in text
    assert 'log_default_page_views -> view_default_per_user [label="pv"];' in text
    assert text.rstrip().endswith("}")


def test_two_namespaces_never_share_a_node_and_are_named_in_labels() -> None:
    use_topic_names("{namespace}.{name}")  # one Log name in two namespaces: two topics
    try:
        text = to_mermaid(build(pipeline("shop") + pipeline("blog")))
    finally:
        use_topic_names(DEFAULT_TOPIC_NAMES)
    assert "log_shop_page_views" in text
    assert "log_blog_page_views" in text
    assert '("shop/page-views")' in text


def test_drawing_is_deterministic() -> None:
    assert draw(build(pipeline()), "mermaid") == draw(build(pipeline()), "mermaid")
