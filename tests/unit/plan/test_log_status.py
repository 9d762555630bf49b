"""A Log's status from one reconcile: conditions for each outcome, offsets, managed configs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from distributary.plan.kafka_topics.topics import CreateTopic, Refusal, TopicPlan
from distributary.plan.logs.log_status import LogReconcile, log_status

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def created(configs: frozenset[str] = frozenset({"retention.ms"})) -> TopicPlan:
    return TopicPlan(
        actions=(CreateTopic("clicks", 3, None, {"retention.ms": "1000"}),),
        managed_configs=configs,
    )


def test_a_created_topic_is_ready_with_its_partitions_and_offsets() -> None:
    result = LogReconcile(
        4, "clicks", plan=created(), partitions=3, watermarks={"clicks": {0: (0, 5), 1: (2, 4)}}
    )
    status = log_status(result, None, NOW)
    assert conditions(status) == {"Ready": ("True", "TopicReady")}
    assert status["observedGeneration"] == 4
    assert status["topicName"] == "clicks"
    assert status["partitions"] == 3
    assert status["managedConfigs"] == ["retention.ms"]
    assert status["startOffsets"] == {"0": 0, "1": 2}
    assert status["endOffsets"] == {"0": 5, "1": 4}
    assert status["records"] == 7
    assert all(c["observedGeneration"] == 4 for c in status["conditions"])


def test_a_refused_change_stalls_the_log_with_its_message() -> None:
    refusal = Refusal("replicas", "ReplicasFixed", "spec.replicas cannot change here: ...")
    plan = TopicPlan(actions=(), refusals=(refusal,))
    status = log_status(LogReconcile(2, "clicks", plan=plan, partitions=3), None, NOW)
    assert conditions(status) == {
        "Ready": ("False", "ReplicasFixed"),
        "Stalled": ("True", "ReplicasFixed"),
    }
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert "spec.replicas cannot change" in stalled["message"]


def test_an_unreachable_kafka_is_work_in_progress_not_a_stall() -> None:
    result = LogReconcile(1, "clicks", unreachable="no broker answered within 30s")
    status = log_status(result, None, NOW)
    assert conditions(status) == {
        "Ready": ("Unknown", "KafkaUnreachable"),
        "Reconciling": ("True", "KafkaUnreachable"),
    }
    assert "managedConfigs" not in status  # nothing is known about the topic's configs
    assert "no broker answered" in status["conditions"][0]["message"]


def test_an_invalid_spec_stalls_the_log_and_names_the_problem() -> None:
    result = LogReconcile(3, "clicks", invalid="spec.partitions: must be at least 1")
    status = log_status(result, None, NOW)
    assert conditions(status) == {
        "Ready": ("False", "InvalidSpec"),
        "Stalled": ("True", "InvalidSpec"),
    }
    assert "spec.partitions" in status["conditions"][0]["message"]


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    first = log_status(LogReconcile(1, "clicks", plan=created(), partitions=3), None, NOW)
    later = NOW + timedelta(minutes=5)
    again = log_status(LogReconcile(2, "clicks", plan=created(), partitions=3), first, later)
    assert again["conditions"][0]["lastTransitionTime"] == "2026-11-22T12:00:00Z"
    broken = LogReconcile(3, "clicks", invalid="bad")
    stalled = log_status(broken, again, later)
    assert stalled["conditions"][0]["lastTransitionTime"] == "2026-11-22T12:05:00Z"


def test_a_logs_subscribers_are_the_views_reading_it_with_their_positions() -> None:
    from distributary.plan.logs.log_status import subscribers

    reader = {
        "metadata": {"name": "big"},
        "status": {
            "servingRevision": 2,
            "revisions": [
                {"revision": 1, "consumerGroup": "distributary.ns.big.r1"},
                {"revision": 2, "consumerGroup": "distributary.ns.big.r2"},
            ],
            "inputs": [
                {"log": "clicks", "alias": "c", "position": {"0": 4}, "lag": 3},
                {"log": "users", "alias": "u", "position": {"0": 1}, "lag": 0},
            ],
        },
    }
    other = {"metadata": {"name": "unrelated"}, "status": {"inputs": [{"log": "users"}]}}
    assert subscribers("clicks", [reader, other]) == [
        {
            "kind": "DerivedView",
            "name": "big",
            "revision": 2,
            "consumerGroup": "distributary.ns.big.r2",
            "position": {"0": 4},
            "lag": 3,
        }
    ]
    assert subscribers("orders", [reader, other]) == []


def test_a_stream_job_reading_a_log_is_a_subscriber_at_its_running_revision() -> None:
    from distributary.plan.logs.log_status import subscribers

    view = {
        "kind": "DerivedView",
        "metadata": {"name": "big"},
        "status": {"servingRevision": 1, "inputs": [{"log": "clicks", "lag": 1}]},
    }
    job = {
        "kind": "StreamJob",
        "metadata": {"name": "enrich"},
        "status": {
            "revision": 3,
            "consumerGroup": "distributary.ns.enrich.r3",
            "inputs": [{"log": "clicks", "topic": "clicks", "position": {"0": 9}, "lag": 0}],
        },
    }
    found = subscribers("clicks", [job, view])
    assert [(s["kind"], s["name"], s["revision"]) for s in found] == [
        ("DerivedView", "big", 1),
        ("StreamJob", "enrich", 3),
    ]
    assert found[1]["consumerGroup"] == "distributary.ns.enrich.r3"
    assert found[1]["position"] == {"0": 9}


def test_subscribers_start_empty_and_are_kept_as_the_observer_wrote_them() -> None:
    result = LogReconcile(3, "orders", plan=created(), partitions=1, watermarks={})
    assert log_status(result, None, NOW)["subscribers"] == []
    readers = [{"kind": "DerivedView", "name": "big", "revision": 1, "lag": 0}]
    assert log_status(result, {"subscribers": readers}, NOW)["subscribers"] == readers


def test_a_sink_reading_a_log_is_a_subscriber_at_the_position_its_store_holds() -> None:
    from distributary.plan.logs.log_status import subscribers

    sink = {
        "kind": "Sink",
        "metadata": {"name": "revenue-table", "namespace": "shop"},
        "spec": {"log": "customer-revenue"},
        "status": {"topic": "customer-revenue.r2", "position": {"0": 7, "1": 3}, "lag": 2},
    }
    elsewhere = {**sink, "metadata": {"name": "other", "namespace": "shop"}, "spec": {"log": "x"}}
    assert subscribers("customer-revenue", [sink, elsewhere]) == [
        {
            "kind": "Sink",
            "name": "revenue-table",
            "revision": None,
            "consumerGroup": "distributary.shop.revenue-table.sink",
            "position": {"0": 7, "1": 3},
            "lag": 2,
        }
    ]
    waiting = {**sink, "status": {}}
    assert subscribers("customer-revenue", [waiting])[0]["position"] == {}
