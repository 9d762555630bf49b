"""The direct topic backend on a real broker: it does what the plan says, refuses what it must,
and one refusal never blocks the rest of a spec."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest

from distributary.api.log import Log
from distributary.backends.direct import DirectTopics
from distributary.backends.topic_batches import DirectTopicBackend
from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.local.broker import EmbeddedBroker
from distributary.plan.kafka_topics.topics import (
    AddPartitions,
    AlterConfigs,
    CreateTopic,
    DesiredTopic,
    ObservedTopic,
)
from distributary.plan.logs.log_status import log_status

HOUR, TWO_HOURS = "3600000", "7200000"


@pytest.fixture(scope="module")
def admin(broker: EmbeddedBroker) -> KafkaAdmin:
    return KafkaAdmin(broker.bootstrap_servers, timeout=30)


@pytest.fixture
def topics(admin: KafkaAdmin) -> DirectTopics:
    return DirectTopics(admin)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_creates_a_missing_topic_then_finds_it_in_sync(
    topics: DirectTopics, admin: KafkaAdmin
) -> None:
    desired = DesiredTopic(unique("orders"), 3, 1, {"retention.ms": HOUR})
    plan = topics.apply(desired)
    assert plan.actions == (CreateTopic(desired.name, 3, 1, {"retention.ms": HOUR}),)
    assert plan.managed_configs == {"retention.ms"}
    assert admin.describe_topic(desired.name) == ObservedTopic(
        desired.name, 3, 1, {"retention.ms": HOUR}
    )
    again = topics.apply(desired, plan.managed_configs)
    assert again.in_sync


def test_refuses_fewer_partitions_and_still_applies_the_retention_change(
    topics: DirectTopics, admin: KafkaAdmin
) -> None:
    name = unique("shrink")
    topics.apply(DesiredTopic(name, 4, None, {"retention.ms": HOUR}))
    plan = topics.apply(
        DesiredTopic(name, 2, None, {"retention.ms": TWO_HOURS}), frozenset({"retention.ms"})
    )
    assert [refusal.reason for refusal in plan.refusals] == ["FewerPartitions"]
    assert plan.actions == (AlterConfigs(set={"retention.ms": TWO_HOURS}),)
    assert admin.describe_topic(name) == ObservedTopic(name, 4, 1, {"retention.ms": TWO_HOURS})


def test_grows_partitions_and_unsets_only_the_keys_it_managed(
    topics: DirectTopics, admin: KafkaAdmin
) -> None:
    name = unique("grow")
    created = topics.apply(
        DesiredTopic(name, 2, None, {"retention.ms": HOUR, "cleanup.policy": "compact"})
    )
    # Someone sets a key by hand; the spec never named it, so the operator must leave it.
    admin.alter_configs(name, AlterConfigs(set={"max.message.bytes": "2000"}))
    plan = topics.apply(
        DesiredTopic(name, 5, None, {"retention.ms": HOUR}), created.managed_configs
    )
    assert plan.actions == (AlterConfigs(set={}, delete=("cleanup.policy",)), AddPartitions(5))
    assert plan.managed_configs == {"retention.ms"}
    assert admin.describe_topic(name) == ObservedTopic(
        name, 5, 1, {"max.message.bytes": "2000", "retention.ms": HOUR}
    )


def test_a_replica_change_is_refused_not_attempted(topics: DirectTopics) -> None:
    name = unique("replicas")
    topics.apply(DesiredTopic(name, 1, 1, {}))
    plan = topics.apply(DesiredTopic(name, 1, 2, {}))
    assert plan.actions == ()
    assert [refusal.reason for refusal in plan.refusals] == ["ReplicasImmutable"]


def test_a_value_kafka_refuses_raises_naming_the_topic(topics: DirectTopics) -> None:
    name = unique("invalid")
    topics.apply(DesiredTopic(name, 1, None, {}))
    with pytest.raises(KafkaAdminError, match=rf"topic '{name}'.*spec\.config"):
        topics.apply(DesiredTopic(name, 1, None, {"retention.ms": "a week"}))


def test_ensure_creates_or_updates_each_topic(topics: DirectTopics, admin: KafkaAdmin) -> None:
    existing, new = unique("existing"), unique("new")
    topics.apply(DesiredTopic(existing, 1, None, {}))
    plans = topics.ensure(
        [
            DesiredTopic(existing, 2, None, {"cleanup.policy": "compact"}),
            DesiredTopic(new, 1, None, {}),
        ]
    )
    assert list(plans) == [existing, new]
    assert plans[existing].actions == (
        AlterConfigs(set={"cleanup.policy": "compact"}),
        AddPartitions(2),
    )
    assert plans[new].actions == (CreateTopic(new, 1, None, {}),)
    assert admin.describe_topic(existing) == ObservedTopic(
        existing, 2, 1, {"cleanup.policy": "compact"}
    )
    assert admin.describe_topic(new) == ObservedTopic(new, 1, 1, {})
    assert all(plan.in_sync for plan in topics.ensure([DesiredTopic(new, 1, None, {})]).values())


def test_many_topics_reconciled_at_once_each_get_their_own_outcome(
    topics: DirectTopics, admin: KafkaAdmin, broker: EmbeddedBroker
) -> None:
    new = [unique(f"many{i}") for i in range(30)]
    grown, same, refused = unique("grown"), unique("same"), unique("refused")
    topics.apply(DesiredTopic(grown, 1, None, {}))
    topics.apply(DesiredTopic(same, 2, None, {"retention.ms": HOUR}))
    admin_client = KafkaAdmin(broker.bootstrap_servers)
    from confluent_kafka import Producer  # a record, so that watermarks say something

    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce(same, b"one", partition=1)
    producer.flush(10)
    requests = [(DesiredTopic(name, 2, None, {}), frozenset[str]()) for name in new] + [
        (DesiredTopic(grown, 3, None, {"retention.ms": HOUR}), frozenset[str]()),
        (DesiredTopic(same, 2, None, {"retention.ms": HOUR}), frozenset({"retention.ms"})),
        (DesiredTopic(refused, 1, None, {"retention.ms": "a week"}), frozenset[str]()),
    ]
    outcomes = topics.reconcile_many(requests)
    assert sorted(outcomes) == sorted([*new, grown, same, refused])
    for name in new:
        outcome = outcomes[name]
        assert not isinstance(outcome, KafkaAdminError)
        assert outcome.plan.actions == (CreateTopic(name, 2, None, {}),)
        assert (outcome.partitions, outcome.watermarks) == (2, {name: {0: (0, 0), 1: (0, 0)}})
        assert admin_client.describe_topic(name) == ObservedTopic(name, 2, 1, {})
    grew = outcomes[grown]  # more than a create: the one-topic way
    assert not isinstance(grew, KafkaAdminError)
    assert grew.plan.actions == (AlterConfigs(set={"retention.ms": HOUR}), AddPartitions(3))
    assert grew.partitions == 3
    kept = outcomes[same]
    assert not isinstance(kept, KafkaAdminError)
    assert kept.plan.in_sync
    assert kept.watermarks == {same: {0: (0, 0), 1: (0, 1)}}
    failed = outcomes[refused]  # Kafka's refusal of one topic is that topic's alone
    assert isinstance(failed, KafkaAdminError)
    assert f"topic '{refused}'" in str(failed)
    assert "spec.config" in str(failed)
    assert admin_client.describe_topic(refused) is None


@pytest.mark.parametrize(
    ("desired", "field", "words"),
    [
        # One broker: three replicas cannot be placed.
        (DesiredTopic("", 1, 3, {}), "spec.replicas", "replication factor"),
        # The broker's settings forbid it: tiered storage is off on this broker.
        (
            DesiredTopic("", 1, None, {"remote.storage.enable": "true"}),
            'spec.config["remote.storage.enable"]',
            "Tiered Storage",
        ),
    ],
    ids=["replicas-over-brokers", "config-the-broker-forbids"],
)
def test_what_only_the_cluster_refuses_is_a_refusal_naming_the_field_not_unreachable(
    admin: KafkaAdmin, desired: DesiredTopic, field: str, words: str
) -> None:
    """Kafka answered no: the Log is Stalled with Kafka's own words and the field to correct,
    never "Kafka cannot be reached" (which is retried for ever)."""
    name = unique("refused")
    desired = DesiredTopic(name, desired.partitions, desired.replicas, desired.configs)
    log = Log.model_validate({"metadata": {"name": name, "namespace": "ns"}, "spec": {}})
    done = asyncio.run(DirectTopicBackend(admin).ensure(log, desired, {}))
    assert done.unreachable is None
    assert done.refused is not None
    assert f"Set {field} to" in done.refused, done.refused
    assert words in done.refused, done.refused
    assert done.refused_again is None  # asked again only when the spec changes
    assert admin.describe_topic(name) is None
    status = log_status(done, None, datetime.now(UTC))
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "KafkaRefused")
    assert field in stalled["message"]
