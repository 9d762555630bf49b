"""A KafkaTopic's status, as Strimzi's topic operator writes it, read as the outcome for a Log.

With the strimzi backend Distributary does not touch Kafka: it applies a `KafkaTopic` and
Strimzi's (unidirectional) topic operator makes the topic. What the topic operator did is only
in the KafkaTopic's status, so this module is the whole of the backend's judgement, kept pure:

- `status.observedGeneration` is the `metadata.generation` the topic operator last reconciled.
  Until it reaches the generation now applied, the status describes an older spec (or, with no
  status at all, nothing yet), and the Log waits: Reconciling, never Ready on stale news.
- `Ready=True` (the topic operator sets no reason) means the topic is as the spec says: the
  Log is Ready, with the partitions of the spec, since Strimzi refuses any other count.
- `Ready=False` carries Strimzi's reason (`NotSupported`, `KafkaError`, `ResourceConflict`,
  `InternalError`) and message (e.g. "Decreasing partitions not supported"): a change the
  topic operator will not make, so the Log is Stalled with that reason and message, and a hint
  on what to do.
- `ReconciliationPaused=True` (the `strimzi.io/pause-reconciliation` annotation) and the
  `strimzi.io/managed: "false"` annotation mean the topic operator has been told to leave the
  topic alone; a `Warning` with reason `NotConfigurable` means it will not set some of
  `spec.config`; a `status.replicasChange` is a replication change Cruise Control has yet to
  finish. The first three stall the Log (someone must act), the last keeps it Reconciling.

A KafkaTopic this Log did not make (no `distributary.dev/log` annotation naming it) is never
taken over: `ownership_refusal` stalls the Log instead, since applying over it would hand one
topic to two owners.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from distributary.plan.kafka_topics.topics import DesiredTopic, Refusal, TopicPlan
from distributary.plan.logs.log_status import LogReconcile
from distributary.plan.status.conditions import Work

LOG_ANNOTATION = "distributary.dev/log"  # set by `kafka_topic_manifest`: "namespace/name"
CLUSTER_LABEL = "strimzi.io/cluster"
MANAGED_ANNOTATION = "strimzi.io/managed"
PAUSE_ANNOTATION = "strimzi.io/pause-reconciliation"
WAITING_REASON = "WaitingForTopicOperator"

Verdict = Literal["ready", "waiting", "refused"]


@dataclass(frozen=True)
class TopicOperatorReport:
    """What a KafkaTopic's status says about the spec now applied: `ready`, `waiting` for the
    topic operator, or `refused` by it, with a CamelCase reason, a message, and for a refusal the
    Log field it concerns."""

    verdict: Verdict
    reason: str
    message: str
    field: str = "spec"


def kafka_topic_ref(kafka_topic: Mapping[str, Any]) -> str:
    """`namespace/name` of a KafkaTopic."""
    meta = kafka_topic.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in status.get("conditions") or [] if c.get("type")}


def read_kafka_topic(kafka_topic: Mapping[str, Any]) -> TopicOperatorReport:
    """What Strimzi's topic operator says, in `kafka_topic`'s status, about its current spec."""
    meta = kafka_topic.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    status = kafka_topic.get("status") or {}
    conditions = _conditions(status)
    ref = kafka_topic_ref(kafka_topic)
    if str(annotations.get(MANAGED_ANNOTATION, "")).lower() == "false":
        return _unmanaged(ref)
    paused = conditions.get("ReconciliationPaused")
    if paused is not None and paused.get("status") == "True":
        return _paused(ref)
    stale = _staleness(ref, meta, status)
    if stale is not None:
        return stale
    ready = conditions.get("Ready")
    if ready is None or ready.get("status") not in ("True", "False"):
        return TopicOperatorReport(
            "waiting",
            WAITING_REASON,
            f"KafkaTopic {ref} has no Ready verdict yet from Strimzi's topic operator.",
        )
    if ready.get("status") == "False":
        return _refused(ref, ready)
    return _after_ready(ref, status)


def _staleness(
    ref: str, meta: Mapping[str, Any], status: Mapping[str, Any]
) -> TopicOperatorReport | None:
    generation = int(meta.get("generation") or 0)
    observed = status.get("observedGeneration")
    if not status or observed is None:
        cluster = (meta.get("labels") or {}).get(CLUSTER_LABEL)
        return TopicOperatorReport(
            "waiting",
            WAITING_REASON,
            f"KafkaTopic {ref} has no status yet: waiting for Strimzi's topic operator of Kafka "
            f"cluster {cluster!r} to create the topic. If this lasts, check that the topic "
            f"operator runs and watches namespace {meta.get('namespace')!r}.",
        )
    if int(observed) < generation:
        return TopicOperatorReport(
            "waiting",
            WAITING_REASON,
            f"KafkaTopic {ref} is at generation {generation} and Strimzi's topic operator has "
            f"reconciled generation {observed}: waiting for it to apply the change.",
        )
    return None


def _after_ready(ref: str, status: Mapping[str, Any]) -> TopicOperatorReport:
    for warning in status.get("conditions") or []:
        if warning.get("type") != "Warning" or warning.get("reason") != "NotConfigurable":
            continue
        return TopicOperatorReport(
            "refused",
            "NotConfigurable",
            f"KafkaTopic {ref}: {warning.get('message')} (Strimzi's topic operator is configured "
            "not to change them): remove those keys from the Log's spec.config, or allow them "
            "in the topic operator's STRIMZI_ALTERABLE_TOPIC_CONFIG.",
            field="spec.config",
        )
    change = status.get("replicasChange")
    if change:
        detail = f": {change['message']}" if change.get("message") else ""
        return TopicOperatorReport(
            "waiting",
            "ReplicasChanging",
            f"KafkaTopic {ref}: the change to {change.get('targetReplicas')} replicas is "
            f"{change.get('state', 'pending')} in Cruise Control{detail}.",
        )
    return TopicOperatorReport("ready", "TopicReady", f"KafkaTopic {ref} is Ready.")


# What a Log's user can do about each of Strimzi's refusals, by the Log field it concerns.
# First match wins: a replication-factor message also names partitions.
_FIELD_HINTS = (
    (
        "replication factor",
        "spec.replicas",
        "set spec.replicas back to the topic's replication factor, or enable Cruise Control "
        "for Strimzi's topic operator so it can change it",
    ),
    ("topicname", "spec.topicName", "set spec.topicName back; a Log's topic never changes"),
    ("partitions", "spec.partitions", "set spec.partitions to at least the topic's partitions"),
)


def _refused(ref: str, ready: Mapping[str, Any]) -> TopicOperatorReport:
    reason = str(ready.get("reason") or "TopicNotReady")
    said = str(ready.get("message") or "no message").strip()
    field, hint = "spec", f"see `kubectl get kafkatopic -n {ref.replace('/', ' ')} -o yaml`"
    for needle, candidate, advice in _FIELD_HINTS:
        if needle in said.lower():
            field, hint = candidate, advice
            break
    if reason == "ResourceConflict":
        field = "spec.topicName"
        hint = "another KafkaTopic manages the same topic; delete one of them"
    message = (
        f"Strimzi's topic operator refuses KafkaTopic {ref} ({reason}): {said}. To fix: {hint}."
    )
    return TopicOperatorReport("refused", reason, message, field=field)


def _unmanaged(ref: str) -> TopicOperatorReport:
    return TopicOperatorReport(
        "refused",
        "TopicUnmanaged",
        f'KafkaTopic {ref} is annotated {MANAGED_ANNOTATION}: "false", so Strimzi\'s topic '
        "operator ignores it and the Log's spec never reaches the topic: remove the annotation.",
        field="metadata.annotations",
    )


def _paused(ref: str) -> TopicOperatorReport:
    return TopicOperatorReport(
        "refused",
        "TopicReconciliationPaused",
        f"Strimzi's topic operator has paused KafkaTopic {ref} (annotation {PAUSE_ANNOTATION}), "
        "so the Log's spec does not reach the topic: remove the annotation to resume.",
        field="metadata.annotations",
    )


def ownership_refusal(
    existing: Mapping[str, Any] | None, log_ref: str, topic: str
) -> Refusal | None:
    """Why the KafkaTopic `existing` must not be applied over for Log `log_ref`
    (`namespace/name`), or None when it is absent or already this Log's."""
    if existing is None:
        return None
    annotations = (existing.get("metadata") or {}).get("annotations") or {}
    owner, ref = annotations.get(LOG_ANNOTATION), kafka_topic_ref(existing)
    if owner == log_ref:
        return None
    if owner:
        return Refusal(
            field="spec.topicName",
            reason="TopicTaken",
            message=f"topic {topic!r} is already the topic of Log {owner} (KafkaTopic {ref}): "
            "two Logs cannot share a topic; give this Log another spec.topicName, or delete "
            f"Log {owner} first",
        )
    return Refusal(
        field="spec.topicName",
        reason="TopicTaken",
        message=f"KafkaTopic {ref} for topic {topic!r} exists and was not made by Distributary: "
        f"annotate it {LOG_ANNOTATION}={log_ref} to hand it to this Log, or give this Log "
        "another spec.topicName",
    )


def refused_reconcile(
    generation: int,
    desired: DesiredTopic,
    refusal: Refusal,
    managed_configs: frozenset[str] = frozenset(),
) -> LogReconcile:
    """A reconcile of the Log (at `generation`) that stalls on `refusal`; `managed_configs` are
    the config keys the applied KafkaTopic names, if one was applied."""
    plan = TopicPlan(actions=(), refusals=(refusal,), managed_configs=managed_configs)
    return LogReconcile(generation, desired.name, plan=plan)


def log_reconcile(
    generation: int, desired: DesiredTopic, report: TopicOperatorReport
) -> LogReconcile:
    """The outcome for the Log (at `generation`) whose topic is `desired`, from `report`."""
    if report.verdict == "refused":
        refusal = Refusal(report.field, report.reason, report.message)
        return refused_reconcile(generation, desired, refusal, frozenset(desired.configs))
    if report.verdict == "waiting":
        return LogReconcile(generation, desired.name, waiting=Work(report.reason, report.message))
    return LogReconcile(
        generation,
        desired.name,
        # The topic operator owns the configs: it removes any topic config the spec does not name.
        plan=TopicPlan(actions=(), managed_configs=frozenset(desired.configs)),
        partitions=desired.partitions,
    )
