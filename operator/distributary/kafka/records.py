"""Appending records to a topic and reading a topic's end: the Kafka side of `produce` and `tail`.

Producing keys records with Kafka's murmur2 partitioner, the one the Java clients (and so Spark)
use, so a key lands on the same partition whoever writes it; it is idempotent, so a retry never
duplicates a record. Reading assigns partitions by hand and never joins or commits a consumer
group: looking at a log must not move anyone's position in it. The last N records are read from
each partition's last N offsets and merged by timestamp, which is how a person expects to see a
log spread over partitions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from distributary.errors import DistributaryError
from distributary.kafka.cluster import NO_LEADER_YET, client_config
from distributary.schema import EncodedRecord

Offsets = dict[str, dict[int, int]]
Progress = Callable[[int, float], None]
TAIL_GROUP = "distributary.tail"  # required by the client; never joined nor committed to


class RecordsError(DistributaryError, RuntimeError):
    """Kafka did not take or give the records; the message says what happened."""


class MissingTopicError(RecordsError):
    """The topic does not exist on the cluster."""

    def __init__(self, topic: str, bootstrap_servers: str) -> None:
        super().__init__(f"topic {topic!r} does not exist on {bootstrap_servers}")
        self.topic = topic


@dataclass(frozen=True)
class Record:
    """One record read from a topic. A None value is a tombstone (a deleted key)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class Produced:
    """What `produce` did: records delivered, to which topic, in how many seconds."""

    records: int
    topic: str
    seconds: float


# What a broker just started answers while it elects a partition's leader.
_NO_LEADER_YET = NO_LEADER_YET | {KafkaError._TRANSPORT}


def _partitions(client: Producer | Consumer, topic: str, servers: str, timeout: float) -> list[int]:
    try:
        # All topics: asking for one by name may make a broker that allows it auto-create it.
        metadata = client.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise RecordsError(
            f"Kafka at {servers} did not answer within {timeout:.0f}s ({exc.args[0]}): "
            "check that the broker runs and the address is right"
        ) from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise MissingTopicError(topic, servers)
    return sorted(found.partitions)


def produce(
    bootstrap_servers: str,
    topic: str,
    records: Iterable[EncodedRecord],
    *,
    rate: float | None = None,
    progress: Progress | None = None,
    progress_every: float = 5.0,
    timeout: float = 30.0,
    client: Mapping[str, str] | None = None,
) -> Produced:
    """Append records to `topic`, at most `rate` per second, and wait until Kafka has them all.

    `progress(records, seconds)` is called about every `progress_every` seconds. Raises
    `MissingTopicError` when the topic does not exist, `RecordsError` when Kafka refuses a record.
    """
    settings: dict[str, str | int | float | bool] = {
        **(client or {}),
        "partitioner": "murmur2_random",
        "linger.ms": 20,
        "enable.idempotence": True,
    }
    producer = Producer(client_config(bootstrap_servers, **settings))
    _partitions(producer, topic, bootstrap_servers, timeout)
    failures: list[str] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failures.append(error.str())

    start = last = time.monotonic()
    count = 0
    for record in records:
        if rate:
            _wait_until(producer, start + count / rate)
        _send(producer, topic, record, delivered)
        count += 1
        now = time.monotonic()
        if failures:
            break
        if progress is not None and now - last >= progress_every:
            progress(count, now - start)
            last = now
    return _finish(producer, topic, count, failures, start, timeout)


def _wait_until(producer: Producer, moment: float) -> None:
    while (left := moment - time.monotonic()) > 0:
        producer.poll(left)  # serves delivery reports while it waits


def _send(producer: Producer, topic: str, record: EncodedRecord, delivered: Any) -> None:
    while True:
        try:
            producer.produce(topic, value=record.value, key=record.key, on_delivery=delivered)
        except BufferError:  # the local queue is full: let Kafka take some first
            producer.poll(0.5)
            continue
        except KafkaException as exc:
            raise RecordsError(f"Kafka refused a record for topic {topic}: {exc.args[0]}") from None
        producer.poll(0)
        return


def _finish(
    producer: Producer, topic: str, count: int, failures: list[str], start: float, timeout: float
) -> Produced:
    waiting = producer.flush(timeout)
    if failures:
        raise RecordsError(
            f"Kafka refused {len(failures)} record(s) for topic {topic}: {failures[0]}"
        )
    if waiting:
        raise RecordsError(
            f"{waiting} of {count} records to topic {topic} were not confirmed within "
            f"{timeout:.0f}s: check the broker"
        )
    return Produced(count, topic, time.monotonic() - start)


