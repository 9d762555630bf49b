"""A reader asks a partition's offsets again while a just-started broker elects its leader."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from distributary.kafka.records import TopicReader


class Consumer:
    """Answers NOT_LEADER `failures` times, then the offsets."""

    def __init__(self, failures: int, code: int = KafkaError.NOT_LEADER_FOR_PARTITION) -> None:
        self.failures = failures
        self.code = code
        self.asked = 0

    def get_watermark_offsets(self, partition: TopicPartition, **_: Any) -> tuple[int, int]:
        self.asked += 1
        if self.asked <= self.failures:
            raise KafkaException(KafkaError(self.code))
        return 3, 10


def reader(consumer: Consumer, timeout: float) -> TopicReader:
    made = TopicReader.__new__(TopicReader)
    made.bootstrap_servers = "localhost:9092"
    made.timeout = timeout
    made._consumer = consumer  # type: ignore[assignment]
    return made


def test_a_partition_without_a_leader_yet_is_asked_again() -> None:
    consumer = Consumer(failures=2)
    assert reader(consumer, timeout=5.0)._watermark(TopicPartition("t", 0)) == (3, 10)
    assert consumer.asked == 3


def test_a_leader_that_never_comes_is_reported_after_the_timeout() -> None:
    consumer = Consumer(failures=1_000)
    with pytest.raises(KafkaException):
        reader(consumer, timeout=0.5)._watermark(TopicPartition("t", 0))
    assert 2 <= consumer.asked < 1_000


def test_other_errors_are_not_retried() -> None:
    consumer = Consumer(failures=5, code=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        reader(consumer, timeout=5.0)._watermark(TopicPartition("t", 0))
    assert consumer.asked == 1
