"""Per-namespace topic names: one template for every Log without spec.topicName, its views'
revision topics, and the previews of `plan` and `validate`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from distributary.api import parse_resource
from distributary.api.log import Log
from distributary.api.names import (
    DEFAULT_TOPIC_NAMES,
    MAX_TOPIC_NAME,
    TopicNames,
    topic_names_problem,
    use_topic_names,
)
from distributary.cli.plan import plan
from distributary.graph import Pipeline
from distributary.plan.pipelines.pipeline import plan_pipeline, revision_topic

GV = "distributary.dev/v1alpha1"


@pytest.fixture
def per_namespace() -> Iterator[None]:
    use_topic_names("{namespace}.{name}")
    yield
    use_topic_names(DEFAULT_TOPIC_NAMES)


def log(name: str, namespace: str, **spec: object) -> Log:
    document = {"apiVersion": GV, "kind": "Log", "metadata": {"name": name, "namespace": namespace}}
    resource = parse_resource({**document, "spec": {"schema": "user STRING", **spec}})
    assert isinstance(resource, Log)
    return resource


def test_by_default_a_log_is_named_by_its_name() -> None:
    assert log("orders", "team-a").topic == "orders"


@pytest.mark.usefixtures("per_namespace")
def test_a_template_names_topics_per_namespace_and_spec_topic_name_wins() -> None:
    assert log("orders", "team-a").topic == "team-a.orders"
    assert log("orders", "team-a", topicName="shared.orders").topic == "shared.orders"
    assert revision_topic(log("orders", "team-a"), 3) == "team-a.orders.r3"


def test_a_name_longer_than_kafka_allows_is_shortened_with_a_digest() -> None:
    naming = TopicNames("{namespace}.{name}")
    topic = naming.topic("n" * 63, "x" * 240)
    assert len(topic) == MAX_TOPIC_NAME
    assert topic != naming.topic("n" * 63, "x" * 239 + "y")


def test_templates_that_cannot_make_topic_names_are_refused() -> None:
    assert topic_names_problem("{namespace}.{name}") is None
    assert topic_names_problem("{namespace}_{name}") is None
    assert "must contain {name}" in (topic_names_problem("{namespace}") or "")
    assert "is not one of" in (topic_names_problem("{cluster}.{name}") or "")
    assert "not allowed in a topic name" in (topic_names_problem("{namespace}/{name}") or "")
    assert "Kafka internal topic" in (topic_names_problem("__{name}") or "")
    assert "is not a template" in (topic_names_problem("{name") or "")
    with pytest.raises(ValueError, match="must contain"):
        use_topic_names("{namespace}")


def pipeline(namespace: str) -> list[object]:
    return [
        log("orders", namespace),
        parse_resource(
            {
                "apiVersion": GV,
                "kind": "DerivedView",
                "metadata": {"name": "big", "namespace": namespace},
                "spec": {
                    "inputs": [{"log": "orders", "alias": "o"}],
                    "sql": "SELECT user FROM o",
                    "output": {"mode": "append"},
                },
            }
        ),
    ]


def test_validate_finds_one_topic_for_two_namespaces_under_default_names() -> None:
    built = Pipeline.build([*pipeline("team-a"), *pipeline("team-b")])  # type: ignore[list-item]
    clashes = {(str(p.resource), p.field) for p in built.problems}
    assert clashes == {
        ("DerivedView/team-b/big", "spec.output.log"),
        ("Log/team-b/orders", "spec.topicName"),
    }


@pytest.mark.usefixtures("per_namespace")
def test_plan_previews_per_namespace_topics_for_logs_and_revisions() -> None:
    built = Pipeline.build([*pipeline("team-a"), *pipeline("team-b")])  # type: ignore[list-item]
    assert built.ok
    topics = sorted(planned.topic.name for planned in plan_pipeline(built).topics)
    assert topics == ["team-a.big.r1", "team-a.orders", "team-b.big.r1", "team-b.orders"]


@pytest.mark.usefixtures("per_namespace")
def test_distributary_plan_previews_the_operators_topic_names() -> None:
    examples = Path(__file__).resolve().parents[3] / "examples" / "clickstream"
    result = CliRunner().invoke(plan, [str(examples), "--topic-names", "{namespace}.{name}"])
    assert result.exit_code == 0, result.output
    assert "+ default.page-views " in result.output
    assert "writes default.enriched-page-views.r1 (append)" in result.output
