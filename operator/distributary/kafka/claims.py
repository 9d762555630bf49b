"""The claims topic: the log that says which Log owns each topic (`plan.claims` has the rule).

One compacted topic of one partition per Kafka cluster, shared by every installation on it (so
they agree on owners), read from its start into memory and then followed. A decision that could
be changed by a record not yet read is made only after reading up to the end of the log: a claim
after reading past its own record, a "taken" after reading to the high watermark. A claim this
process already holds needs no read: records it has not seen come after it in log order and
cannot take its place (only its own release does).

Claims of Logs deleted while no operator watched them are swept (`sweep_start`, then
`release_stale` once the Logs are listed): see `plan.claims.stale_claims` for why only claims
older than the listing count.

Every call blocks (run it in a thread) and is serialised by a lock; Kafka that does not answer
raises `KafkaAdminError`, as the Admin API's calls do, so callers treat both alike.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from distributary.kafka.admin import KafkaAdminError
from distributary.kafka.cluster import NO_LEADER_YET, client_config
from distributary.plan.claims import (
    Claimant,
    ClaimRecord,
    Claims,
    Deletion,
    claim_created,
    deletion,
    parse_record,
    record_key,
    record_value,
    stale_claims,
)

TIMEOUT = 15.0  # seconds a read to the end of the log or a write may take


@dataclass(frozen=True)
class Verdict:
    """A claim's outcome: the owner's record, and whether it is the claimant's."""

    owner: ClaimRecord
    mine: bool


@dataclass(frozen=True)
class SweepStart:
    """Where a sweep of stale claims began, read before the Logs are listed: the claims topic's
    end offset, and this process's clock (`time.monotonic`)."""

    end: int
    at: float


