"""The claims topic: the log that says which Log owns each topic (`plan.kafka_topics.claims` has the
rule).

One compacted topic of one partition per Kafka cluster, shared by every installation on it (so
they agree on owners), read from its start into memory and then followed. A decision that could
be changed by a record not yet read is made only after reading up to the end of the log: a claim
after reading past its own record, a "taken" after reading to the high watermark. A claim this
process already holds needs no read: records it has not seen come after it in log order and
cannot take its place (only its own release does).

Claims of Logs deleted while no operator watched them are swept (`sweep_start`, then
`release_stale` once the Logs are listed): see `plan.kafka_topics.claims.stale_claims` for why only
claims older than the listing count.

Every call blocks (run it in a thread) and is serialised by a lock; claims that wait for the
lock are decided together by whoever takes it next (one read to the end, one write of every
record, one read back), so a thousand Logs made at once cost a few round trips per batch, not
per topic, and each claim is still decided only after reading past its own record. Kafka that
does not answer raises `KafkaAdminError`, as the Admin API's calls do, so callers treat both
alike.
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
from distributary.plan.kafka_topics.claims import (
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


Present = Callable[[Collection[str]], Collection[str]]  # which of these topics are in Kafka


class _ClaimRequest:
    """One caller's claim, decided by whichever caller decides the batch it is in."""

    def __init__(self, topic: str, claimant: Claimant, present: Present, held_before: bool) -> None:
        self.topic = topic
        self.claimant = claimant
        self.present = present
        self.held_before = held_before
        self.same_as: _ClaimRequest | None = None  # the same claim earlier in the batch
        self.decided = False
        self._done = threading.Event()
        self._verdict: Verdict | None = None
        self._error: Exception | None = None

    def decide(self, verdict: Verdict) -> None:
        self._verdict, self.decided = verdict, True
        self._done.set()

    def fail(self, error: Exception) -> None:
        self._error, self.decided = error, True
        self._done.set()

    def follow(self) -> None:
        """A repeated claim takes the outcome of the one it repeats."""
        if self.same_as is not None and not self.decided:
            self._verdict, self._error = self.same_as._verdict, self.same_as._error
            self.decided = True
            self._done.set()

    def wait(self) -> None:
        self._done.wait()

    def outcome(self) -> Verdict:
        if self._error is not None:
            raise self._error
        assert self._verdict is not None, "a claim was left undecided"
        return self._verdict


