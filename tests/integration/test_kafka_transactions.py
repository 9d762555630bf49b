"""Kafka transactions as the exactly-once output uses them, on a real broker.

A `TransactionalWriter` commits records and a group's offsets (with metadata) together; a second
writer with the same transactional id, or `fence`, aborts the first one's open transaction and
refuses its commits; readers of committed records (end offsets, `TopicReader`) see only what
was committed, and a transaction's commit marker, which takes an offset, is no record to them.
"""

from __future__ import annotations

import time
import uuid

import pytest
from tests.integration.spark_pipelines import read_topic

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.records import TopicReader
from distributary.kafka.transactions import FencedError, TransactionalWriter, fence
from distributary.local.broker import EmbeddedBroker
from distributary.plan.kafka_topics.topics import CreateTopic
from distributary.plan.revisions.delivery import Marker, read_marker


@pytest.fixture
def names(broker: EmbeddedBroker) -> tuple[KafkaAdmin, str, str, str]:
    admin = KafkaAdmin(broker.bootstrap_servers)
    suffix = uuid.uuid4().hex[:8]
    source, output = f"tx-in-{suffix}", f"tx-out-{suffix}"
    admin.create_topic(CreateTopic(source, 1, None, {}))
    admin.create_topic(CreateTopic(output, 2, None, {}))
    return admin, source, output, f"distributary.tests.tx-{suffix}.r1"


def test_records_and_offsets_commit_together_with_the_marker(
    broker: EmbeddedBroker, names: tuple[KafkaAdmin, str, str, str]
) -> None:
    admin, source, output, group = names
    writer = TransactionalWriter(broker.bootstrap_servers, group, group)
    try:
        for batch in range(3):
            records = [(output, f"k{i}", f"v{batch}-{i}", None) for i in range(4)]
            marker = Marker("q", batch, batch)
            writer.write(records, {source: {0: 10 * (batch + 1)}}, marker.text())
    finally:
        writer.close()
    assert admin.committed(group) == {source: {0: 30}}
    assert read_marker(admin.committed_metadata(group)) == Marker("q", 2, 2)
    written = read_topic(broker.bootstrap_servers, output)
    assert sorted((r.value or b"").decode() for r in written) == sorted(
        f"v{b}-{i}" for b in range(3) for i in range(4)
    )
    # Each partition has a commit marker after each transaction that wrote to it.
    offsets = sum(admin.end_offsets([output])[output].values())
    assert offsets > len(written) == 12


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`), as unsigned 32 bits."""
    m, h = 0x5BD1E995, (0x9747B28C ^ len(data)) & 0xFFFFFFFF
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = data[whole:]
    if len(rest) == 3:
        h ^= rest[2] << 16
    if len(rest) >= 2:
        h ^= rest[1] << 8
    if rest:
        h = ((h ^ rest[0]) * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


def test_a_keyed_record_lands_where_java_clients_put_it(
    broker: EmbeddedBroker, names: tuple[KafkaAdmin, str, str, str]
) -> None:
    _admin, _source, output, group = names
    keys = [f'{{"user_id":"u{n}"}}' for n in range(20)]
    writer = TransactionalWriter(broker.bootstrap_servers, group, group)
    try:
        writer.write([(output, key, "1", None) for key in keys], {}, "")
    finally:
        writer.close()
    placed = {r.key: r.partition for r in read_topic(broker.bootstrap_servers, output)}
    java = {key.encode(): (murmur2(key.encode()) & 0x7FFFFFFF) % 2 for key in keys}
    assert placed == java
    assert set(placed.values()) == {0, 1}


def test_a_fenced_writer_commits_nothing_more(
    broker: EmbeddedBroker, names: tuple[KafkaAdmin, str, str, str]
) -> None:
    admin, source, output, group = names
    old = TransactionalWriter(broker.bootstrap_servers, group, group)
    try:
        old.write([(output, None, "before", None)], {source: {0: 1}}, Marker("q", 0).text())
        fence(broker.bootstrap_servers, group)
        with pytest.raises(FencedError, match="taken by another process"):
            old.write([(output, None, "after", None)], {source: {0: 99}}, Marker("q", 1).text())
    finally:
        old.close()
    assert admin.committed(group) == {source: {0: 1}}
    assert [r.value for r in read_topic(broker.bootstrap_servers, output)] == [b"before"]


def test_tail_finds_the_last_records_among_commit_markers(
    broker: EmbeddedBroker, names: tuple[KafkaAdmin, str, str, str]
) -> None:
    _admin, _source, output, group = names
    writer = TransactionalWriter(broker.bootstrap_servers, group, group)
    try:
        for n in range(6):  # one record per transaction: every other offset is a marker
            writer.write([(output, "a", f"r{n}", None)], {}, "")
    finally:
        writer.close()
    # A commit returns once the transaction coordinator has decided it; the commit markers that
    # make its records visible to committed readers reach the partitions a moment later.
    deadline = time.monotonic() + 30
    while True:
        with TopicReader(broker.bootstrap_servers) as reader:
            records, _ends = reader.last(output, 3)
        if [r.value for r in records[-1:]] == [b"r5"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [r.value for r in records] == [b"r3", b"r4", b"r5"]
