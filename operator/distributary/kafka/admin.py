"""Topics, watermarks and consumer-group offsets through Kafka's Admin API.

`KafkaAdmin` is the one place the operator asks Kafka about topics and groups, so it is where
Kafka's failures become errors people can act on: every `KafkaAdminError` names the topic or group
and says what to do. It is synchronous on purpose (the operator runs it in a thread), and every
call is bounded by `timeout`: confluent-kafka's futures are waited on with a deadline, never
forever.

Within that deadline, answers that only mean "not yet" are retried (a coordinator still loading
the offsets topic after a broker start, a leader still being elected for a new partition), and
a change is only done once the brokers show it: Kafka acknowledges a change at the controller a
moment before the brokers learn it, and callers expect to read what they have just written.

It speaks in the planner's terms (`plan.kafka_topics.topics`): `describe_topic` returns an
`ObservedTopic` whose configs are only the topic's own overrides (source DYNAMIC_TOPIC_CONFIG),
because those are what a Log sets and what the planner compares; the broker's defaults would look
like drift.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, TypeVar

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

# confluent_kafka.admin re-exports these without declaring them public, which mypy --strict
# rejects; they are imported from the modules that define them (pinned confluent-kafka 2.16.1).
from confluent_kafka.admin._config import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin._listoffsets import OffsetSpec
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewPartitions, NewTopic

from distributary.errors import DistributaryError
from distributary.kafka.cluster import client_config, kafka_error, result_within
from distributary.kafka.transactions import fence
from distributary.plan.kafka_topics.topics import AlterConfigs, CreateTopic, ObservedTopic
from distributary.plan.revisions.positions import (
    Offsets,
    Watermarks,
    partition_lag,
    split_watermarks,
)

T = TypeVar("T")

_RETRY_PAUSE = 0.25
_E = KafkaError
# Answers that mean "ask again shortly", not "no".
_TRANSIENT = {
    _E.COORDINATOR_LOAD_IN_PROGRESS, _E.COORDINATOR_NOT_AVAILABLE, _E.NOT_COORDINATOR,
    _E.NOT_LEADER_FOR_PARTITION, _E.LEADER_NOT_AVAILABLE, _E.NOT_CONTROLLER,
    _E._UNKNOWN_PARTITION,
    # A broker that has just started answers with stale leader epochs for a moment.
    _E.UNKNOWN_LEADER_EPOCH, _E.FENCED_LEADER_EPOCH,
    # A group's offsets in a transaction not yet committed: asked again, they are settled.
    _E.UNSTABLE_OFFSET_COMMIT,
}  # fmt: skip
_UNREACHABLE = {_E._TIMED_OUT, _E._TRANSPORT, _E._ALL_BROKERS_DOWN, _E.REQUEST_TIMED_OUT}
# A group with members refuses offset changes with one of these, depending on its protocol.
_ACTIVE_GROUP = {
    _E.UNKNOWN_MEMBER_ID, _E.REBALANCE_IN_PROGRESS, _E.ILLEGAL_GENERATION,
    _E.STALE_MEMBER_EPOCH, _E.FENCED_MEMBER_EPOCH,
}  # fmt: skip
# Answers that mean "no, and no again until the request or the cluster's rules change".
_REFUSALS = {
    _E.INVALID_REPLICATION_FACTOR, _E.INVALID_REPLICA_ASSIGNMENT, _E.INVALID_PARTITIONS,
    _E.INVALID_CONFIG, _E.POLICY_VIOLATION, _E.TOPIC_EXCEPTION, _E.INVALID_REQUEST,
    _E.TOPIC_AUTHORIZATION_FAILED, _E.CLUSTER_AUTHORIZATION_FAILED,
    _E.GROUP_AUTHORIZATION_FAILED, _E.TOPIC_DELETION_DISABLED,
}  # fmt: skip
_FIXES = {
    _E.TOPIC_ALREADY_EXISTS: "topic {topic!r} already exists: observe it and plan changes to "
    "it instead",
    _E.INVALID_CONFIG: "Kafka refused the config ({detail}): correct the key or value in "
    "spec.config",
    _E.INVALID_REPLICATION_FACTOR: "{detail}: set spec.replicas to at most the number of "
    "brokers, or leave it unset for the broker's default",
    _E.INVALID_PARTITIONS: "{detail}: Kafka only adds partitions; ask for more than the topic has",
}


class KafkaAdminError(DistributaryError, RuntimeError):
    """Kafka refused or did not answer; the message names the topic or group and what to do.
    `code` is Kafka's name for the error (e.g. `UNKNOWN_TOPIC_OR_PART`), `detail` Kafka's own
    words; `refused` says Kafka answered and said no (asking again gets the same answer), as
    against not answering at all."""

    def __init__(
        self, message: str, *, code: str | None = None, detail: str = "", refused: bool = False
    ) -> None:
        super().__init__(message)
        self.code = code
        self.detail = detail
        self.refused = refused


class _RefusedError(Exception):
    """A Kafka error and the topic it concerns, raised inside an attempt."""

    def __init__(self, error: KafkaError, topic: str | None = None) -> None:
        super().__init__(error.str())
        self.error, self.topic = error, topic


class KafkaAdmin:
    """Topics, watermarks and group offsets of the cluster at `bootstrap_servers`; each call
    gives up after `timeout` seconds. `client` adds librdkafka settings (TLS, SASL)."""

    def __init__(
        self, bootstrap_servers: str, timeout: float = 30.0, client: Mapping[str, str] | None = None
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout = timeout
        self.client = dict(client or {})
        self._client = AdminClient(client_config(bootstrap_servers, **self.client))
        self._listings: dict[str, tuple[float, set[str]]] = {}  # (when asked, names)
        self._listing_locks: dict[str, threading.Lock] = {}

    def close(self) -> None:
        """Destroy the client now, while its brokers still answer. librdkafka destroys a client
        when its last reference goes; one destroyed after its broker stopped (at the end of
        `distributary run`, by the interpreter's last collection) can block its process's exit.
        The admin is not used after this."""
        with contextlib.suppress(AttributeError):  # closed twice
            del self._client

    def describe_topic(self, topic: str) -> ObservedTopic | None:
        """The topic as Kafka reports it (configs: its own overrides only), None if absent."""
        partitions = self._call(f"describing topic {topic!r}", lambda t: self._metadata(topic, t))
        if partitions is None:
            return None
        configs = self._call(
            f"reading the configs of topic {topic!r}", lambda t: self._overrides(topic, t), topic
        )
        replicas = max((len(p.replicas) for p in partitions.values()), default=0)
        return ObservedTopic(topic, len(partitions), replicas, configs)

    def create_topic(self, action: CreateTopic) -> None:
        """Create a topic with its partitions, replicas (broker default when None) and configs."""
        name, replicas = action.name, -1 if action.replicas is None else action.replicas
        new = NewTopic(name, action.partitions, replicas, config=dict(action.configs))
        self._call(
            f"creating topic {name!r}",
            lambda t: _only(
                self._client.create_topics([new], request_timeout=t, operation_timeout=t), t
            ),
            name,
        )
        self._await(
            f"waiting for new topic {name!r} to be listed",
            lambda t: len(self._metadata(name, t) or {}) >= action.partitions,
        )

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow `topic` to `total` partitions (Kafka cannot remove partitions)."""
        grow = NewPartitions(topic, total)
        self._call(
            f"growing topic {topic!r} to {total} partitions",
            lambda t: _only(
                self._client.create_partitions([grow], request_timeout=t, operation_timeout=t), t
            ),
            topic,
        )
        self._await(
            f"waiting for topic {topic!r} to list {total} partitions",
            lambda t: len(self._metadata(topic, t) or {}) >= total,
        )

    def alter_configs(self, topic: str, change: AlterConfigs) -> None:
        """Set and unset config keys of `topic`, leaving every other key as it is."""
        entries = [
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            for key, value in sorted(change.set.items())
        ] + [
            ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
            for k in change.delete
        ]
        if not entries:
            return
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        self._call(
            f"changing the configs of topic {topic!r}",
            lambda t: _only(
                self._client.incremental_alter_configs([resource], request_timeout=t), t
            ),
            topic,
        )
        self._await(
            f"waiting for the configs of topic {topic!r} to change",
            lambda t: _applied(change, self._overrides(topic, t)),
        )

    def delete_topic(self, topic: str) -> None:
        """Delete `topic` and wait until Kafka no longer lists it; a topic already gone is fine."""
        try:
            self._call(
                f"deleting topic {topic!r}",
                lambda t: _only(
                    self._client.delete_topics([topic], request_timeout=t, operation_timeout=t), t
                ),
                topic,
            )
        except KafkaAdminError as exc:
            if exc.code != "UNKNOWN_TOPIC_OR_PART":
                raise
        self._await(
            f"waiting for topic {topic!r} to be deleted",
            lambda t: self._metadata(topic, t) is None,
        )

    def watermarks(self, topics: Iterable[str]) -> Watermarks:
        """(start, end) of every partition of `topics`: the low and high watermarks, i.e. the
        first retained offset and the offset the next record will get."""
        partitions = {topic: self._partition_ids(topic) for topic in sorted(set(topics))}
        earliest, latest = OffsetSpec.earliest(), OffsetSpec.latest()  # type: ignore[no-untyped-call]
        starts = self._list_offsets(partitions, earliest, "start")
        ends = self._list_offsets(partitions, latest, "end")
        return {
            topic: {p: (starts[topic][p], ends[topic][p]) for p in ids}
            for topic, ids in partitions.items()
        }

    def start_offsets(self, topics: Iterable[str]) -> Offsets:
        """The first retained offset of every partition of `topics`."""
        return split_watermarks(self.watermarks(topics))[0]

    def end_offsets(self, topics: Iterable[str]) -> Offsets:
        """The offset the next record of every partition of `topics` will get."""
        return split_watermarks(self.watermarks(topics))[1]

    def offsets_for_time(self, topics: Iterable[str], timestamp_ms: int) -> Offsets:
        """The offset of the first record at or after `timestamp_ms` in every partition of
        `topics`; -1 where the partition has none."""
        partitions = {topic: self._partition_ids(topic) for topic in sorted(set(topics))}
        spec = OffsetSpec.for_timestamp(timestamp_ms)
        return self._list_offsets(partitions, spec, f"timestamp {timestamp_ms}")

    # Many topics per request: what one reconcile of many Logs asks at once. Each answers per
    # topic, so one topic's failure is that topic's alone; a Kafka that does not answer at all
    # raises, as the one-topic calls do.

    def list_partitions(self, topics: Iterable[str]) -> dict[str, int | None]:
        """How many partitions each of `topics` has (None: absent), from one metadata request;
        a topic whose metadata carries another error is left out."""
        return {
            name: None if partitions is None else len(partitions)
            for name, partitions in self._listed(topics).items()
        }

    def _listed(self, topics: Iterable[str]) -> dict[str, dict[int, Any] | None]:
        """Each of `topics`' partition metadata (None: absent), from one metadata request that
        names them (never the whole cluster's: with thousands of topics that cost more than the
        work it served); a topic Kafka answers with another error is left out."""
        names = sorted(set(topics))
        if not names:
            return {}

        def attempt(timeout: float) -> dict[str, dict[int, Any] | None]:
            futures = self._client.describe_topics(TopicCollection(names), request_timeout=timeout)
            found: dict[str, dict[int, Any] | None] = {}
            for name, future in futures.items():
                try:
                    described = result_within(future, timeout)
                except KafkaException as exc:
                    code = kafka_error(exc).code()
                    if code in _UNREACHABLE:
                        raise  # the request, not the topic: Kafka did not answer
                    if code == _E.UNKNOWN_TOPIC_OR_PART:
                        found[name] = None
                    continue
                found[name] = {p.id: p for p in described.partitions}
            return found

        return self._call(f"describing topics on Kafka at {self.bootstrap_servers}", attempt)

    def describe_topics(self, topics: Iterable[str]) -> dict[str, ObservedTopic | None]:
        """`describe_topic` of many topics in two requests; a topic Kafka answered with an error
        is left out (ask for it alone to learn why)."""
        listed = self._listed(topics)
        observed: dict[str, ObservedTopic | None] = dict.fromkeys(
            name for name, partitions in listed.items() if partitions is None
        )
        present = {name: found for name, found in listed.items() if found is not None}
        if not present:
            return observed
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in sorted(present)]
        futures = self._call(
            "reading the configs of many topics",
            lambda t: self._client.describe_configs(resources, request_timeout=t),
        )
        for resource, future in futures.items():
            try:
                entries = result_within(future, self.timeout)
            except KafkaException:
                continue
            partitions = present[resource.name]
            replicas = max((len(p.replicas) for p in partitions.values()), default=0)
            observed[resource.name] = ObservedTopic(
                resource.name, len(partitions), replicas, _dynamic(entries)
            )
        return observed

    def create_topics(self, actions: Iterable[CreateTopic]) -> dict[str, KafkaAdminError | None]:
        """Create many topics in one request and wait until the brokers list them all; each
        topic's error, None for those made."""
        news = {
            action.name: NewTopic(
                action.name,
                action.partitions,
                -1 if action.replicas is None else action.replicas,
                config=dict(action.configs),
            )
            for action in actions
        }
        if not news:
            return {}
        futures = self._call(
            "creating topics",
            lambda t: self._client.create_topics(
                list(news.values()), request_timeout=t, operation_timeout=t
            ),
        )
        errors: dict[str, KafkaAdminError | None] = {}
        for name, future in futures.items():
            try:
                result_within(future, self.timeout)
                errors[name] = None
            except KafkaException as exc:
                errors[name] = self._explain(kafka_error(exc), f"creating topic {name!r}", name, "")
        made = {name: news[name].num_partitions for name, error in errors.items() if error is None}
        deadline = time.monotonic() + self.timeout
        while made:
            counts = self.list_partitions(made)
            made = {n: want for n, want in made.items() if (counts.get(n) or 0) < want}
            if made and time.monotonic() > deadline:
                for name in made:
                    errors[name] = KafkaAdminError(
                        f"waiting for new topic {name!r} to be listed failed: Kafka at "
                        f"{self.bootstrap_servers} accepted it but its brokers did not show it "
                        f"within {self.timeout:g}s: see their logs"
                    )
                break
            if made:
                time.sleep(_RETRY_PAUSE)
        return errors

    def watermarks_each(self, partitions: Mapping[str, int]) -> dict[str, Watermarks]:
        """`watermarks` of many topics (`partitions`: each one's partition count) in two
        requests, each topic's apart; a topic Kafka answered with an error is left out."""
        request = {t: list(range(count)) for t, count in partitions.items()}
        earliest, latest = OffsetSpec.earliest(), OffsetSpec.latest()  # type: ignore[no-untyped-call]
        starts = self._offsets_each(request, earliest)
        ends = self._offsets_each(request, latest)
        return {
            topic: {topic: {p: (starts[topic][p], ends[topic][p]) for p in ids}}
            for topic, ids in request.items()
            if topic in starts and topic in ends
        }

    def _ask_offsets(
        self, partitions: Mapping[str, list[int]], spec: OffsetSpec, timeout: float
    ) -> dict[TopicPartition, Any]:
        request = {TopicPartition(t, p): spec for t, ids in partitions.items() for p in ids}
        return dict(self._client.list_offsets(request, request_timeout=timeout))

    def _offsets_each(self, partitions: Mapping[str, list[int]], spec: OffsetSpec) -> Offsets:
        """The offsets of every topic that answered; topics whose partitions answered "not yet"
        (a leader still being elected) are asked again, together, until `timeout`."""
        offsets: Offsets = {}
        asked = dict(partitions)
        deadline = time.monotonic() + self.timeout
        while asked:
            futures = self._call(
                "reading the offsets of many topics", partial(self._ask_offsets, asked, spec)
            )
            found: Offsets = {topic: {} for topic in asked}
            again: set[str] = set()
            failed: set[str] = set()
            for tp, future in futures.items():
                try:
                    found[tp.topic][tp.partition] = result_within(future, self.timeout).offset
                except KafkaException as exc:
                    transient = kafka_error(exc).code() in _TRANSIENT
                    (again if transient else failed).add(tp.topic)
            offsets.update({t: o for t, o in found.items() if t not in again | failed})
            asked = {t: ids for t, ids in asked.items() if t in again - failed}
            if asked and time.monotonic() + _RETRY_PAUSE > deadline:
                break
            if asked:
                time.sleep(_RETRY_PAUSE)
        return offsets

    def committed(self, group: str) -> Offsets:
        """The offsets consumer group `group` has committed; empty when it has none."""
        self._group_members(group)
        return self._call(
            f"reading the offsets of consumer group {group!r}",
            lambda t: self._group_offsets(group, t),
            group=group,
        )

    def committed_metadata(self, group: str, topic: str | None = None) -> list[str]:
        """The metadata of each partition `group` has committed (empty strings included), of
        `topic`'s partitions only when given."""
        self._group_members(group)

        def attempt(timeout: float) -> list[str]:
            request = [ConsumerGroupTopicPartitions(group)]
            result = _only(
                self._client.list_consumer_group_offsets(
                    request, request_timeout=timeout, require_stable=True
                ),
                timeout,
            )
            return [
                tp.metadata or ""
                for tp in result.topic_partitions
                if tp.offset >= 0 and topic in (None, tp.topic)
            ]

        return self._call(f"reading the offsets of consumer group {group!r}", attempt, group=group)

    def commit(self, group: str, offsets: Offsets, metadata: str = "") -> None:
        """Set the committed offsets of `group` (which must have no active members) to `offsets`,
        with `metadata` on each; partitions not named keep theirs."""
        action = f"committing offsets for consumer group {group!r}"
        partitions = _topic_partitions(action, offsets, metadata)
        if not partitions:
            return
        members = self._group_members(group)
        if members:
            fix = _active_group(group, f"{members} active member{'s' * (members > 1)}")
            raise KafkaAdminError(f"{action} failed: {fix}", code="GROUP_HAS_MEMBERS")
        self._call(action, lambda t: self._alter_group(group, partitions, t), group=group)

    def delete_group(self, group: str) -> None:
        """Delete consumer group `group` with its committed offsets; it must have no active
        members (as for `commit`). A group already gone is fine."""
        action = f"deleting consumer group {group!r}"
        members = self._group_members(group)
        if members:
            fix = _active_group(group, f"{members} active member{'s' * (members > 1)}")
            raise KafkaAdminError(f"{action} failed: {fix}", code="GROUP_HAS_MEMBERS")
        try:
            self._call(
                action,
                lambda t: _only(self._client.delete_consumer_groups([group], request_timeout=t), t),
                group=group,
            )
        except KafkaAdminError as exc:
            if exc.code == "GROUP_ID_NOT_FOUND":
                return
            if exc.code == "NON_EMPTY_GROUP":  # a member joined since it was described
                fix = _active_group(group, "active members")
                raise KafkaAdminError(f"{action} failed: {fix}", code=exc.code) from None
            raise

    def fence(self, transactional_id: str) -> None:
        """Take `transactional_id` (see `transactions.fence`): every process that wrote with it
        before can commit nothing more."""
        fence(self.bootstrap_servers, transactional_id, self.timeout, self.client)

    def topic_names(self, max_age: float = 0.0) -> set[str]:
        """The names of every topic in the cluster; a listing asked for at most `max_age`
        seconds ago may answer (`_shared`)."""
        return self._shared(
            "topics",
            max_age,
            lambda: self._call(
                "listing the topics", lambda t: set(self._client.list_topics(timeout=t).topics)
            ),
        )

    def group_names(self, max_age: float = 0.0) -> set[str]:
        """The ids of every consumer group the cluster knows; a listing asked for at most
        `max_age` seconds ago may answer (`_shared`)."""

        def attempt(timeout: float) -> set[str]:
            listed = result_within(
                self._client.list_consumer_groups(request_timeout=timeout), timeout
            )
            return {str(g.group_id) for g in listed.valid}

        return self._shared("groups", max_age, lambda: self._call("listing the groups", attempt))

    def _shared(self, what: str, max_age: float, listing: Callable[[], set[str]]) -> set[str]:
        """`listing()`, or one asked for at most `max_age` seconds ago (0: none). Callers asking
        at once share one listing: the first lists while the others wait for it, so that many
        reconciles starting together ask Kafka once, not once each. A listing of every topic of
        a cluster of thousands costs the broker and this process more than most requests."""
        if max_age <= 0:
            return listing()
        asked = time.monotonic()
        lock = self._listing_locks.setdefault(what, threading.Lock())
        with lock:
            held = self._listings.get(what)
            if held is not None and held[0] >= asked - max_age:
                return set(held[1])
            started = time.monotonic()
            names = listing()
            self._listings[what] = (started, names)
            return set(names)

    def broker_config(self, name: str) -> str | None:
        """The value of broker setting `name` (e.g. `offsets.retention.minutes`) on a broker of
        the cluster; None when the broker does not say."""

        def attempt(timeout: float) -> str | None:
            brokers = self._client.list_topics(timeout=timeout).brokers
            if not brokers:
                return None
            resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
            entries = _only(
                self._client.describe_configs([resource], request_timeout=timeout), timeout
            )
            entry = entries.get(name)
            return None if entry is None or entry.value is None else str(entry.value)

        return self._call(f"reading the broker setting {name}", attempt)

    def lag(self, group: str, topics: Iterable[str]) -> Offsets:
        """Records `group` still has to read in each partition of `topics` (see
        `positions.partition_lag` for partitions it has not committed)."""
        start, end = split_watermarks(self.watermarks(topics))
        return partition_lag(start, end, self.committed(group))

    def _group_members(self, group: str) -> int:
        """How many members `group` has; asking also waits until the group's coordinator answers,
        which must come before any offset request: librdkafka's admin OffsetFetch crashes the
        process (rd_kafka_cgrp_op on a NULL group) if its coordinator is still loading, as on a
        fresh broker (librdkafka issue 5040)."""
        description = self._call(
            f"describing consumer group {group!r}",
            lambda t: _only(self._client.describe_consumer_groups([group], request_timeout=t), t),
            group=group,
        )
        return len(description.members)

    # Attempts: each takes the seconds it may use and raises KafkaException or _RefusedError.

    def _metadata(self, topic: str, timeout: float) -> dict[int, Any] | None:
        metadata = self._client.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        error = None if metadata is None else metadata.error
        if metadata is None or (error is not None and error.code() == _E.UNKNOWN_TOPIC_OR_PART):
            return None
        if error is not None:
            raise _RefusedError(error, topic)
        return dict(metadata.partitions)

    def _partition_ids(self, topic: str) -> list[int]:
        def attempt(timeout: float) -> list[int]:
            partitions = self._metadata(topic, timeout)
            if partitions is None:
                raise _RefusedError(KafkaError(_E.UNKNOWN_TOPIC_OR_PART), topic)
            return sorted(partitions)

        return self._call(f"reading the partitions of topic {topic!r}", attempt, topic)

    def _overrides(self, topic: str, timeout: float) -> dict[str, str]:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries = _only(self._client.describe_configs([resource], request_timeout=timeout), timeout)
        return _dynamic(entries)

    def _list_offsets(
        self, partitions: Mapping[str, list[int]], spec: OffsetSpec, which: str
    ) -> Offsets:
        request = {TopicPartition(t, p): spec for t, ids in partitions.items() for p in ids}

        def attempt(timeout: float) -> Offsets:
            # End offsets are what readers of committed records can reach (the last stable
            # offset): a transaction still open is not yet there to read.
            futures = (
                self._client.list_offsets(
                    request, request_timeout=timeout, isolation_level=IsolationLevel.READ_COMMITTED
                )
                if request
                else {}
            )
            offsets: Offsets = {topic: {} for topic in partitions}
            for tp, future in futures.items():
                try:
                    offsets[tp.topic][tp.partition] = result_within(future, timeout).offset
                except KafkaException as exc:
                    raise _RefusedError(kafka_error(exc), tp.topic) from None
            return offsets

        names = ", ".join(repr(topic) for topic in partitions)
        return self._call(f"reading the {which} offsets of topic {names}", attempt)

    def _group_offsets(self, group: str, timeout: float) -> Offsets:
        request = [ConsumerGroupTopicPartitions(group)]
        result = _only(
            self._client.list_consumer_group_offsets(
                request, request_timeout=timeout, require_stable=True
            ),
            timeout,
        )
        offsets: Offsets = {}
        for tp in sorted(result.topic_partitions, key=lambda tp: (tp.topic, tp.partition)):
            if tp.error is not None:
                raise _RefusedError(tp.error, tp.topic)
            if tp.offset >= 0:
                offsets.setdefault(tp.topic, {})[tp.partition] = tp.offset
        return offsets

    def _alter_group(self, group: str, partitions: list[TopicPartition], timeout: float) -> None:
        request = [ConsumerGroupTopicPartitions(group, partitions)]
        result = _only(
            self._client.alter_consumer_group_offsets(request, request_timeout=timeout), timeout
        )
        for tp in result.topic_partitions:
            if tp.error is not None:
                raise _RefusedError(tp.error, tp.topic)

    # Retries and errors

    def _call(
        self, action: str, attempt: Callable[[float], T], topic: str | None = None, group: str = ""
    ) -> T:
        """Run `attempt` until it succeeds, fails for good, or `timeout` has passed."""
        deadline = time.monotonic() + self.timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                return attempt(max(remaining, 1.0))
            except KafkaException as exc:
                failure = _RefusedError(kafka_error(exc), topic)
            except _RefusedError as exc:
                failure = exc
            if failure.error.code() not in _TRANSIENT or remaining <= _RETRY_PAUSE:
                raise self._explain(failure.error, action, failure.topic or topic, group) from None
            time.sleep(_RETRY_PAUSE)

    def _await(self, action: str, done: Callable[[float], bool]) -> None:
        """Wait until `done` holds: until the brokers show a change the controller accepted."""
        deadline = time.monotonic() + self.timeout
        while not self._call(action, done):
            if time.monotonic() > deadline:
                raise KafkaAdminError(
                    f"{action} failed: Kafka at {self.bootstrap_servers} accepted the change but "
                    f"its brokers did not show it within {self.timeout:g}s: see their logs"
                )
            time.sleep(_RETRY_PAUSE)

    def _explain(
        self, error: KafkaError, action: str, topic: str | None, group: str
    ) -> KafkaAdminError:
        code, detail, where = error.code(), error.str(), f"Kafka at {self.bootstrap_servers}"
        if code in _UNREACHABLE or code in _TRANSIENT:
            fix = (
                f"{where} did not answer within {self.timeout:g}s ({detail}): check that its "
                "brokers are running and reachable from here"
            )
        elif code == _E.UNKNOWN_TOPIC_OR_PART and topic:
            fix = (
                f"topic {topic!r} does not exist on {where}: create it first (apply the Log "
                "that names it) or correct the topic name"
            )
        elif code in _ACTIVE_GROUP and group:
            fix = _active_group(group, "active members")
        else:
            fix = _FIXES.get(code, "Kafka answered {name}: {detail}")
            fix = fix.format(topic=topic, detail=detail, name=error.name())
        refused = code in _REFUSALS
        return KafkaAdminError(
            f"{action} failed: {fix}", code=error.name(), detail=detail, refused=refused
        )


