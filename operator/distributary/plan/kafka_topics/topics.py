"""The topic planner: from a Log spec and the topic Kafka reports, what to do and what to refuse.

A plan has two halves that never hide each other. `actions` are the changes that are safe to make
now; `refusals` are the changes the spec asks for that Kafka cannot make (remove partitions),
that this backend cannot make (change replicas without reassignment), or that would silently fork
the log (a new topic name). A refused partition count does not stop a retention change from being
applied: each field is planned on its own, so one mistake in a spec never freezes the rest of it.

Config changes are incremental. Only keys whose values differ are set, and a key is unset only when
the operator set it before (`managed_configs`, kept in the Log's status) and the spec no longer
names it; a key someone set on the topic by hand, which the spec never named, is left alone.

`kafka_topic_manifest` renders the same desired state as a Strimzi `KafkaTopic` for the strimzi
backend, where Strimzi's topic operator takes the place of `plan_topic`'s actions.

A view's revision topics take their Log's settings; its dead-letter topic takes only the Log's
partitions and replicas (`dead_letter_desired`): its configs are its own, never the output's, since
a dead letter may have no key and a compacted topic refuses a record without one. Both backends
render the one `DesiredTopic` they are given, so neither can drift to the Log's configs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from distributary.api.common import KUBE_NAME_PATTERN
from distributary.api.log import Log
from distributary.api.view import DeadLetters

STRIMZI_API_VERSIONS = ("kafka.strimzi.io/v1", "kafka.strimzi.io/v1beta2")


@dataclass(frozen=True)
class DesiredTopic:
    """The topic a Log asks for. `replicas` None leaves the broker's default in force."""

    name: str
    partitions: int
    replicas: int | None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ObservedTopic:
    """A topic as Kafka reports it; `configs` holds its topic-level overrides, not the defaults."""

    name: str
    partitions: int
    replicas: int
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CreateTopic:
    """Create the topic with its partitions, replicas (broker default when None) and configs."""

    name: str
    partitions: int
    replicas: int | None
    configs: Mapping[str, str]


@dataclass(frozen=True)
class AddPartitions:
    """Grow the topic to `total` partitions (Kafka's CreatePartitions takes the new total)."""

    total: int


@dataclass(frozen=True)
class AlterConfigs:
    """An incremental config change: keys to set to a value, and keys to return to the default."""

    set: Mapping[str, str]
    delete: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReassignReplicas:
    """Change the replication factor (only planned where the backend can reassign partitions)."""

    replicas: int


TopicAction = CreateTopic | AddPartitions | AlterConfigs | ReassignReplicas


def described(action: TopicAction) -> str:
    """What an action did, for people (events, `distributary run`'s lines)."""
    if isinstance(action, CreateTopic):
        replicas = f", {action.replicas} replicas" if action.replicas is not None else ""
        configs = ", ".join(f"{k}={v}" for k, v in sorted(action.configs.items()))
        count = f"{action.partitions} partition{'s' if action.partitions != 1 else ''}"
        return f"created with {count}{replicas}" + (f" ({configs})" if configs else "")
    if isinstance(action, AddPartitions):
        return f"grown to {action.total} partitions"
    if isinstance(action, AlterConfigs):
        parts = [f"{k}={v}" for k, v in sorted(action.set.items())]
        parts += [f"{k} back to the broker's default" for k in action.delete]
        return "configs changed: " + ", ".join(parts)
    return f"{action.replicas} replicas for each partition"


@dataclass(frozen=True)
class Refusal:
    """A change the spec asks for that will not be made: the field, a CamelCase reason, and a
    message that names the field, what is wrong and how to fix it."""

    field: str
    reason: str
    message: str


@dataclass(frozen=True)
class TopicPlan:
    """What to do to a topic, what is refused, and the config keys the operator manages after."""

    actions: tuple[TopicAction, ...]
    refusals: tuple[Refusal, ...] = ()
    managed_configs: frozenset[str] = frozenset()

    @property
    def in_sync(self) -> bool:
        """True when the topic is as the spec asks: nothing to do and nothing refused."""
        return not self.actions and not self.refusals


def desired_topic(log: Log, *, topic: str | None = None) -> DesiredTopic:
    """The topic `log` asks for; `topic` names another topic with the same settings (a view's
    revision topic), else the Log's own topic."""
    return DesiredTopic(
        name=topic or log.topic,
        partitions=log.spec.partitions,
        replicas=log.spec.replicas,
        configs=dict(sorted(log.spec.topic_configs().items())),
    )


