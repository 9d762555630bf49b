"""Every name Distributary derives from a resource's name is valid where it is used, for a name
of every length a Kubernetes name may have (1 to 253) and several mixes of characters: topics by
Kafka's rules, consumer groups and transactional ids within a topic's limits, SparkApplications,
driver pods and their Services as DNS-1123 labels, KafkaTopic names as DNS-1123 subdomains, label
values by Kubernetes' rules. A name whose derived topic would overflow is refused instead, with the
field named (see docs/names.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from distributary.api import DerivedView, Log, ResourceError, parse_resource
from distributary.api.common import GROUP_VERSION
from distributary.api.names import (
    MAX_DNS_LABEL,
    MAX_GROUP_ID,
    MAX_OUTPUT_TOPIC,
    MAX_TOPIC_NAME,
    is_dns_label,
    is_dns_subdomain,
    is_label_value,
    is_topic_name,
)
from distributary.plan.applications.runner_spec import consumer_group, dead_letter_topic
from distributary.plan.applications.spark import application_name, driver_pod_name, label_value
from distributary.plan.kafka_topics.topics import kafka_topic_name
from distributary.plan.pipelines.pipeline import revision_topic, view_output_metadata

MIXES = ("a", "ab.", "1-x", "a-b.c9", "0")
NAMESPACES = ("default", "n" * 63)
REVISIONS = (1, 12, 99_999_999)


def _name(pattern: str, length: int) -> str:
    name = (pattern * length)[:length]
    return name[:-1] + "z" if name[-1] in ".-" else name


def _names() -> Iterator[str]:
    for pattern in MIXES:
        for length in range(1, 254):
            yield _name(pattern, length)


NAMES = sorted(set(_names()))


def test_the_names_cover_every_length_and_are_kubernetes_names() -> None:
    assert {len(name) for name in NAMES} == set(range(1, 254))
    assert all(is_dns_subdomain(name) for name in NAMES)


def _group_id(group: str) -> bool:
    return len(group) <= MAX_GROUP_ID and is_topic_name(group)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_dead_letter_topics_consumer_groups_and_transactional_ids_fit_kafka(
    namespace: str,
) -> None:
    for name in NAMES:
        dead_letters = dead_letter_topic(namespace, name)
        assert is_topic_name(dead_letters), name
        assert dead_letters.endswith(".dlq"), name
        assert is_dns_subdomain(kafka_topic_name(dead_letters)), name
        groups = [consumer_group(namespace, name, revision) for revision in REVISIONS]
        # The group is also the revision's transactional id.
        assert all(_group_id(group) for group in groups), name
        assert len({group.rsplit(".r", 1)[0] for group in groups}) == 1, name


def test_spark_application_driver_pod_and_service_names_are_dns_labels() -> None:
    for name in NAMES:
        for kind in ("DerivedView", "StreamJob"):
            for revision in REVISIONS[:2]:
                app = application_name(name, revision, kind)  # type: ignore[arg-type]
                assert is_dns_label(app), (name, app)
                assert app[0].isalpha(), (name, app)
                assert is_dns_label(driver_pod_name(app)), name
                assert is_dns_label(f"{app}-ui-svc"), name
                assert len(f"{app}-ui-svc") <= MAX_DNS_LABEL


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_label_values_made_from_names_are_label_values(namespace: str) -> None:
    for name in NAMES:
        assert is_label_value(label_value(name)), name
        assert is_label_value(label_value(f"{namespace}/{name}")), name
        marks = view_output_metadata(name)
        assert all(is_label_value(value) for value in marks["labels"].values()), name
        shortened = marks["labels"]["distributary.dev/view"] != name
        assert marks.get("annotations", {}).get("distributary.dev/view") == (
            name if shortened else None
        )


def _log(name: str) -> Log | str:
    document = {"apiVersion": GROUP_VERSION, "kind": "Log", "metadata": {"name": name}}
    try:
        resource = parse_resource(document)
    except ResourceError as exc:
        return str(exc)
    assert isinstance(resource, Log)
    return resource


def test_a_log_named_after_its_topic_is_a_valid_topic_or_refused_naming_the_field() -> None:
    for name in NAMES:
        log = _log(name)
        if len(name) <= MAX_TOPIC_NAME:
            assert isinstance(log, Log), log
            assert is_topic_name(log.topic)
            assert is_dns_subdomain(kafka_topic_name(log.topic))
        else:
            assert isinstance(log, str)
            assert "metadata.name: " in log
            assert "set spec.topicName" in log


def _view(name: str) -> DerivedView | str:
    document = {
        "apiVersion": GROUP_VERSION,
        "kind": "DerivedView",
        "metadata": {"name": name},
        "spec": {"inputs": [{"log": "clicks", "alias": "c"}], "sql": "SELECT * FROM c"},
    }
    try:
        resource = parse_resource(document)
    except ResourceError as exc:
        return str(exc)
    assert isinstance(resource, DerivedView)
    return resource


def test_a_views_revision_topics_are_valid_topics_or_the_view_is_refused() -> None:
    for name in NAMES:
        view = _view(name)
        if len(name) > MAX_OUTPUT_TOPIC:
            assert isinstance(view, str)
            assert "metadata.name: " in view
            assert "set spec.output.log" in view
            continue
        assert isinstance(view, DerivedView), view
        output = Log.model_validate(
            {"metadata": {"name": view.output_log}, "spec": {"topicName": view.output_log}}
        )
        for revision in REVISIONS:
            topic = revision_topic(output, revision)
            assert is_topic_name(topic), name
            assert topic == f"{name}.r{revision}", name
            assert is_dns_subdomain(kafka_topic_name(topic)), name


@pytest.mark.parametrize("revision", [1, 10**9, 10**12])
def test_a_revision_topic_never_outgrows_kafka_even_past_the_room_kept(revision: int) -> None:
    output = Log.model_validate({"metadata": {"name": "o"}, "spec": {"topicName": "o" * 249}})
    topic = revision_topic(output, revision)
    assert is_topic_name(topic)
    assert topic.endswith(f".r{revision}")
