"""A Log's one reconcile, against in-memory parts: the topic asked of the backend, then the
status written from the outcome; a spec that cannot be used, a refusal, a topic taken and a Kafka
that does not answer each become a condition and, where people act, an event."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.reconcile.fakes import NS, parts

from distributary.plan.views.view_plan import SERVING_ANNOTATION, VIEW_LABEL
from distributary.reconcile.log import reconcile_log


def log(name: str = "clicks", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name, "namespace": NS, "uid": "u-1", "generation": 3},
        "spec": {"partitions": 3, **spec},
    }


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason", "")) for c in status.get("conditions", [])}


def test_the_topic_is_asked_for_then_the_status_is_written_from_the_outcome() -> None:
    p = parts([], [])
    result = asyncio.run(reconcile_log(log(), p.services(), p.store, p.events))
    assert result.topic == "clicks"
    assert p.journal[0] == ("topic", "clicks")
    assert p.journal[1][0] == "finish"
    assert p.store.status["observedGeneration"] == 3
    assert p.store.status["topicName"] == "clicks"


def test_a_spec_that_cannot_be_used_asks_for_no_topic_and_says_why() -> None:
    p = parts([], [])
    bad = log(partitions=0)
    result = asyncio.run(reconcile_log(bad, p.services(), p.store, p.events))
    assert result.invalid is not None
    assert "partitions" in result.invalid
    assert ("topic", "clicks") not in p.journal
    assert ("warning", "InvalidSpec") in p.journal
    assert conditions(p.store.status)["Stalled"] == ("True", "InvalidSpec")


def test_a_topic_taken_by_another_log_is_stalled_and_said() -> None:
    p = parts([], [])
    p.topics.taken = "topic clicks belongs to Log other/clicks"
    result = asyncio.run(reconcile_log(log(), p.services(), p.store, p.events))
    assert result.taken is not None
    assert ("warning", "TopicTaken") in p.journal
    assert conditions(p.store.status)["Stalled"][0] == "True"


def test_a_kafka_that_does_not_answer_is_no_problem_of_the_spec() -> None:
    p = parts([], [])
    p.topics.unreachable = "no broker answered"
    result = asyncio.run(reconcile_log(log(), p.services(), p.store, p.events))
    assert result.unreachable == "no broker answered"
    assert conditions(p.store.status)["Ready"][0] == "Unknown"  # whether it is, Kafka will say
    assert conditions(p.store.status).get("Stalled", ("False", ""))[0] == "False"
    assert [e for e in p.journal if e[0] == "warning"] == []


def test_a_views_output_log_is_served_from_its_serving_revisions_topic() -> None:
    p = parts([], [])
    output = log("per-user")
    output["metadata"]["labels"] = {VIEW_LABEL: "per-user"}
    output["metadata"]["annotations"] = {SERVING_ANNOTATION: "2"}
    asyncio.run(reconcile_log(output, p.services(), p.store, p.events))
    assert p.journal[0] == ("topic", "per-user.r2")


def test_a_log_keeps_the_topic_it_was_made_with_when_the_naming_changed() -> None:
    p = parts([], [])
    held = log()
    held["status"] = {"topicName": "shop.clicks"}
    asyncio.run(reconcile_log(held, p.services(), p.store, p.events))
    assert p.journal[0] == ("topic", "shop.clicks")
