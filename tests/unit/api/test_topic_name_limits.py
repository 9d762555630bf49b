"""A Log's topic and a view's output topic fit Kafka's rules before Kafka is asked: a name
Kafka would refuse, or one of Kafka's or Distributary's own topics, is refused with the field
and the fix (a 250-character view name used to crash `validate`)."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api import DerivedView, Log, ResourceError, parse_resource
from distributary.api.common import GROUP_VERSION
from distributary.api.names import MAX_OUTPUT_TOPIC


def _log(name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Log",
        "metadata": {"name": name},
        "spec": spec or {},
    }


def _view(name: str, output: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"inputs": [{"log": "clicks", "alias": "c"}], "sql": "SELECT * FROM c"}
    if output:
        spec["output"] = output
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "DerivedView",
        "metadata": {"name": name},
        "spec": spec,
    }


def _problem(document: dict[str, Any]) -> str:
    with pytest.raises(ResourceError) as caught:
        parse_resource(document)
    (problem,) = caught.value.problems
    return problem


@pytest.mark.parametrize("length", [250, 251, 253])
def test_a_log_named_longer_than_a_topic_needs_a_topic_name(length: int) -> None:
    problem = _problem(_log("l" * length))
    assert problem.startswith("metadata.name: ")
    assert f"is {length} characters long, more than the 249 allowed" in problem
    assert "set spec.topicName" in problem


@pytest.mark.parametrize("length", [250, 253])
def test_a_long_log_name_with_a_topic_name_is_fine(length: int) -> None:
    log = parse_resource(_log("l" * length, {"topicName": "short"}))
    assert isinstance(log, Log)
    assert log.topic == "short"


@pytest.mark.parametrize(
    "topic",
    [
        "__consumer_offsets",
        "__transaction_state",
        "__mine",
        "distributary.progress",
        "distributary.default.counts.dlq",
    ],
)
def test_a_topic_name_of_kafka_or_distributary_is_refused(topic: str) -> None:
    problem = _problem(_log("clicks", {"topicName": topic}))
    assert problem.startswith(f"spec.topicName: {topic!r} names ")
    assert problem.endswith("choose another topic name")


@pytest.mark.parametrize("name", ["distributary.progress", "distributary.default.counts.dlq"])
def test_a_log_whose_name_is_a_distributary_topic_is_refused(name: str) -> None:
    problem = _problem(_log(name))
    assert problem.startswith("metadata.name: ")
    assert "set spec.topicName" in problem


@pytest.mark.parametrize("length", [MAX_OUTPUT_TOPIC + 1, 250, 253])
def test_a_view_name_too_long_for_its_revision_topics_is_refused(length: int) -> None:
    problem = _problem(_view("v" * length))
    assert problem.startswith("metadata.name: ")
    assert f"more than the {MAX_OUTPUT_TOPIC} allowed" in problem
    assert f"set spec.output.log to a name of at most {MAX_OUTPUT_TOPIC} characters" in problem


@pytest.mark.parametrize("length", [MAX_OUTPUT_TOPIC + 1, 253])
def test_an_output_log_too_long_for_its_revision_topics_is_refused(length: int) -> None:
    problem = _problem(_view("v", {"log": "o" * length}))
    assert problem.startswith("spec.output.log: ")
    assert f"shorten spec.output.log to at most {MAX_OUTPUT_TOPIC} characters" in problem


@pytest.mark.parametrize("output", [None, {"log": "o" * MAX_OUTPUT_TOPIC}, {"log": "short"}])
def test_a_long_view_name_with_a_short_output_log_is_fine(output: dict[str, Any] | None) -> None:
    name = "v" * (MAX_OUTPUT_TOPIC if output is None else 253)
    view = parse_resource(_view(name, output))
    assert isinstance(view, DerivedView)
    assert len(f"{view.output_log}.r99999999") <= 249


@pytest.mark.parametrize("log", ["distributary.progress", "distributary.default.v.dlq"])
def test_an_output_log_named_as_a_distributary_topic_is_refused(log: str) -> None:
    assert _problem(_view("v", {"log": log})).startswith("spec.output.log: ")