class ClaimsLog:
    """The claims topic `topic` of the cluster at `bootstrap_servers`; `client` adds librdkafka
    settings (TLS, SASL)."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        client: Mapping[str, str] | None = None,
        cluster: str | None = None,
    ) -> None:
        self.topic = topic
        self.cluster = cluster  # the Kubernetes cluster its records name (kube-system's uid)
        extra: dict[str, str | int | float | bool] = dict(client or {})
        self._producer = Producer(
            client_config(bootstrap_servers, **extra, acks="all", **{"enable.idempotence": True})
        )
        reader: dict[str, str | int | float | bool] = {
            **extra,
            "group.id": f"{topic}.reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",  # the log's start, wherever compaction left it
            "fetch.wait.max.ms": 20,
        }
        self._consumer = Consumer(client_config(bootstrap_servers, **reader))
        self._partition = TopicPartition(topic, 0, 0)
        self._assigned = False
        self._next = 0  # the next offset to read
        self.claims = Claims()
        self._confirmed: dict[str, float] = {}  # claimant -> when a claim last said it owns
        self._lock = threading.Lock()

    def claim(
        self,
        topic: str,
        claimant: Claimant,
        exists: Callable[[], bool],
        held_before: bool = False,
    ) -> Verdict:
        """Claim `topic` for `claimant` unless it already holds it, and say who owns it.
        `exists` tells whether the topic is in Kafka (asked only when a claim is appended);
        `held_before`: the Log held the topic before claims were kept (it counts as made by it).
        A claimant that loses has its claim released at once."""
        with self._lock:
            owner = self.claims.owner(topic)
            if owner is not None and owner.claimant.identity == claimant.identity:
                return self._owned(owner)
            self._read_to(self._end())
            owner = self.claims.owner(topic)
            if owner is not None:
                mine = self.claims.mine(topic, claimant)
                if owner.claimant.identity == claimant.identity:
                    return self._owned(owner)
                if mine is not None and not mine.released:  # a loser's claim left standing
                    self._append(topic, claimant, released=True, created=mine.created)
                return Verdict(owner, False)
            created = claim_created(
                self.claims, topic, claimant, exists=exists(), held_before=held_before
            )
            offset = self._append(topic, claimant, released=False, created=created)
            self._read_to(offset + 1)
            owner = self.claims.owner(topic)
            if owner is None:
                raise KafkaAdminError(
                    f"claims topic {self.topic}: the claim of topic {topic} was not read back; "
                    "check that the topic is compacted and writable"
                )
            if owner.claimant.identity != claimant.identity:
                self._append(topic, claimant, released=True, created=created)
                return Verdict(owner, False)
            return self._owned(owner)

    def _owned(self, owner: ClaimRecord) -> Verdict:
        """The verdict for a claimant that owns the topic, noted for `release_stale`."""
        self._confirmed[owner.claimant.identity] = time.monotonic()
        return Verdict(owner, True)

    def deletion(self, topic: str, claimant: Claimant) -> tuple[Deletion, Claimant | None]:
        """Whether `claimant`'s deletion may delete `topic` (`plan.claims.deletion`), as the
        whole log says."""
        with self._lock:
            self._read_to(self._end())
            return deletion(self.claims, topic, claimant)

    def release(self, claimant: Claimant, topics: list[str] | None = None) -> list[str]:
        """Release `claimant`'s standing claims (on `topics`, or all of them); those released."""
        with self._lock:
            return self._release(claimant, topics)

    def sweep_start(self) -> SweepStart:
        """Begin a sweep of stale claims: call it before listing the Logs."""
        at = time.monotonic()
        with self._lock:
            return SweepStart(self._end(), at)

    def release_stale(
        self, start: SweepStart, existing: Collection[str], watched: Collection[str] | None
    ) -> dict[Claimant, list[str]]:
        """Release the standing claims of Logs deleted before the sweep that began at `start`
        (`plan.claims.stale_claims`; `existing`: the Logs listed since, as `namespace/name`;
        `watched`: the namespaces listed, None: all); the Logs and the topics released."""
        with self._lock:
            self._read_to(self._end())
            stale = stale_claims(self.claims, start.end, existing, watched, self.cluster)
            released: dict[Claimant, list[str]] = {}
            for claimant, topics in stale.items():
                # A Log made again, after the listing, under a deleted Log's name owns that
                # Log's standing claim without appending one; this process saw it do so.
                if self._confirmed.get(claimant.identity, float("-inf")) >= start.at:
                    continue
                if chosen := self._release(claimant, topics):
                    released[claimant] = chosen
            return released

    def _release(self, claimant: Claimant, topics: list[str] | None) -> list[str]:
        self._read_to(self._end())
        held = self.claims.held_by(claimant)
        chosen = [t for t in held if topics is None or t in topics]
        for topic in chosen:
            mine = self.claims.mine(topic, claimant)
            created = bool(mine and mine.created)
            self._append(topic, claimant, released=True, created=created)
        if chosen:
            self._read_to(self._end())
        return chosen

    def close(self) -> None:
        """Leave the topic and send what is queued."""
        self._producer.flush(TIMEOUT)
        self._consumer.close()

    def _append(self, topic: str, claimant: Claimant, *, released: bool, created: bool) -> int:
        """Write one record and wait for it: its offset."""
        delivered: dict[str, Any] = {}

        def on_delivery(error: KafkaError | None, message: Any) -> None:
            delivered["error"], delivered["offset"] = error, message.offset()

        value = record_value(claimant, released=released, created=created, cluster=self.cluster)
        try:
            self._producer.produce(
                self.topic,
                key=record_key(topic, claimant).encode(),
                value=json.dumps(value, separators=(",", ":")).encode(),
                partition=0,
                on_delivery=on_delivery,
            )
        except (BufferError, KafkaException) as exc:
            raise KafkaAdminError(f"claims topic {self.topic}: cannot write: {exc}") from exc
        self._producer.flush(TIMEOUT)
        error = delivered.get("error")
        if "offset" not in delivered or error is not None:
            detail = error.str() if error is not None else f"no answer within {TIMEOUT:.0f}s"
            raise KafkaAdminError(
                f"claims topic {self.topic}: a claim of topic {topic} was not written: {detail}"
            )
        return int(delivered["offset"])

    def _end(self) -> int:
        """The claims topic's high watermark (asked again while its leader is being elected,
        as it is just after the topic is made)."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                _, high = self._consumer.get_watermark_offsets(self._partition, timeout=TIMEOUT)
                return int(high)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                again = isinstance(error, KafkaError) and (
                    error.retriable() or error.code() in NO_LEADER_YET
                )
                if not again or time.monotonic() > deadline:
                    raise KafkaAdminError(
                        f"claims topic {self.topic} cannot be read: {exc}; the operator makes it "
                        "at start: check that Kafka is reachable and the topic exists"
                    ) from exc
                time.sleep(0.2)

    def _read_to(self, end: int) -> None:
        """Read records until the next offset is at least `end`."""
        if self._next >= end:
            return
        if not self._assigned:
            self._consumer.assign([TopicPartition(self.topic, 0, self._next)])
            self._assigned = True
        deadline = time.monotonic() + TIMEOUT
        while self._next < end:
            if time.monotonic() > deadline:
                raise KafkaAdminError(
                    f"claims topic {self.topic}: read up to offset {self._next} of {end} within "
                    f"{TIMEOUT:.0f}s; check that Kafka is reachable"
                )
            for message in self._consumer.consume(500, 0.5):
                if message.error() is not None:
                    continue
                offset = int(message.offset() or 0)
                record = parse_record(message.key(), message.value(), offset)
                if record is not None:
                    self.claims.add(record)
                self._next = max(self._next, offset + 1)
            self._skip_gaps()

    def _skip_gaps(self) -> None:
        """Offsets compaction removed are never returned: the consumer's position moves past
        them."""
        try:
            (position,) = self._consumer.position([TopicPartition(self.topic, 0)])
        except KafkaException:
            return
        if position.offset is not None and position.offset > self._next:
            self._next = position.offset
