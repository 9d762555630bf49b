"""Kafka transactions: one writer per view revision, its batches all or nothing, zombies fenced.

`TransactionalWriter` owns a producer whose `transactional.id` is the revision's own. Starting it
(`init_transactions`) aborts whatever transaction an earlier process of the same revision left
open and fences that process: from then on its writes and offset commits are refused, so a driver
that lingers after a restart or a rewind can neither add records nor move the group back. Each
`write` is one transaction: records to any topics, and the consumer group's offsets (with
metadata) committed in the same transaction.

`fence` does only the first part, for the operator: before it moves a revision's group (a rewind),
it takes the revision's transactional id, so the old driver's last commit cannot undo the move.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from distributary.errors import DistributaryError
from distributary.kafka.cluster import client_config
from distributary.plan.revisions.positions import Offsets

# How long a transaction may stay open: a writer that dies mid-transaction blocks readers of
# committed records on its partitions for at most this long (a restarted writer aborts it at once).
TRANSACTION_TIMEOUT_MS = 60_000
Header = tuple[str, str | bytes | None]
Record = tuple[str, str | bytes | None, str | bytes | None, list[Header] | None]


class TransactionError(DistributaryError):
    """A transaction that did not commit; nothing it wrote is visible to committed readers."""


class FencedError(TransactionError):
    """Another process took this writer's transactional id: it writes this revision now."""


def _producer_config(
    bootstrap: str, transactional_id: str, client: Mapping[str, str] | None = None
) -> dict[str, Any]:
    settings: dict[str, str | int | float | bool] = {
        **(client or {}),
        "transactional.id": transactional_id,
        "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
        # The partition of a keyed record is the one Java clients (Spark's Kafka sink, Kafka
        # Streams, the console producer) choose: murmur2 of the key.
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    }
    return client_config(bootstrap, **settings)


def fence(
    bootstrap: str,
    transactional_id: str,
    timeout: float = 30.0,
    client: Mapping[str, str] | None = None,
) -> None:
    """Take `transactional_id`: abort its open transaction and refuse the commits of every
    process that held it before."""
    producer = Producer(_producer_config(bootstrap, transactional_id, client))
    try:
        producer.init_transactions(timeout)
    except KafkaException as exc:
        raise TransactionError(
            f"could not fence the writers of transactional id {transactional_id!r}: "
            f"{exc.args[0].str()}; check that the brokers are reachable and allow transactions "
            "(transaction.state.log.replication.factor no more than the brokers)"
        ) from None
    finally:
        with contextlib.suppress(KafkaException):
            producer.flush(1)


class TransactionalWriter:
    """One revision's transactional producer; `write` commits records and the group's offsets
    together."""

    def __init__(
        self,
        bootstrap: str,
        transactional_id: str,
        group: str,
        timeout: float = 60.0,
        client: Mapping[str, str] | None = None,
    ) -> None:
        self.transactional_id = transactional_id
        self.timeout = timeout
        self._producer = Producer(_producer_config(bootstrap, transactional_id, client))
        # The group's identity for the transactional offset commit; this consumer never joins.
        settings: dict[str, str | int | float | bool] = {
            **(client or {}),
            "group.id": group,
            "enable.auto.commit": False,
        }
        self._consumer = Consumer(client_config(bootstrap, **settings))
        try:
            self._producer.init_transactions(timeout)
        except KafkaException as exc:
            self.close()
            raise TransactionError(
                f"could not start transactions as {transactional_id!r}: {exc.args[0].str()}"
            ) from None

    def write(self, records: Iterable[Record], offsets: Offsets, metadata: str) -> int:
        """Write `records` (topic, key, value, headers) and commit `offsets` for the group, with
        `metadata` on each partition, in one transaction; how many records were written."""
        producer, count = self._producer, 0
        produce = producer.produce
        try:
            producer.begin_transaction()
            for topic, key, value, headers in records:
                try:
                    produce(topic, value, key, headers=headers)
                except BufferError:  # the local queue is full: let it drain, then go on
                    while True:
                        producer.poll(0.05)
                        try:
                            produce(topic, value, key, headers=headers)
                            break
                        except BufferError:
                            continue
                count += 1
            partitions = [
                TopicPartition(topic, partition, offset, metadata)
                for topic, positions in sorted(offsets.items())
                for partition, offset in sorted(positions.items())
            ]
            if partitions:
                producer.send_offsets_to_transaction(
                    partitions, self._consumer.consumer_group_metadata(), self.timeout
                )
            producer.commit_transaction(self.timeout)
        except KafkaException as exc:
            raise self._failed(exc) from None
        return count

    def _failed(self, exc: KafkaException) -> TransactionError:
        error: KafkaError = exc.args[0]
        fenced = error.code() in (
            KafkaError._FENCED,
            KafkaError.PRODUCER_FENCED,
            KafkaError.INVALID_PRODUCER_EPOCH,
        ) or (error.fatal() and "fenced" in error.str().lower())
        if fenced:
            return FencedError(
                f"transactional id {self.transactional_id!r} was taken by another process "
                "(a newer run of this revision, or a rewind): this one stops writing"
            )
        if error.txn_requires_abort():
            with contextlib.suppress(KafkaException):  # the new process aborts it then
                self._producer.abort_transaction(self.timeout)
        return TransactionError(
            f"transaction of {self.transactional_id!r} did not commit: {error.str()}; "
            "nothing of it is visible, and the batch is written again"
        )

    def close(self) -> None:
        """Let go of the producer and the group's consumer."""
        with contextlib.suppress(KafkaException):  # a fenced producer has nothing to flush
            self._producer.flush(5)
        self._consumer.close()
