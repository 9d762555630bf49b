"""A KafkaTopic's status, as Strimzi's topic operator writes it, read as a Log's outcome.

Statuses are shaped as the unidirectional topic operator writes them: `Ready=True` with no reason
on success, `Ready=False` with one of its reasons and its message on failure, `observedGeneration`
and `topicName` beside them, `ReconciliationPaused` instead of Ready when paused.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from distributary.plan.kafka_topics.topics import DesiredTopic
from distributary.plan.logs.log_status import LogReconcile, log_status
from distributary.plan.logs.strimzi_status import (
    TopicOperatorReport,
    log_reconcile,
    ownership_refusal,
    read_kafka_topic,
    refused_reconcile,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
DESIRED = DesiredTopic("clicks", 6, 3, {"retention.ms": "604800000", "cleanup.policy": "delete"})


def kafka_topic(
    generation: int = 2,
    status: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "kafka.strimzi.io/v1",
        "kind": "KafkaTopic",
        "metadata": {
            "name": "clicks",
            "namespace": "kafka",
            "generation": generation,
            "labels": {"strimzi.io/cluster": "my-cluster"},
            "annotations": {"distributary.dev/log": "shop/clicks", **(annotations or {})},
        },
        "spec": {"topicName": "clicks", "partitions": 6, "replicas": 3},
    }
    if status is not None:
        body["status"] = status
    return body


def ready(observed: int = 2, **extra: Any) -> dict[str, Any]:
    condition = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-22T11:59:00Z"}
    return {
        "conditions": [condition],
        "observedGeneration": observed,
        "topicName": "clicks",
        "topicId": "8sWJ2YQmRLOwqT0hX2HvJg",
        **extra,
    }


def not_ready(reason: str | None, message: str | None, observed: int = 2) -> dict[str, Any]:
    condition = {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-22T11:59:00Z"}
    if reason is not None:
        condition["reason"] = reason
    if message is not None:
        condition["message"] = message
    return {"conditions": [condition], "observedGeneration": observed, "topicName": "clicks"}


def conditions(result: LogReconcile) -> dict[str, tuple[str, str, str]]:
    status = log_status(result, None, NOW)
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


# --- the topic operator has not answered for this generation: Reconciling ---------------------


def test_a_kafka_topic_without_status_waits_for_the_topic_operator() -> None:
    report = read_kafka_topic(kafka_topic(generation=1))
    assert report.verdict == "waiting"
    assert report.reason == "WaitingForTopicOperator"
    assert "kafka/clicks has no status yet" in report.message
    assert "'my-cluster'" in report.message  # which topic operator to look for
    assert "namespace 'kafka'" in report.message


def test_a_status_of_an_older_generation_is_not_believed() -> None:
    report = read_kafka_topic(kafka_topic(generation=3, status=ready(observed=2)))
    assert report.verdict == "waiting"
    assert "generation 3" in report.message
    assert "reconciled generation 2" in report.message


def test_a_refusal_of_an_older_generation_does_not_stall_the_new_spec() -> None:
    status = not_ready("NotSupported", "Decreasing partitions not supported", observed=2)
    assert read_kafka_topic(kafka_topic(generation=3, status=status)).verdict == "waiting"


def test_a_status_without_observed_generation_waits() -> None:
    status = ready()
    del status["observedGeneration"]
    assert read_kafka_topic(kafka_topic(status=status)).verdict == "waiting"


@pytest.mark.parametrize(
    "conditions_",
    [[], [{"type": "Ready", "status": "Unknown"}], [{"type": "Warning", "status": "True"}]],
)
def test_a_current_status_without_a_ready_verdict_waits(conditions_: list[Any]) -> None:
    status = {"conditions": conditions_, "observedGeneration": 2, "topicName": "clicks"}
    report = read_kafka_topic(kafka_topic(status=status))
    assert report.verdict == "waiting"
    assert "no Ready verdict" in report.message


def test_a_replication_change_under_way_in_cruise_control_waits() -> None:
    change = {"targetReplicas": 3, "state": "ongoing", "sessionId": "8911ca89"}
    report = read_kafka_topic(kafka_topic(status=ready(replicasChange=change)))
    assert report.verdict == "waiting"
    assert report.reason == "ReplicasChanging"
    assert "3 replicas is ongoing" in report.message


def test_a_pending_replication_change_says_what_cruise_control_said() -> None:
    change = {"targetReplicas": 3, "state": "pending", "message": "Cruise Control is not ready"}
    report = read_kafka_topic(kafka_topic(status=ready(replicasChange=change)))
    assert report.verdict == "waiting"
    assert "pending in Cruise Control: Cruise Control is not ready" in report.message


def test_waiting_makes_the_log_reconciling_not_ready_and_not_stalled() -> None:
    report = read_kafka_topic(kafka_topic(generation=1))
    result = log_reconcile(7, DESIRED, report)
    assert result.generation == 7
    assert result.topic == "clicks"
    assert result.plan is None
    found = conditions(result)
    assert set(found) == {"Ready", "Reconciling"}
    assert found["Ready"][0] == "Unknown"
    assert found["Reconciling"][0] == "True"
    assert "has no status yet" in found["Reconciling"][2]


# --- Ready=True for this generation: Ready -------------------------------------------------------


def test_a_ready_kafka_topic_of_the_current_generation_is_ready() -> None:
    report = read_kafka_topic(kafka_topic(status=ready()))
    assert report == TopicOperatorReport("ready", "TopicReady", "KafkaTopic kafka/clicks is Ready.")


def test_an_observed_generation_ahead_of_the_resource_counts_as_current() -> None:
    assert read_kafka_topic(kafka_topic(generation=2, status=ready(observed=3))).verdict == "ready"


def test_a_ready_log_reports_the_partitions_and_configs_of_its_spec() -> None:
    result = log_reconcile(4, DESIRED, read_kafka_topic(kafka_topic(status=ready())))
    assert result.partitions == 6
    assert result.plan is not None
    assert result.plan.actions == ()
    assert result.plan.refusals == ()
    assert result.plan.managed_configs == {"retention.ms", "cleanup.policy"}
    status = log_status(result, None, NOW)
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Ready": "True"}
    assert status["partitions"] == 6
    assert status["observedGeneration"] == 4
    assert status["managedConfigs"] == ["cleanup.policy", "retention.ms"]


def test_a_warning_other_than_not_configurable_leaves_the_log_ready() -> None:
    status = ready()
    status["conditions"].append(
        {"type": "Warning", "status": "True", "reason": "Deprecated", "message": "old field"}
    )
    assert read_kafka_topic(kafka_topic(status=status)).verdict == "ready"


# --- Ready=False, and what the topic operator was told to leave alone: Stalled -------------------


@pytest.mark.parametrize(
    ("reason", "message", "field", "hint"),
    [
        (
            "NotSupported",
            "Decreasing partitions not supported",
            "spec.partitions",
            "set spec.partitions to at least the topic's partitions",
        ),
        (
            "NotSupported",
            "Replication factor change not supported, but required for partitions [0, 1]",
            "spec.replicas",
            "set spec.replicas back to the topic's replication factor",
        ),
        (
            "NotSupported",
            "Changing spec.topicName is not supported",
            "spec.topicName",
            "set spec.topicName back",
        ),
        (
            "ResourceConflict",
            "Managed by Ref{namespace='kafka', name='clicks-old'}",
            "spec.topicName",
            "another KafkaTopic manages the same topic",
        ),
        (
            "KafkaError",
            "org.apache.kafka.common.errors.PolicyViolationException: retention too long",
            "spec",
            "kubectl get kafkatopic -n kafka clicks -o yaml",
        ),
    ],
)
def test_a_refusal_by_the_topic_operator_names_the_field_and_the_fix(
    reason: str, message: str, field: str, hint: str
) -> None:
    report = read_kafka_topic(kafka_topic(status=not_ready(reason, message)))
    assert report.verdict == "refused"
    assert report.reason == reason
    assert report.field == field
    assert message in report.message
    assert "KafkaTopic kafka/clicks" in report.message
    assert hint in report.message


def test_a_refusal_stalls_the_log_with_strimzis_reason_and_message() -> None:
    report = read_kafka_topic(
        kafka_topic(status=not_ready("NotSupported", "Decreasing partitions not supported"))
    )
    result = log_reconcile(5, DESIRED, report)
    assert result.partitions is None  # the topic's count is not the spec's: not claimed
    found = conditions(result)
    assert set(found) == {"Ready", "Stalled"}
    assert found["Ready"][:2] == ("False", "NotSupported")
    assert found["Stalled"][:2] == ("True", "NotSupported")
    assert "Decreasing partitions not supported" in found["Stalled"][2]


def test_a_refusal_without_reason_or_message_still_reads_well() -> None:
    report = read_kafka_topic(kafka_topic(status=not_ready(None, None)))
    assert report.verdict == "refused"
    assert report.reason == "TopicNotReady"
    assert "(TopicNotReady): no message." in report.message


def test_configs_the_topic_operator_may_not_change_stall_the_log() -> None:
    status = ready()
    status["conditions"].append(
        {
            "type": "Warning",
            "status": "True",
            "reason": "NotConfigurable",
            "message": "These .spec.config properties are not configurable: [retention.ms]",
        }
    )
    report = read_kafka_topic(kafka_topic(status=status))
    assert report.verdict == "refused"
    assert report.reason == "NotConfigurable"
    assert report.field == "spec.config"
    assert "[retention.ms]" in report.message
    assert "STRIMZI_ALTERABLE_TOPIC_CONFIG" in report.message


def test_a_paused_kafka_topic_stalls_the_log_even_with_a_stale_generation() -> None:
    paused = {
        "conditions": [{"type": "ReconciliationPaused", "status": "True"}],
        "observedGeneration": 1,
        "topicName": "clicks",
    }
    report = read_kafka_topic(kafka_topic(generation=3, status=paused))
    assert report.verdict == "refused"
    assert report.reason == "TopicReconciliationPaused"
    assert "strimzi.io/pause-reconciliation" in report.message


def test_an_unmanaged_kafka_topic_stalls_the_log() -> None:
    topic = kafka_topic(status=ready(), annotations={"strimzi.io/managed": "false"})
    report = read_kafka_topic(topic)
    assert report.verdict == "refused"
    assert report.reason == "TopicUnmanaged"
    assert "remove the annotation" in report.message


# --- whose KafkaTopic it is ----------------------------------------------------------------------


def test_no_kafka_topic_yet_or_this_logs_own_is_no_conflict() -> None:
    assert ownership_refusal(None, "shop/clicks", "clicks") is None
    assert ownership_refusal(kafka_topic(), "shop/clicks", "clicks") is None


def test_another_logs_kafka_topic_is_never_taken_over() -> None:
    refusal = ownership_refusal(kafka_topic(), "ads/clicks", "clicks")
    assert refusal is not None
    assert refusal.reason == "TopicTaken"
    assert refusal.field == "spec.topicName"
    assert "already the topic of Log shop/clicks" in refusal.message
    assert "give this Log another spec.topicName" in refusal.message


def test_a_hand_made_kafka_topic_is_never_taken_over() -> None:
    hand_made = kafka_topic()
    hand_made["metadata"]["annotations"] = {}
    refusal = ownership_refusal(hand_made, "shop/clicks", "clicks")
    assert refusal is not None
    assert "was not made by Distributary" in refusal.message
    assert "annotate it distributary.dev/log=shop/clicks" in refusal.message


def test_a_conflict_stalls_the_log_and_claims_no_configs() -> None:
    refusal = ownership_refusal(kafka_topic(), "ads/clicks", "clicks")
    assert refusal is not None
    result = refused_reconcile(3, DESIRED, refusal)
    assert result.plan is not None
    assert result.plan.managed_configs == frozenset()
    found = conditions(result)
    assert found["Stalled"][:2] == ("True", "TopicTaken")