def dead_letter_desired(name: str, output: Log, dead_letters: DeadLetters) -> DesiredTopic:
    """A view's dead-letter topic `name`: as many partitions and replicas as its `output` Log,
    and configs of its own: `cleanup.policy=delete` whatever the output's mode, and the
    retention `dead_letters` asks for."""
    return DesiredTopic(
        name=name,
        partitions=output.spec.partitions,
        replicas=output.spec.replicas,
        configs=dict(sorted(dead_letters.topic_configs().items())),
    )


def plan_topic(
    desired: DesiredTopic,
    observed: ObservedTopic | None,
    *,
    managed_configs: frozenset[str] = frozenset(),
    can_reassign: bool = False,
) -> TopicPlan:
    """The actions that bring `observed` to `desired`, and the changes refused with reasons.

    `managed_configs` are the config keys the operator set before (from the Log's status), the
    only keys it may unset. `can_reassign` says whether the backend can change replicas.
    """
    managed_after = frozenset(desired.configs)
    if observed is None:
        create = CreateTopic(
            desired.name, desired.partitions, desired.replicas, dict(desired.configs)
        )
        return TopicPlan(actions=(create,), managed_configs=managed_after)
    if observed.name != desired.name:
        # The spec now describes another topic. Changing the old one to match, or creating the new
        # one, would both fork the log; nothing is safe until the spec names the topic again.
        return TopicPlan(
            actions=(), refusals=(_renamed(desired, observed),), managed_configs=managed_configs
        )
    actions: list[TopicAction] = []
    refusals: list[Refusal] = []
    alter = _alter_configs(desired.configs, observed.configs, managed_configs)
    if alter is not None:
        actions.append(alter)
    if desired.partitions > observed.partitions:
        actions.append(AddPartitions(total=desired.partitions))
    elif desired.partitions < observed.partitions:
        refusals.append(_fewer_partitions(desired, observed))
    if desired.replicas is not None and desired.replicas != observed.replicas:
        if can_reassign:
            actions.append(ReassignReplicas(replicas=desired.replicas))
        else:
            refusals.append(_replicas_fixed(desired, observed))
    return TopicPlan(
        actions=tuple(actions), refusals=tuple(refusals), managed_configs=managed_after
    )


def _alter_configs(
    desired: Mapping[str, str], observed: Mapping[str, str], managed: frozenset[str]
) -> AlterConfigs | None:
    to_set = {key: value for key, value in sorted(desired.items()) if observed.get(key) != value}
    to_delete = tuple(sorted(key for key in managed if key not in desired and key in observed))
    if not to_set and not to_delete:
        return None
    return AlterConfigs(set=to_set, delete=to_delete)


def _fewer_partitions(desired: DesiredTopic, observed: ObservedTopic) -> Refusal:
    return Refusal(
        field="spec.partitions",
        reason="FewerPartitions",
        message=f"spec.partitions is {desired.partitions} but topic {observed.name!r} has "
        f"{observed.partitions}: Kafka cannot remove partitions; set spec.partitions to "
        f"{observed.partitions} or more, or create a new Log to have fewer",
    )


def _replicas_fixed(desired: DesiredTopic, observed: ObservedTopic) -> Refusal:
    return Refusal(
        field="spec.replicas",
        reason="ReplicasImmutable",
        message=f"spec.replicas is {desired.replicas} but topic {observed.name!r} has "
        f"{observed.replicas} replicas per partition, and this topic backend cannot reassign "
        f"partitions: set spec.replicas back to {observed.replicas}, or use a backend that can "
        "reassign replicas",
    )


def _renamed(desired: DesiredTopic, observed: ObservedTopic) -> Refusal:
    return Refusal(
        field="spec.topicName",
        reason="TopicRenamed",
        message=f"spec.topicName asks for topic {desired.name!r} but this Log's topic is "
        f"{observed.name!r}: a Log's topic never changes; set spec.topicName back to "
        f"{observed.name!r}, or create a new Log for topic {desired.name!r}",
    )


def kafka_topic_name(topic: str) -> str:
    """The KafkaTopic resource name for a topic: the topic itself when it is a valid Kubernetes
    name, else a valid name made from it with a hash suffix, so two topics never share one."""
    if len(topic) <= 253 and re.fullmatch(KUBE_NAME_PATTERN, topic):
        return topic
    digest = hashlib.sha256(topic.encode()).hexdigest()[:8]
    base = re.sub(r"[^a-z0-9]+", "-", topic.lower()).strip("-")[:200].rstrip("-")
    return f"{base}-{digest}" if base else f"topic-{digest}"