class TopicReader:
    """Reads the end of topics and follows them with one consumer that never joins a group."""

    def __init__(
        self,
        bootstrap_servers: str,
        timeout: float = 30.0,
        client: Mapping[str, str] | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout = timeout
        settings: dict[str, str | int | float | bool] = {
            **(client or {}),
            "group.id": TAIL_GROUP,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
        self._consumer = Consumer(client_config(bootstrap_servers, **settings))

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the consumer (it has committed nothing)."""
        self._consumer.close()

    def watermarks(self, topic: str) -> dict[int, tuple[int, int]]:
        """(first, next) offset of each partition; `MissingTopicError` when there is no topic."""
        marks: dict[int, tuple[int, int]] = {}
        for partition in _partitions(self._consumer, topic, self.bootstrap_servers, self.timeout):
            marks[partition] = self._watermark(TopicPartition(topic, partition))
        return marks

    def _watermark(self, partition: TopicPartition) -> tuple[int, int]:
        """One partition's (first, next) offset. A broker just started (`distributary tail`
        starts a stopped run's) may not have elected the partition's leader yet: that answer is
        asked again until the reader's timeout, then reported as Kafka gave it."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                low, high = self._consumer.get_watermark_offsets(
                    partition, timeout=self.timeout, cached=False
                )
                return low, high
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                code = error.code() if isinstance(error, KafkaError) else None
                if code not in _NO_LEADER_YET or time.monotonic() >= deadline:
                    raise
            time.sleep(0.2)

    def last(self, topic: str, count: int) -> tuple[list[Record], dict[int, int]]:
        """The last `count` records of a topic in timestamp order, and its end offsets then."""
        marks = self.watermarks(topic)
        ends = {partition: high for partition, (_, high) in marks.items()}
        span = count
        while True:
            # A topic written in transactions has a commit marker among its offsets for every
            # transaction: when the span held fewer records than asked, look further back.
            starts = {p: max(low, high - span) for p, (low, high) in marks.items()}
            ranges = {p: (starts[p], ends[p]) for p in marks if ends[p] > starts[p]}
            records = self._read(topic, ranges) if count and ranges else []
            whole = all(starts[p] == low for p, (low, _) in marks.items())
            if len(records) >= count or whole:
                break
            span *= 2
        records.sort(key=lambda r: (r.timestamp_ms, r.partition, r.offset))
        return records[-count:] if count else [], ends

    def offsets(self, topic: str, ranges: Mapping[int, tuple[int, int]]) -> dict[int, list[int]]:
        """The offsets of the records in each partition's [start, end) range, in order: where
        compaction removed records, offsets are missing."""
        found: dict[int, list[int]] = {partition: [] for partition in ranges}
        for record in self._read(topic, ranges) if ranges else []:
            found[record.partition].append(record.offset)
        return {partition: sorted(offsets) for partition, offsets in found.items()}

    def _read(self, topic: str, ranges: Mapping[int, tuple[int, int]]) -> list[Record]:
        self._consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in ranges.items()])
        pending, records = set(ranges), []
        deadline = time.monotonic() + self.timeout
        try:
            while pending:
                if time.monotonic() > deadline:
                    raise RecordsError(
                        f"reading topic {topic} from {self.bootstrap_servers} took more than "
                        f"{self.timeout:.0f}s; partitions {sorted(pending)} were not read to "
                        "the end"
                    )
                for message in self._consumer.consume(500, 0.5):
                    partition = message.partition() or 0
                    record, end = _record(message), ranges[partition][1]
                    if record is not None and record.offset < end:
                        records.append(record)
                    if record is None or record.offset >= end - 1:
                        pending.discard(partition)  # at its end (or past it: written since)
        finally:
            self._consumer.unassign()
        return records

    def follow(
        self, positions: Mapping[str, Mapping[int, int]], stop: Callable[[], bool] = lambda: False
    ) -> Iterator[Record]:
        """Records written at or after `positions` (topic -> partition -> offset), as they come.

        Runs until `stop()` is true (checked about twice a second) or the caller stops iterating.
        """
        self._consumer.assign(
            [
                TopicPartition(t, p, o)
                for t, offsets in positions.items()
                for p, o in offsets.items()
            ]
        )
        try:
            while not stop():
                for message in self._consumer.consume(500, 0.5):
                    record = _record(message)
                    if record is not None:
                        yield record
        finally:
            self._consumer.unassign()

    def positions(self, topic: str) -> dict[int, int]:
        """The next offset the reader returns, per assigned partition of `topic`: past every
        record it has returned and past the transaction markers after them, which a committed
        reader never sees as records (so a reader that has applied all it got is at the end)."""
        assigned = [tp for tp in self._consumer.assignment() if tp.topic == topic]
        if not assigned:
            return {}
        return {
            tp.partition: tp.offset for tp in self._consumer.position(assigned) if tp.offset >= 0
        }

    def batches(
        self,
        positions: Mapping[str, Mapping[int, int]],
        stop: Callable[[], bool] = lambda: False,
        size: int = 5000,
        wait: float = 0.5,
    ) -> Iterator[list[Record]]:
        """What each poll brings of the records at or after `positions`, as committed readers
        see them (at most `size`; an empty list after `wait` seconds of nothing), until
        `stop()` is true."""
        self._consumer.assign(
            [
                TopicPartition(t, p, o)
                for t, offsets in positions.items()
                for p, o in offsets.items()
            ]
        )
        try:
            while not stop():
                found = [_record(m) for m in self._consumer.consume(size, wait)]
                yield [r for r in found if r is not None]
        finally:
            self._consumer.unassign()


def _record(message: Message) -> Record | None:
    """The record in a message; None for the end of a partition. Other errors raise."""
    error = message.error()
    if error is not None:
        if error.code() == KafkaError._PARTITION_EOF:
            return None
        raise RecordsError(f"reading topic {message.topic()} failed: {error.str()}")
    kind, timestamp = message.timestamp()
    return Record(
        topic=message.topic() or "",
        partition=message.partition() or 0,
        offset=message.offset() or 0,
        timestamp_ms=timestamp if kind != TIMESTAMP_NOT_AVAILABLE else -1,
        key=message.key(),
        value=message.value(),
    )
