"""The Kafka adapter on a real broker: topics, configs, watermarks, group offsets, its errors."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.kafka.cluster import client_config
from distributary.local.broker import EmbeddedBroker
from distributary.plan.kafka_topics.topics import AlterConfigs, CreateTopic, ObservedTopic
from distributary.plan.revisions.positions import total_lag
from distributary.processes import free_port


@pytest.fixture(scope="module")
def admin(broker: EmbeddedBroker) -> KafkaAdmin:
    return KafkaAdmin(broker.bootstrap_servers, timeout=30)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer(client_config(bootstrap))
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, value=f'{{"n": {i}}}'.encode(), partition=partition)
    assert producer.flush(30) == 0


def test_creates_a_topic_and_reads_back_only_its_own_configs(admin: KafkaAdmin) -> None:
    topic = unique("created")
    configs = {"cleanup.policy": "compact", "retention.ms": "3600000"}
    admin.create_topic(CreateTopic(topic, partitions=3, replicas=1, configs=configs))
    assert admin.describe_topic(topic) == ObservedTopic(topic, 3, 1, configs)


def test_a_topic_made_with_broker_defaults_has_no_overrides(admin: KafkaAdmin) -> None:
    topic = unique("defaults")
    admin.create_topic(CreateTopic(topic, partitions=1, replicas=None, configs={}))
    assert admin.describe_topic(topic) == ObservedTopic(topic, 1, 1, {})


def test_a_missing_topic_is_described_as_none(admin: KafkaAdmin) -> None:
    assert admin.describe_topic(unique("missing")) is None


def test_creating_an_existing_topic_names_it(admin: KafkaAdmin) -> None:
    topic = unique("twice")
    admin.create_topic(CreateTopic(topic, 1, None, {}))
    with pytest.raises(KafkaAdminError, match=f"topic '{topic}' already exists") as caught:
        admin.create_topic(CreateTopic(topic, 1, None, {}))
    assert caught.value.code == "TOPIC_ALREADY_EXISTS"


def test_too_many_replicas_for_the_cluster_says_what_to_set(admin: KafkaAdmin) -> None:
    topic = unique("replicas")
    with pytest.raises(KafkaAdminError, match=rf"creating topic '{topic}'.*spec\.replicas"):
        admin.create_topic(CreateTopic(topic, 1, 3, {}))
    assert admin.describe_topic(topic) is None


def test_adds_partitions(admin: KafkaAdmin) -> None:
    topic = unique("grown")
    admin.create_topic(CreateTopic(topic, 2, None, {}))
    admin.add_partitions(topic, 5)
    observed = admin.describe_topic(topic)
    assert observed is not None
    assert observed.partitions == 5


def test_fewer_partitions_are_refused_by_kafka_with_the_topic_named(admin: KafkaAdmin) -> None:
    topic = unique("shrunk")
    admin.create_topic(CreateTopic(topic, 3, None, {}))
    with pytest.raises(KafkaAdminError, match=f"topic '{topic}' to 2 partitions.*only adds"):
        admin.add_partitions(topic, 2)


def test_alters_and_deletes_config_keys_incrementally(admin: KafkaAdmin) -> None:
    topic = unique("configs")
    admin.create_topic(
        CreateTopic(
            topic,
            1,
            None,
            {"retention.ms": "3600000", "cleanup.policy": "compact", "max.message.bytes": "2000"},
        )
    )
    admin.alter_configs(
        topic, AlterConfigs(set={"retention.ms": "7200000"}, delete=("cleanup.policy",))
    )
    observed = admin.describe_topic(topic)
    assert observed is not None
    # The key neither set nor deleted keeps its value: the change is incremental.
    assert observed.configs == {"max.message.bytes": "2000", "retention.ms": "7200000"}


def test_an_invalid_config_names_the_topic_and_the_field_to_fix(admin: KafkaAdmin) -> None:
    topic = unique("badconfig")
    admin.create_topic(CreateTopic(topic, 1, None, {}))
    with pytest.raises(KafkaAdminError, match=rf"topic '{topic}'.*spec\.config") as caught:
        admin.alter_configs(topic, AlterConfigs(set={"retention.ms": "soon"}))
    assert caught.value.code == "INVALID_CONFIG"


@pytest.mark.parametrize(
    "change",
    [
        lambda admin, topic: admin.add_partitions(topic, 4),
        lambda admin, topic: admin.alter_configs(topic, AlterConfigs(set={"retention.ms": "1"})),
        lambda admin, topic: admin.watermarks([topic]),
    ],
    ids=["partitions", "configs", "watermarks"],
)
def test_a_topic_that_does_not_exist_is_named_with_what_to_do(
    admin: KafkaAdmin, change: Callable[[KafkaAdmin, str], object]
) -> None:
    topic = unique("absent")
    with pytest.raises(KafkaAdminError, match=f"topic '{topic}' does not exist.*create it"):
        change(admin, topic)


def test_deletes_a_topic_and_deleting_it_again_is_harmless(admin: KafkaAdmin) -> None:
    topic = unique("deleted")
    admin.create_topic(CreateTopic(topic, 1, None, {}))
    admin.delete_topic(topic)
    assert admin.describe_topic(topic) is None
    admin.delete_topic(topic)


def test_watermarks_after_producing(admin: KafkaAdmin, broker: EmbeddedBroker) -> None:
    topic = unique("marks")
    admin.create_topic(CreateTopic(topic, 3, None, {}))
    produce(broker.bootstrap_servers, topic, {0: 5, 1: 2})
    assert admin.watermarks([topic]) == {topic: {0: (0, 5), 1: (0, 2), 2: (0, 0)}}
    # Records deleted from the head of a partition move its start, not its end.
    client = AdminClient(client_config(broker.bootstrap_servers))
    for future in client.delete_records([TopicPartition(topic, 0, 3)]).values():
        future.result(timeout=30)
    assert admin.start_offsets([topic]) == {topic: {0: 3, 1: 0, 2: 0}}
    assert admin.end_offsets([topic]) == {topic: {0: 5, 1: 2, 2: 0}}


def test_watermarks_of_partitions_added_a_moment_ago(
    admin: KafkaAdmin, broker: EmbeddedBroker
) -> None:
    topic = unique("newparts")
    admin.create_topic(CreateTopic(topic, 1, None, {}))
    admin.add_partitions(topic, 4)
    produce(broker.bootstrap_servers, topic, {3: 2})
    assert admin.end_offsets([topic]) == {topic: {0: 0, 1: 0, 2: 0, 3: 2}}


def test_commits_group_offsets_and_reads_them_back(
    admin: KafkaAdmin, broker: EmbeddedBroker
) -> None:
    topic, group = unique("positions"), unique("group")
    admin.create_topic(CreateTopic(topic, 2, None, {}))
    produce(broker.bootstrap_servers, topic, {0: 10, 1: 4})
    assert admin.committed(group) == {}
    admin.commit(group, {topic: {0: 7, 1: 4}})
    assert admin.committed(group) == {topic: {0: 7, 1: 4}}
    lag = admin.lag(group, [topic])
    assert lag == {topic: {0: 10 - 7, 1: 4 - 4}}
    assert total_lag(lag) == 3
    # A later commit of one partition leaves the other where it was.
    admin.commit(group, {topic: {0: 10}})
    assert admin.committed(group) == {topic: {0: 10, 1: 4}}
    assert admin.lag(group, [topic]) == {topic: {0: 0, 1: 0}}


@pytest.fixture
def active_member(broker: EmbeddedBroker, admin: KafkaAdmin) -> Iterator[tuple[str, str]]:
    """A consumer group with one member that holds its partitions until the test ends."""
    topic, group = unique("busy"), unique("busy-group")
    admin.create_topic(CreateTopic(topic, 1, None, {}))
    settings: dict[str, str | int | float | bool] = {"group.id": group}
    consumer = Consumer(client_config(broker.bootstrap_servers, **settings))
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.assignment(), "the consumer never joined its group"
    try:
        yield topic, group
    finally:
        consumer.close()


def test_committing_for_a_group_with_an_active_member_says_to_stop_it(
    admin: KafkaAdmin, active_member: tuple[str, str]
) -> None:
    topic, group = active_member
    with pytest.raises(
        KafkaAdminError, match=f"group '{group}' has 1 active member,.*stop the group's consumers"
    ) as caught:
        admin.commit(group, {topic: {0: 0}})
    assert caught.value.code == "GROUP_HAS_MEMBERS"


def test_deletes_a_group_and_deleting_it_again_is_harmless(
    admin: KafkaAdmin, broker: EmbeddedBroker
) -> None:
    topic, group = unique("retired"), unique("retired-group")
    admin.create_topic(CreateTopic(topic, 1, None, {}))
    produce(broker.bootstrap_servers, topic, {0: 3})
    admin.commit(group, {topic: {0: 3}})
    assert group in admin.group_names()
    admin.delete_group(group)
    assert group not in admin.group_names()
    assert admin.committed(group) == {}
    admin.delete_group(group)
    admin.delete_group(unique("never-made"))


def test_deleting_a_group_with_an_active_member_says_to_stop_it(
    admin: KafkaAdmin, active_member: tuple[str, str]
) -> None:
    _, group = active_member
    with pytest.raises(
        KafkaAdminError, match=f"group '{group}' has 1 active member,.*stop the group's consumers"
    ) as caught:
        admin.delete_group(group)
    assert caught.value.code == "GROUP_HAS_MEMBERS"
    assert group in admin.group_names()


def test_group_offsets_on_a_fresh_broker(tmp_path: Path) -> None:
    # The first group request of a new cluster meets a coordinator still loading, which crashed
    # the process inside librdkafka's admin OffsetFetch before the adapter waited for it.
    with EmbeddedBroker(tmp_path / "fresh") as fresh:
        admin = KafkaAdmin(fresh.bootstrap_servers, timeout=30)
        admin.create_topic(CreateTopic("t", 1, None, {}))
        groups = [unique("fresh-group") for _ in range(4)]
        assert [admin.committed(group) for group in groups] == [{}, {}, {}, {}]
        admin.commit(groups[0], {"t": {0: 0}})
        assert admin.committed(groups[0]) == {"t": {0: 0}}


def test_committing_for_a_missing_topic_names_it(admin: KafkaAdmin) -> None:
    topic = unique("nowhere")
    with pytest.raises(KafkaAdminError, match=f"topic '{topic}' does not exist"):
        admin.commit(unique("group"), {topic: {0: 1}})


def test_negative_offsets_are_refused_before_reaching_kafka(admin: KafkaAdmin) -> None:
    with pytest.raises(KafkaAdminError, match="topic 't' partition 0 offset -1"):
        admin.commit(unique("group"), {"t": {0: -1}})


def test_an_unreachable_cluster_fails_within_the_timeout_naming_it() -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    admin = KafkaAdmin(bootstrap, timeout=2)
    started = time.monotonic()
    with pytest.raises(KafkaAdminError, match=f"Kafka at {bootstrap} did not answer within 2s"):
        admin.describe_topic("anything")
    assert time.monotonic() - started < 10