def kafka_topic_manifest(
    log: Log,
    *,
    cluster: str,
    namespace: str,
    api_version: str = "kafka.strimzi.io/v1",
    topic: str | None = None,
    desired: DesiredTopic | None = None,
) -> dict[str, Any]:
    """The Strimzi `KafkaTopic` for `log`, in `namespace` (where the topic operator watches);
    `topic` names another topic with the log's settings (a view's revision topic), `desired`
    another topic of the log with settings of its own (a view's dead-letter topic).

    `kafka.strimzi.io/v1` (Strimzi 0.49 and later; the only version from 1.0) and `v1beta2`
    (older Strimzi) have the same KafkaTopic spec fields; v1 makes `spec` required, which this
    manifest always has. `topicName` is always set, so the topic never depends on the resource
    name, and the resource is named after the topic, the one identity Kafka knows.
    """
    if api_version not in STRIMZI_API_VERSIONS:
        raise ValueError(
            f"KafkaTopic apiVersion {api_version!r} is not one of {', '.join(STRIMZI_API_VERSIONS)}"
        )
    if desired is None:
        desired = desired_topic(log, topic=topic)
    elif topic is not None and topic != desired.name:
        raise ValueError(f"topic {topic!r} and desired topic {desired.name!r} differ: give one")
    meta = log.metadata
    spec: dict[str, Any] = {"topicName": desired.name, "partitions": desired.partitions}
    if desired.replicas is not None:
        spec["replicas"] = desired.replicas
    spec["config"] = dict(desired.configs)
    return {
        "apiVersion": api_version,
        "kind": "KafkaTopic",
        "metadata": {
            "name": kafka_topic_name(desired.name),
            "namespace": namespace,
            "labels": {
                "strimzi.io/cluster": cluster,
                "app.kubernetes.io/managed-by": "distributary",
            },
            # An annotation, not a label: a Log's namespace/name may exceed a label's 63 chars.
            "annotations": {"distributary.dev/log": f"{meta.namespace}/{meta.name}"},
        },
        "spec": spec,
    }


REFUSED_AGAIN = 300  # seconds before a refusal that names no field is asked again

# The spec fields that stand for the topic configs a spec does not set under `config`.
_CONFIG_FIELDS = {
    "retention.ms": "retention.time",
    "retention.bytes": "retention.bytes",
    "cleanup.policy": "compaction",
}


def refused_field(desired: DesiredTopic, code: str | None, detail: str, spec: str = "spec") -> str:
    """The field of the spec (`spec`: where the topic's settings live, e.g. `spec.output` for a
    view) that Kafka's refusal `code` of `desired` concerns, as Kafka's words `detail` name it;
    the whole `spec` when they name none."""
    if code in ("INVALID_REPLICATION_FACTOR", "INVALID_REPLICA_ASSIGNMENT"):
        return f"{spec}.replicas"
    if code == "INVALID_PARTITIONS":
        return f"{spec}.partitions"
    if code == "TOPIC_EXCEPTION" and spec == "spec":  # a name this cluster does not allow
        return "spec.topicName"
    if code in ("INVALID_CONFIG", "POLICY_VIOLATION"):
        # The key Kafka's words name; else the only key there is.
        named = [key for key in desired.configs if key in detail] or (
            list(desired.configs) if len(desired.configs) == 1 else []
        )
        if not named:
            return f"{spec}.config" if spec == "spec" else spec
        key = max(named, key=len)  # `retention.ms` is in `local.retention.ms` too
        return (
            f"{spec}.{_CONFIG_FIELDS[key]}" if key in _CONFIG_FIELDS else f'{spec}.config["{key}"]'
        )
    return spec


def refusal_message(
    desired: DesiredTopic, code: str | None, detail: str, spec: str = "spec"
) -> str:
    """A Kafka refusal of `desired` for people: the topic, Kafka's own words and the field to
    correct (`refused_field`). Asking again gets the same answer, so the message says that the
    operator waits for the field to change."""
    words = detail.strip().rstrip(".") or code or "no reason given"
    where = refused_field(desired, code, detail, spec)
    fix = (
        "at most the number of brokers, or unset for the broker's default"
        if where.endswith(".replicas")
        else "a value this Kafka accepts"
    )
    if where == spec:
        return (
            f"Kafka refused topic {desired.name} ({code}): {words}. Correct {spec} or what the "
            f"cluster allows (its ACLs, its settings); the topic is tried again every "
            f"{REFUSED_AGAIN // 60} minutes and when {spec} changes"
        )
    return (
        f"Kafka refused topic {desired.name} ({code}): {words}. Set {where} to {fix}; the topic "
        "is tried again when it changes"
    )