def _only(futures: Mapping[Any, Any], timeout: float) -> Any:
    """The result of the one future a one-resource admin request returns."""
    (future,) = futures.values()
    return result_within(future, timeout)


def _dynamic(entries: Mapping[str, Any]) -> dict[str, str]:
    """A topic's own config overrides among `describe_configs` entries (not broker defaults)."""
    dynamic = ConfigSource.DYNAMIC_TOPIC_CONFIG
    return {
        name: entry.value
        for name, entry in sorted(entries.items())
        if ConfigSource(entry.source) == dynamic and entry.value is not None
    }


def _active_group(group: str, members: str) -> str:
    return (
        f"consumer group {group!r} has {members}, and Kafka changes a group's offsets only "
        "while it has none: stop the group's consumers first (the view or job reading with it), "
        "then commit again"
    )


def _applied(change: AlterConfigs, configs: Mapping[str, str]) -> bool:
    unset = not any(key in configs for key in change.delete)
    return unset and all(configs.get(key) == value for key, value in change.set.items())


def _topic_partitions(action: str, offsets: Offsets, metadata: str = "") -> list[TopicPartition]:
    partitions = []
    for topic, positions in sorted(offsets.items()):
        for partition, offset in sorted(positions.items()):
            if offset < 0 or partition < 0:
                raise KafkaAdminError(
                    f"{action} failed: topic {topic!r} partition {partition} offset {offset} is "
                    "not a position; partitions and offsets are whole numbers from 0"
                )
            partitions.append(TopicPartition(topic, partition, offset, metadata))
    return partitions
