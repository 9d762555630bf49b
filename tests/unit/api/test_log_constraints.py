"""What a Log spec refuses, each with a message that names the field and says what to do."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api import Log, ResourceError, parse_resource
from distributary.api.common import GROUP_VERSION


def _log(spec: dict[str, Any], name: str = "clicks") -> dict[str, Any]:
    return {"apiVersion": GROUP_VERSION, "kind": "Log", "metadata": {"name": name}, "spec": spec}


def _problems(document: dict[str, Any]) -> list[str]:
    with pytest.raises(ResourceError) as caught:
        parse_resource(document)
    assert caught.value.resource == f"Log/{document['metadata']['name']}"
    return caught.value.problems


def _only_problem(document: dict[str, Any]) -> str:
    problems = _problems(document)
    assert len(problems) == 1, problems
    return problems[0]


@pytest.mark.parametrize("topic", [".", "..", "a" * 250, "has space", "a/b", "ünïcode", ""])
def test_a_topic_name_kafka_refuses_is_refused(topic: str) -> None:
    assert _only_problem(_log({"topicName": topic})).startswith("spec.topicName: ")


@pytest.mark.parametrize(
    "topic", ["a.b", "web.page_views", "_", "...", "Mixed-Case_1.v2", "a" * 249]
)
def test_dots_underscores_and_249_characters_are_allowed_in_a_topic_name(topic: str) -> None:
    log = parse_resource(_log({"topicName": topic}))
    assert isinstance(log, Log)
    assert log.topic == topic


@pytest.mark.parametrize("name", ["Bad_Name", "under_score", "-lead", "trail-", "a..b"])
def test_a_resource_name_must_be_a_kubernetes_name(name: str) -> None:
    problem = _only_problem(_log({}, name=name))
    assert problem.startswith("metadata.name: ")
    assert repr(name) in problem


def test_a_resource_name_has_at_most_253_characters() -> None:
    problem = _only_problem(_log({}, name="a" * 254))
    assert problem == "metadata.name: String should have at most 253 characters"


@pytest.mark.parametrize("name", ["a", "page-views", "a.b-c", "0day"])
def test_kubernetes_names_with_dots_and_dashes_are_allowed(name: str) -> None:
    assert parse_resource(_log({}, name=name)).metadata.name == name


@pytest.mark.parametrize(
    ("partitions", "word"),
    [
        (0, "greater than or equal to 1"),
        (10001, "less than or equal to 10000"),
        (-1, "greater than or equal to 1"),
    ],
)
def test_partitions_out_of_range_are_refused(partitions: int, word: str) -> None:
    problem = _only_problem(_log({"partitions": partitions}))
    assert problem.startswith("spec.partitions: ")
    assert word in problem


@pytest.mark.parametrize("partitions", [1, 10000])
def test_partitions_at_the_bounds_are_accepted(partitions: int) -> None:
    log = parse_resource(_log({"partitions": partitions}))
    assert isinstance(log, Log)
    assert log.spec.partitions == partitions


@pytest.mark.parametrize("replicas", [0, 33])
def test_replicas_out_of_range_are_refused(replicas: int) -> None:
    assert _only_problem(_log({"replicas": replicas})).startswith("spec.replicas: ")


@pytest.mark.parametrize(
    "retention", [{"forever": True, "time": "7d"}, {"forever": True, "bytes": "1Gi"}]
)
def test_retention_forever_excludes_time_and_bytes(retention: dict[str, Any]) -> None:
    problem = _only_problem(_log({"retention": retention}))
    assert problem.startswith("spec.retention: ")
    assert "remove retention.time and retention.bytes" in problem


def test_retention_forever_false_may_sit_beside_time() -> None:
    log = parse_resource(_log({"retention": {"forever": False, "time": "1d"}}))
    assert isinstance(log, Log)
    assert log.spec.topic_configs() == {"retention.ms": "86400000"}


@pytest.mark.parametrize(
    ("retention", "field"),
    [
        ({"time": "7days"}, "spec.retention.time"),
        ({"time": "7"}, "spec.retention.time"),
        ({"bytes": "10GB"}, "spec.retention.bytes"),
        ({"bytes": -3}, "spec.retention.bytes"),
    ],
)
def test_retention_sizes_and_durations_in_the_wrong_form_are_refused(
    retention: dict[str, Any], field: str
) -> None:
    assert _only_problem(_log({"retention": retention})).startswith(f"{field}: ")


def test_an_unknown_config_key_is_refused_with_a_suggestion() -> None:
    problem = _only_problem(_log({"config": {"min.insync.replica": 2}}))
    assert "config key 'min.insync.replica' is not a Kafka topic config" in problem
    assert "did you mean 'min.insync.replicas'?" in problem


def test_an_unknown_config_key_with_nothing_close_gets_no_suggestion() -> None:
    problem = _only_problem(_log({"config": {"zzz": "1"}}))
    assert "config key 'zzz'" in problem
    assert "did you mean" not in problem


@pytest.mark.parametrize("key", ["cleanup.policy", "retention.ms", "retention.bytes"])
def test_configs_with_a_field_of_their_own_are_refused_in_config(key: str) -> None:
    problem = _only_problem(_log({"config": {key: "1"}}))
    assert f"config may not set {key}" in problem
    assert "use the compaction and retention fields" in problem


def test_config_values_may_be_strings_or_integers_but_nothing_else() -> None:
    log = parse_resource(_log({"config": {"min.insync.replicas": 2, "compression.type": "zstd"}}))
    assert isinstance(log, Log)
    problem = _only_problem(_log({"config": {"min.insync.replicas": [2]}}))
    assert problem.startswith("spec.config.min.insync.replicas: ")


def test_a_key_names_fields_of_the_json_value_even_without_a_schema() -> None:
    log = parse_resource(_log({"key": ["user_id"]}))
    assert isinstance(log, Log)
    assert log.spec.key == ["user_id"]


def test_a_misspelt_field_is_refused_not_dropped() -> None:
    problem = _only_problem(_log({"partitons": 3}))
    assert problem == "spec.partitons: unknown field: remove it or check its spelling"


def test_only_json_records_are_supported_for_now() -> None:
    assert _only_problem(_log({"format": "avro"})).startswith("spec.format: ")


def test_every_problem_of_a_resource_is_reported_at_once() -> None:
    problems = _problems(_log({"partitions": 0, "replicas": 0, "deletionPolicy": "Keep"}))
    assert sorted(p.split(":")[0] for p in problems) == [
        "spec.deletionPolicy",
        "spec.partitions",
        "spec.replicas",
    ]


def test_the_wrong_api_version_or_kind_is_refused_by_name() -> None:
    with pytest.raises(
        ResourceError, match=r"apiVersion: 'v1' is not 'distributary\.dev/v1alpha1'"
    ):
        parse_resource({**_log({}), "apiVersion": "v1"})
    with pytest.raises(ResourceError, match="kind: 'Topic' is not one of Log, DerivedView"):
        parse_resource({**_log({}), "kind": "Topic"})