def _present_of(requests: list[_ClaimRequest]) -> dict[Present, Collection[str]]:
    """Ask each `present` of `requests` once, for all its topics; a request whose `present`
    fails is failed with its error (the caller's own question) and left out."""
    asked: dict[Present, list[_ClaimRequest]] = {}
    for request in requests:
        asked.setdefault(request.present, []).append(request)
    answers: dict[Present, Collection[str]] = {}
    for present, these in asked.items():
        try:
            answers[present] = set(present([r.topic for r in these]))
        except Exception as exc:
            for request in these:
                request.fail(exc)
    return answers


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
        self._lock = threading.Lock()  # held while reading or writing the log
        self._memory = threading.Lock()  # held while `claims` changes, so a held claim is
        # answered without waiting for the log's reader
        self._waiting: list[_ClaimRequest] = []  # claims not yet taken into a decision
        self._waiting_lock = threading.Lock()
        self._deciding = False  # a caller is deciding the waiting claims

    def claim(
        self,
        topic: str,
        claimant: Claimant,
        present: Present,
        held_before: bool = False,
    ) -> Verdict:
        """Claim `topic` for `claimant` unless it already holds it, and say who owns it.
        `present` tells which of some topics are in Kafka (asked only when a claim is appended,
        once for all the claims decided together that pass the same `present`);
        `held_before`: the Log held the topic before claims were kept (it counts as made by it).
        A claimant that loses has its claim released at once.

        Claims made at the same time are decided together: the first caller to find no one
        deciding decides every waiting claim, batch after batch, each with one read to the end,
        one write of all its records and one read back past the last (`_decide`); the others
        wait for theirs."""
        with self._memory:
            owner = self.claims.owner(topic)
            if owner is not None and owner.claimant.identity == claimant.identity:
                return self._owned(owner)
        request = _ClaimRequest(topic, claimant, present, held_before)
        with self._waiting_lock:
            self._waiting.append(request)
            leads, self._deciding = not self._deciding, True
        if leads:
            self._decide_waiting()
        request.wait()
        return request.outcome()

    def _decide_waiting(self) -> None:
        """Decide the waiting claims, batch after batch, until none wait."""
        batch: list[_ClaimRequest] = []
        try:
            while True:
                with self._waiting_lock:
                    batch, self._waiting = self._waiting, []
                    if not batch:
                        self._deciding = False
                        return
                with self._lock:
                    self._decide(batch)
        except BaseException as exc:  # interrupted: no caller may wait for ever
            with self._waiting_lock:
                batch, self._waiting, self._deciding = batch + self._waiting, [], False
            for request in batch:
                if not request.decided:
                    request.fail(KafkaAdminError(f"claims topic {self.topic}: {exc!r}"))
            raise

    def _decide(self, batch: list[_ClaimRequest]) -> None:
        """Decide every claim of `batch`; a Kafka error is each undecided request's outcome."""
        try:
            self._read_to(self._end())
            appended, losers = self._claims_to_append(batch)
            offsets = self._append_many(
                [(r.topic, r.claimant, False, created) for r, created in appended]
            )
            if offsets:
                self._read_to(max(offsets) + 1)
            for request, created in appended:
                owner = self.claims.owner(request.topic)
                if owner is None:
                    request.fail(
                        KafkaAdminError(
                            f"claims topic {self.topic}: the claim of topic {request.topic} was "
                            "not read back; check that the topic is compacted and writable"
                        )
                    )
                elif owner.claimant.identity != request.claimant.identity:
                    losers.append((request, owner, created))
                else:
                    request.decide(self._owned(owner))
            self._append_many([(r.topic, r.claimant, True, created) for r, _, created in losers])
            for request, owner, _ in losers:
                request.decide(Verdict(owner, False))
            for request in batch:
                request.follow()
        except Exception as exc:  # Kafka's error, or a fault: every waiting caller hears it
            for request in batch:
                if not request.decided:
                    request.fail(exc)

    def _claims_to_append(
        self, batch: list[_ClaimRequest]
    ) -> tuple[list[tuple[_ClaimRequest, bool]], list[tuple[_ClaimRequest, ClaimRecord, bool]]]:
        """Decide what the log read so far decides; the rest, each with whether its claim says
        it made the topic, are to be appended. A claimant asking twice for one topic appends
        once (a second record of its own would stand behind a rival's in log order). Also the
        losers whose earlier claim is still standing, to be released."""
        appended: list[_ClaimRequest] = []
        losers: list[tuple[_ClaimRequest, ClaimRecord, bool]] = []
        first: dict[tuple[str, str], _ClaimRequest] = {}
        for request in batch:
            key = (request.topic, request.claimant.identity)
            if key in first:
                request.same_as = first[key]
                continue
            first[key] = request
            owner = self.claims.owner(request.topic)
            if owner is None:
                appended.append(request)
            elif owner.claimant.identity == request.claimant.identity:
                request.decide(self._owned(owner))
            elif (mine := self.claims.mine(request.topic, request.claimant)) and not mine.released:
                losers.append((request, owner, mine.created))  # a loser's claim left standing
            else:
                request.decide(Verdict(owner, False))
        present = _present_of(appended)
        made = [
            (r, claim_created(
                self.claims, r.topic, r.claimant, exists=r.topic in present[r.present],
                held_before=r.held_before,
            ))
            for r in appended
            if r.present in present
        ]  # fmt: skip
        return made, losers

    def _owned(self, owner: ClaimRecord) -> Verdict:
        """The verdict for a claimant that owns the topic, noted for `release_stale`."""
        self._confirmed[owner.claimant.identity] = time.monotonic()
        return Verdict(owner, True)

    def deletion(self, topic: str, claimant: Claimant) -> tuple[Deletion, Claimant | None]:
        """Whether `claimant`'s deletion may delete `topic` (`plan.kafka_topics.claims.deletion`),
        as the whole log says."""
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
        (`plan.kafka_topics.claims.stale_claims`; `existing`: the Logs listed since, as
        `namespace/name`; `watched`: the namespaces listed, None: all); the Logs and the topics
        released."""
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
        records = []
        for topic in chosen:
            mine = self.claims.mine(topic, claimant)
            records.append((topic, claimant, True, bool(mine and mine.created)))
        if offsets := self._append_many(records):
            self._read_to(max(offsets) + 1)
        return chosen

    def close(self) -> None:
        """Leave the topic and send what is queued."""
        self._producer.flush(TIMEOUT)
        self._consumer.close()

    def _append_many(self, records: list[tuple[str, Claimant, bool, bool]]) -> list[int]:
        """Write records (topic, claimant, released, created) and wait for all: their offsets."""
        delivered: list[tuple[KafkaError | None, int | None]] = []

        def on_delivery(error: KafkaError | None, message: Any) -> None:
            delivered.append((error, message.offset()))

        for topic, claimant, released, created in records:
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
        if records:
            self._producer.flush(TIMEOUT)
        failed = [error for error, _ in delivered if error is not None]
        if len(delivered) < len(records) or failed:
            detail = failed[0].str() if failed else f"no answer within {TIMEOUT:.0f}s"
            topics = ", ".join(sorted({topic for topic, *_ in records}))
            raise KafkaAdminError(
                f"claims topic {self.topic}: claims of topics {topics} were not written: {detail}"
            )
        return [int(offset or 0) for _, offset in delivered]

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
            # Ask for no more than are due: consume() waits its whole timeout for a batch it
            # cannot fill, and a claim's read back is often one record.
            for message in self._consumer.consume(min(500, max(1, end - self._next)), 0.5):
                if message.error() is not None:
                    continue
                offset = int(message.offset() or 0)
                record = parse_record(message.key(), message.value(), offset)
                if record is not None:
                    with self._memory:
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
