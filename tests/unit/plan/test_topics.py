"""The topic planner: each action, each refusal, their combinations, and the Strimzi KafkaTopic."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api.log import Log
from distributary.plan.kafka_topics.topics import (
    REFUSED_AGAIN,
    AddPartitions,
    AlterConfigs,
    CreateTopic,
    DesiredTopic,
    ObservedTopic,
    ReassignReplicas,
    described,
    desired_topic,
    kafka_topic_manifest,
    kafka_topic_name,
    plan_topic,
    refusal_message,
    refused_field,
)


def make_log(name: str = "page-views", **spec: Any) -> Log:
    return Log.model_validate({"metadata": {"name": name, "namespace": "shop"}, "spec": spec})


def desired(
    partitions: int = 3, replicas: int | None = None, configs: dict[str, str] | None = None
) -> DesiredTopic:
    return DesiredTopic("page-views", partitions, replicas, configs or {})


def observed(
    partitions: int = 3, replicas: int = 1, configs: dict[str, str] | None = None
) -> ObservedTopic:
    return ObservedTopic("page-views", partitions, replicas, configs or {})


# --- desired state from a Log ---------------------------------------------------------------


def test_desired_topic_takes_name_partitions_replicas_and_configs_from_the_log() -> None:
    log = make_log(
        topicName="web.page_views",
        partitions=6,
        replicas=3,
        retention={"time": "7d"},
        compaction=True,
        config={"min.insync.replicas": 2},
    )
    topic = desired_topic(log)
    assert topic == DesiredTopic(
        "web.page_views",
        6,
        3,
        {
            "cleanup.policy": "compact,delete",
            "min.insync.replicas": "2",
            "retention.ms": "604800000",
        },
    )


def test_desired_topic_defaults_to_the_log_name_and_the_broker_replicas() -> None:
    topic = desired_topic(make_log())
    assert (topic.name, topic.partitions, topic.replicas, dict(topic.configs)) == (
        "page-views",
        3,
        None,
        {},
    )


def test_desired_topic_can_name_another_topic_with_the_same_settings() -> None:
    topic = desired_topic(make_log(partitions=4), topic="shop.counts.r2")
    assert (topic.name, topic.partitions) == ("shop.counts.r2", 4)


# --- actions ----------------------------------------------------------------------------------


def test_a_missing_topic_is_created_with_everything_the_spec_asks_for() -> None:
    plan = plan_topic(desired(6, 3, configs={"retention.ms": "1000"}), None)
    assert plan.actions == (CreateTopic("page-views", 6, 3, {"retention.ms": "1000"}),)
    assert plan.refusals == ()
    assert plan.managed_configs == frozenset({"retention.ms"})


def test_a_topic_as_the_spec_asks_is_in_sync() -> None:
    plan = plan_topic(
        desired(3, 1, configs={"retention.ms": "1000"}),
        observed(3, 1, configs={"retention.ms": "1000"}),
    )
    assert plan.in_sync
    assert plan.actions == ()


def test_more_partitions_are_added_as_a_new_total() -> None:
    plan = plan_topic(desired(8), observed(3))
    assert plan.actions == (AddPartitions(total=8),)
    assert not plan.in_sync


def test_only_configs_that_differ_are_set() -> None:
    plan = plan_topic(
        desired(configs={"retention.ms": "2000", "segment.ms": "600000"}),
        observed(configs={"retention.ms": "1000", "segment.ms": "600000"}),
    )
    assert plan.actions == (AlterConfigs(set={"retention.ms": "2000"}, delete=()),)


def test_a_config_the_operator_set_and_the_spec_dropped_is_deleted() -> None:
    plan = plan_topic(
        desired(),
        observed(configs={"retention.ms": "1000"}),
        managed_configs=frozenset({"retention.ms"}),
    )
    assert plan.actions == (AlterConfigs(set={}, delete=("retention.ms",)),)
    assert plan.managed_configs == frozenset()


def test_a_config_the_spec_never_named_is_left_alone() -> None:
    plan = plan_topic(
        desired(), observed(configs={"segment.ms": "60000"}), managed_configs=frozenset()
    )
    assert plan.actions == ()


def test_a_managed_config_already_gone_from_the_topic_needs_no_delete() -> None:
    plan = plan_topic(desired(), observed(), managed_configs=frozenset({"retention.ms"}))
    assert plan.actions == ()


def test_a_replica_change_is_planned_when_the_backend_can_reassign() -> None:
    plan = plan_topic(desired(replicas=3), observed(replicas=1), can_reassign=True)
    assert plan.actions == (ReassignReplicas(replicas=3),)
    assert plan.refusals == ()


def test_unset_replicas_never_changes_the_topic() -> None:
    assert plan_topic(desired(replicas=None), observed(replicas=3)).in_sync


# --- refusals ---------------------------------------------------------------------------------


def test_fewer_partitions_is_refused_naming_the_field_and_the_fix() -> None:
    plan = plan_topic(desired(2), observed(6))
    assert plan.actions == ()
    (refusal,) = plan.refusals
    assert (refusal.field, refusal.reason) == ("spec.partitions", "FewerPartitions")
    assert "spec.partitions is 2" in refusal.message
    assert "set spec.partitions to 6 or more" in refusal.message


def test_a_replica_change_is_refused_when_the_backend_cannot_reassign() -> None:
    plan = plan_topic(desired(replicas=3), observed(replicas=1), can_reassign=False)
    assert plan.actions == ()
    (refusal,) = plan.refusals
    assert (refusal.field, refusal.reason) == ("spec.replicas", "ReplicasImmutable")
    assert "set spec.replicas back to 1" in refusal.message


def test_a_rename_is_refused_and_nothing_is_done_to_either_topic() -> None:
    plan = plan_topic(
        DesiredTopic("page-views-v2", 8, None, {"retention.ms": "1"}),
        observed(3),
        managed_configs=frozenset({"segment.ms"}),
    )
    assert plan.actions == ()
    (refusal,) = plan.refusals
    assert (refusal.field, refusal.reason) == ("spec.topicName", "TopicRenamed")
    assert "'page-views-v2'" in refusal.message
    assert "set spec.topicName back to 'page-views'" in refusal.message
    # The configs the operator manages on the real topic stay recorded.
    assert plan.managed_configs == frozenset({"segment.ms"})


def test_refused_partitions_do_not_hide_a_config_change() -> None:
    plan = plan_topic(
        desired(2, configs={"retention.ms": "5"}), observed(6, configs={"retention.ms": "1"})
    )
    assert plan.actions == (AlterConfigs(set={"retention.ms": "5"}),)
    assert [r.reason for r in plan.refusals] == ["FewerPartitions"]


def test_refused_replicas_do_not_hide_added_partitions_or_configs() -> None:
    plan = plan_topic(
        desired(6, 3, configs={"retention.ms": "5"}),
        observed(3, 1),
        managed_configs=frozenset({"segment.ms"}),
    )
    assert plan.actions == (
        AlterConfigs(set={"retention.ms": "5"}),
        AddPartitions(total=6),
    )
    assert [r.reason for r in plan.refusals] == ["ReplicasImmutable"]


def test_both_refusals_are_reported_together() -> None:
    plan = plan_topic(desired(1, 3), observed(4, 1))
    assert plan.actions == ()
    assert [r.field for r in plan.refusals] == ["spec.partitions", "spec.replicas"]


def test_every_action_at_once_in_a_stable_order() -> None:
    plan = plan_topic(
        desired(6, 3, configs={"retention.ms": "5"}),
        observed(3, 1, configs={"retention.ms": "1", "segment.ms": "9"}),
        managed_configs=frozenset({"segment.ms", "retention.ms"}),
        can_reassign=True,
    )
    assert plan.actions == (
        AlterConfigs(set={"retention.ms": "5"}, delete=("segment.ms",)),
        AddPartitions(total=6),
        ReassignReplicas(replicas=3),
    )
    assert plan.refusals == ()


# --- Strimzi KafkaTopic -----------------------------------------------------------------------


def test_kafka_topic_manifest_has_strimzi_shape() -> None:
    log = make_log(partitions=6, replicas=3, retention={"forever": True})
    manifest = kafka_topic_manifest(log, cluster="events", namespace="kafka")
    assert manifest["apiVersion"] == "kafka.strimzi.io/v1"
    assert manifest["kind"] == "KafkaTopic"
    assert manifest["metadata"]["name"] == "page-views"
    assert manifest["metadata"]["namespace"] == "kafka"
    assert manifest["metadata"]["labels"]["strimzi.io/cluster"] == "events"
    assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "distributary"
    assert manifest["metadata"]["annotations"]["distributary.dev/log"] == "shop/page-views"
    assert manifest["spec"] == {
        "topicName": "page-views",
        "partitions": 6,
        "replicas": 3,
        "config": {"retention.bytes": "-1", "retention.ms": "-1"},
    }


def test_kafka_topic_manifest_leaves_replicas_to_the_broker_when_unset() -> None:
    manifest = kafka_topic_manifest(make_log(), cluster="events", namespace="kafka")
    assert "replicas" not in manifest["spec"]
    assert manifest["spec"]["config"] == {}


def test_kafka_topic_manifest_can_use_v1beta2_for_older_strimzi() -> None:
    manifest = kafka_topic_manifest(
        make_log(), cluster="events", namespace="kafka", api_version="kafka.strimzi.io/v1beta2"
    )
    assert manifest["apiVersion"] == "kafka.strimzi.io/v1beta2"


def test_kafka_topic_manifest_refuses_an_unknown_api_version() -> None:
    with pytest.raises(ValueError, match="v1beta1"):
        kafka_topic_manifest(
            make_log(), cluster="events", namespace="kafka", api_version="kafka.strimzi.io/v1beta1"
        )


def test_a_topic_name_kubernetes_cannot_hold_gets_a_valid_hashed_resource_name() -> None:
    manifest = kafka_topic_manifest(
        make_log(topicName="Web_Page.Views"), cluster="events", namespace="kafka"
    )
    name = manifest["metadata"]["name"]
    assert name.startswith("web-page-views-")
    assert len(name) == len("web-page-views-") + 8
    assert manifest["spec"]["topicName"] == "Web_Page.Views"
    # Deterministic, and two topics that differ only in case do not share a resource.
    assert kafka_topic_name("Web_Page.Views") == name
    assert kafka_topic_name("web_page.views") != name


def test_a_valid_topic_name_is_its_own_resource_name() -> None:
    assert kafka_topic_name("shop.orders") == "shop.orders"


def test_kafka_topic_manifest_for_a_revision_topic_keeps_the_logs_settings() -> None:
    manifest = kafka_topic_manifest(
        make_log("counts", partitions=4, compaction=True),
        cluster="events",
        namespace="kafka",
        topic="shop.counts.r2",
    )
    assert manifest["metadata"]["name"] == "shop.counts.r2"
    assert manifest["metadata"]["annotations"]["distributary.dev/log"] == "shop/counts"
    assert manifest["spec"] == {
        "topicName": "shop.counts.r2",
        "partitions": 4,
        "config": {"cleanup.policy": "compact"},
    }


REFUSED = DesiredTopic(
    "orders",
    3,
    5,
    {"retention.ms": "60000", "local.retention.ms": "1000", "cleanup.policy": "compact"},
)


@pytest.mark.parametrize(
    ("code", "words", "spec", "field"),
    [
        ("INVALID_REPLICATION_FACTOR", "only 1 broker(s) are registered", "spec", "spec.replicas"),
        ("INVALID_REPLICATION_FACTOR", "only 1 broker(s)", "spec.output", "spec.output.replicas"),
        ("INVALID_REPLICA_ASSIGNMENT", "broker 7 is not registered", "spec", "spec.replicas"),
        ("INVALID_PARTITIONS", "Number of partitions must be larger", "spec", "spec.partitions"),
        ("INVALID_CONFIG", "Invalid value 60000 for retention.ms", "spec", "spec.retention.time"),
        (
            "INVALID_CONFIG",
            "local.retention.ms must be at most retention.ms",  # the longer name is meant
            "spec",
            'spec.config["local.retention.ms"]',
        ),
        ("POLICY_VIOLATION", "cleanup.policy compact is not allowed", "spec", "spec.compaction"),
        ("INVALID_CONFIG", "Invalid config", "spec", "spec.config"),
        ("INVALID_CONFIG", "Invalid config", "spec.output", "spec.output"),
        ("TOPIC_AUTHORIZATION_FAILED", "Topic authorization failed", "spec", "spec"),
        ("TOPIC_EXCEPTION", "Topic name is illegal", "spec", "spec.topicName"),
    ],
)
def test_a_kafka_refusal_names_the_field_it_concerns(
    code: str, words: str, spec: str, field: str
) -> None:
    assert refused_field(REFUSED, code, words, spec) == field


def test_a_config_refusal_of_a_topic_with_one_config_names_that_key() -> None:
    alone = DesiredTopic("t", 1, None, {"remote.storage.enable": "true"})
    words = "Tiered Storage functionality is disabled in the broker."
    assert refused_field(alone, "INVALID_CONFIG", words) == 'spec.config["remote.storage.enable"]'


def test_a_refusal_message_gives_kafkas_words_the_field_and_when_it_is_tried_again() -> None:
    message = refusal_message(REFUSED, "INVALID_REPLICATION_FACTOR", "only 1 broker(s).")
    assert message == (
        "Kafka refused topic orders (INVALID_REPLICATION_FACTOR): only 1 broker(s). Set "
        "spec.replicas to at most the number of brokers, or unset for the broker's default; the "
        "topic is tried again when it changes"
    )
    ungranted = refusal_message(REFUSED, "TOPIC_AUTHORIZATION_FAILED", "")
    assert "TOPIC_AUTHORIZATION_FAILED" in ungranted
    assert f"every {REFUSED_AGAIN // 60} minutes" in ungranted


def test_each_action_is_described_for_people() -> None:
    created = CreateTopic("clicks", 3, None, {"retention.ms": "60000", "cleanup.policy": "delete"})
    assert described(created) == (
        "created with 3 partitions (cleanup.policy=delete, retention.ms=60000)"
    )
    assert described(CreateTopic("clicks", 1, 3, {})) == "created with 1 partition, 3 replicas"
    assert described(AddPartitions(6)) == "grown to 6 partitions"
    changed = AlterConfigs({"retention.ms": "1000"}, ("max.message.bytes",))
    assert described(changed) == (
        "configs changed: retention.ms=1000, max.message.bytes back to the broker's default"
    )
