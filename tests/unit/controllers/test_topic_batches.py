"""Many Logs' topic work gathered into batches: who runs together, and who learns what."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from distributary.api.log import Log
from distributary.backends.direct import TopicOutcome
from distributary.backends.topic_batches import EnsuredRecently, Request, TopicBatches, next_batch
from distributary.kafka.admin import KafkaAdminError
from distributary.plan.kafka_topics.topics import DesiredTopic, TopicPlan
from distributary.plan.logs.log_status import LogReconcile


def topic(name: str) -> DesiredTopic:
    return DesiredTopic(name, 1, None)


def test_a_batch_takes_each_topic_once_and_at_most_the_limit_in_order() -> None:
    queue = [((topic(n), frozenset()), i) for i, n in enumerate(["a", "b", "a", "c", "d"])]
    batch, rest = next_batch(queue, 3)
    assert [item for _, item in batch] == [0, 1, 3]  # the second "a" waits: it sees the first
    assert [item for _, item in rest] == [2, 4]
    batch, rest = next_batch(rest, 3)
    assert ([item for _, item in batch], rest) == ([2, 4], [])


class Recorder:
    """Runs batches as `DirectTopics.reconcile_many` would answer, and keeps them."""

    def __init__(self, fail: frozenset[str] = frozenset(), down: bool = False) -> None:
        self.batches: list[list[str]] = []
        self.fail, self.down = fail, down

    def __call__(self, requests: Sequence[Request]) -> dict[str, TopicOutcome | KafkaAdminError]:
        self.batches.append([desired.name for desired, _ in requests])
        if self.down:
            raise KafkaAdminError("Kafka at k:9092 did not answer")
        return {
            d.name: KafkaAdminError(f"topic {d.name!r} refused")
            if d.name in self.fail
            else TopicOutcome(TopicPlan(()), 1, {d.name: {0: (0, 0)}})
            for d, _ in requests
        }


def run_all(batches: TopicBatches, names: list[str]) -> list[TopicOutcome | BaseException]:
    async def main() -> list[TopicOutcome | BaseException]:
        tasks = [batches.reconcile(topic(n)) for n in names]
        return await asyncio.gather(*tasks, return_exceptions=True)

    return asyncio.run(main())


def test_requests_made_together_run_as_one_batch_each_with_its_own_outcome() -> None:
    recorder = Recorder(fail=frozenset({"bad"}))
    outcomes = run_all(TopicBatches(recorder, limit=100), [f"t{i}" for i in range(40)] + ["bad"])
    assert recorder.batches == [[f"t{i}" for i in range(40)] + ["bad"]]
    assert [list(o.watermarks) for o in outcomes[:40] if isinstance(o, TopicOutcome)] == [
        [f"t{i}"] for i in range(40)
    ]
    assert isinstance(outcomes[40], KafkaAdminError)
    assert "'bad' refused" in str(outcomes[40])


def test_beyond_the_limit_and_a_topic_asked_twice_go_in_the_next_batch() -> None:
    recorder = Recorder()
    outcomes = run_all(TopicBatches(recorder, limit=3), ["a", "b", "a", "c", "d"])
    assert recorder.batches == [["a", "b", "c"], ["a", "d"]]
    assert all(isinstance(o, TopicOutcome) for o in outcomes)


def test_when_kafka_does_not_answer_every_waiter_learns_it() -> None:
    outcomes = run_all(TopicBatches(Recorder(down=True)), ["a", "b"])
    assert [str(o) for o in outcomes] == ["Kafka at k:9092 did not answer"] * 2


def test_a_batch_after_an_idle_spell_starts_again() -> None:
    recorder = Recorder()
    batches = TopicBatches(recorder, gather=0.0)

    async def main() -> None:
        await batches.reconcile(topic("a"))
        await asyncio.sleep(0.01)
        await batches.reconcile(topic("b"))

    asyncio.run(main())
    assert recorder.batches == [["a"], ["b"]]


def test_an_answer_without_the_topic_is_an_error_naming_it() -> None:
    batches = TopicBatches(lambda requests: {})
    with pytest.raises(KafkaAdminError, match="'a': no outcome"):
        asyncio.run(batches.reconcile(topic("a")))


class Backend:
    """A topic backend that answers as told and counts what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.refused: str | None = None
        self.unreachable: str | None = None

    async def ensure(
        self, log: Log, desired: DesiredTopic, owner: Any, managed: frozenset[str] = frozenset()
    ) -> LogReconcile:
        self.asked.append(desired.name)
        plan = None if self.refused or self.unreachable else TopicPlan(())
        return LogReconcile(
            log.metadata.generation,
            desired.name,
            plan=plan,
            refused=self.refused,
            unreachable=self.unreachable,
        )

    async def delete(self, log: Log | None, topic: str) -> str | None:
        self.asked.append(f"delete {topic}")
        return None

    async def release(self, namespace: str, name: str) -> list[str]:
        return [name]


def a_log(generation: int = 1) -> Log:
    return Log.model_validate(
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": "out", "namespace": "ns", "generation": generation},
            "spec": {"partitions": 1, "schema": "user STRING"},
        }
    )


def test_a_topic_ensured_cleanly_is_not_asked_about_again_until_its_answer_is_old() -> None:
    backend, now = Backend(), [0.0]
    recent = EnsuredRecently(backend, fresh_for=30.0, clock=lambda: now[0])
    wanted = DesiredTopic("out.r1", 1, None, {"retention.ms": "1000"})
    first = asyncio.run(recent.ensure(a_log(), wanted, {}))
    now[0] = 29.0
    again = asyncio.run(recent.ensure(a_log(generation=2), wanted, {}))
    assert backend.asked == ["out.r1"]
    assert (again.topic, again.plan, again.generation) == (first.topic, first.plan, 2)
    now[0] = 30.0
    asyncio.run(recent.ensure(a_log(), wanted, {}))
    assert backend.asked == ["out.r1", "out.r1"]


def test_another_spec_of_the_topic_or_a_deleted_topic_is_asked_about_at_once() -> None:
    backend = Backend()
    recent = EnsuredRecently(backend, clock=lambda: 0.0)
    wanted = DesiredTopic("out.r1", 1, None, {"retention.ms": "1000"})
    asyncio.run(recent.ensure(a_log(), wanted, {}))
    asyncio.run(recent.ensure(a_log(), DesiredTopic("out.r1", 2, None, wanted.configs), {}))
    asyncio.run(recent.ensure(a_log(), DesiredTopic("out.r1", 1, None, {}), {}))
    asyncio.run(recent.ensure(a_log(), wanted, {}, frozenset({"retention.ms"})))
    assert backend.asked == ["out.r1"] * 4
    asyncio.run(recent.delete(a_log(), "out.r1"))
    asyncio.run(recent.ensure(a_log(), wanted, {}))
    assert backend.asked[-2:] == ["delete out.r1", "out.r1"]


def test_a_refused_or_unreachable_outcome_is_never_kept() -> None:
    backend = Backend()
    recent = EnsuredRecently(backend, clock=lambda: 0.0)
    wanted = DesiredTopic("out.r1", 1, None)
    asyncio.run(recent.ensure(a_log(), wanted, {}))
    backend.refused = "Kafka refused"
    recent.forget("out.r1")
    for _ in range(2):
        assert asyncio.run(recent.ensure(a_log(), wanted, {})).refused == "Kafka refused"
    backend.refused, backend.unreachable = None, "Kafka at k:9092 did not answer"
    for _ in range(2):
        assert asyncio.run(recent.ensure(a_log(), wanted, {})).unreachable is not None
    assert backend.asked == ["out.r1"] * 5
