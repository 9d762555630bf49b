"""Whether a reprocess's inputs still hold their whole history, on a real broker: retention that
moved a partition's start, and compaction that removed older records of a key, are both found
and named; a topic that lost nothing passes."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.history import lost_input_history
from distributary.local.broker import EmbeddedBroker
from distributary.plan.kafka_topics.topics import CreateTopic

# A compacted topic the log cleaner works on at once: small segments rolled every 100 ms, no
# lag before compaction, any dirty share enough.
EAGER = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "100",
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_a_topic_that_lost_nothing_passes(broker: EmbeddedBroker) -> None:
    admin = KafkaAdmin(broker.bootstrap_servers)
    plain, compacted = unique("plain"), unique("keys")
    admin.create_topic(CreateTopic(plain, 2, None, {}))
    admin.create_topic(CreateTopic(compacted, 1, None, {"cleanup.policy": "compact"}))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(20):  # distinct keys: compaction has nothing to remove
        producer.produce(compacted, key=f"k{i}".encode(), value=b"v")
        producer.produce(plain, key=b"same", value=b"v")
    producer.flush(10)
    assert lost_input_history(admin, {plain: "plain", compacted: "keys"}) is None


def test_retention_that_moved_a_start_is_found(broker: EmbeddedBroker) -> None:
    admin = KafkaAdmin(broker.bootstrap_servers)
    topic = unique("retained")
    admin.create_topic(CreateTopic(topic, 1, None, {}))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for _ in range(5):
        producer.produce(topic, value=b"v")
    producer.flush(10)
    client = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in client.delete_records([TopicPartition(topic, 0, 2)]).values():
        future.result(30)
    found = lost_input_history(admin, {topic: "clicks"})
    assert found is not None
    assert f"input log clicks (topic {topic}) has lost its history to retention" in found
    assert "partition 0 starts at offset 2" in found


def test_compaction_that_removed_older_records_of_a_key_is_found(broker: EmbeddedBroker) -> None:
    admin = KafkaAdmin(broker.bootstrap_servers)
    topic = unique("users")
    admin.create_topic(CreateTopic(topic, 1, None, EAGER))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    found = None
    deadline = time.monotonic() + 90  # the cleaner looks every 15 s by default
    while found is None and time.monotonic() < deadline:
        for key in (b"a", b"b"):  # the same two keys again: older records may go
            producer.produce(topic, key=key, value=b"v")
        producer.flush(10)
        time.sleep(0.2)  # the next record rolls a segment, which the cleaner may then compact
        found = lost_input_history(admin, {topic: "users"})
    assert found is not None, "the log cleaner did not compact the topic within 90 s"
    assert f"input log users (topic {topic}) is compacted and compaction has removed" in found
    assert "partition 0 has no records at offset" in found
