"""Topic work of many Log reconciles, carried out together.

When a thousand Logs are applied at once, a thousand handlers each want their topic made and
its watermarks read. One at a time that is about nine Admin API round trips each; together
(`DirectTopics.reconcile_many`) it is five requests for all of them. So a handler does not call
Kafka itself: it queues its topic and awaits its own outcome. One worker takes everything queued
as a batch, runs it on a thread, and hands each handler its outcome or its error; requests that
arrive meanwhile form the next batch. A lone Log waits `gather` seconds more than it would alone.
Views' topics (each revision's output and dead letters) go the same way. `DirectTopicBackend`
is the direct topic backend as the operator runs it, on these batches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from distributary.api.log import Log
from distributary.backends.base import TopicBackend
from distributary.backends.direct import DirectTopics, TopicOutcome
from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.plan.kafka_topics.topics import (
    REFUSED_AGAIN,
    DesiredTopic,
    refusal_message,
    refused_field,
)
from distributary.plan.logs.log_status import LogReconcile
from distributary.plan.pipelines.pipeline import VIEW_LABEL

T = TypeVar("T")
Request = tuple[DesiredTopic, frozenset[str]]
Run = Callable[[Sequence[Request]], Mapping[str, TopicOutcome | KafkaAdminError]]


@dataclass
class TopicBatches:
    """Queues topic reconciles and runs them in batches of at most `limit` distinct topics."""

    run: Run
    limit: int = 500
    gather: float = 0.05  # seconds the first request waits for others started with it
    _queue: list[tuple[Request, asyncio.Future[TopicOutcome]]] = field(default_factory=list)
    _worker: asyncio.Task[None] | None = None
    _executor: concurrent.futures.ThreadPoolExecutor | None = None

    async def reconcile(
        self, desired: DesiredTopic, managed: frozenset[str] = frozenset()
    ) -> TopicOutcome:
        """The topic brought to `desired`; raises `KafkaAdminError` as the one-topic way would."""
        future: asyncio.Future[TopicOutcome] = asyncio.get_running_loop().create_future()
        self._queue.append(((desired, managed), future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    def _thread(self) -> concurrent.futures.ThreadPoolExecutor:
        """A thread of its own: Logs never wait behind other handlers' work in the shared pool
        (views and jobs do theirs there), and one batch runs at a time anyway."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, "distributary-topics")
        return self._executor

    async def _drain(self) -> None:
        await asyncio.sleep(self.gather)
        while self._queue:
            batch, self._queue = next_batch(self._queue, self.limit)
            requests = [request for request, _ in batch]
            try:
                outcomes = await asyncio.get_running_loop().run_in_executor(
                    self._thread(), self.run, requests
                )
            except Exception as exc:  # Kafka did not answer (or worse): every waiter learns it
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (desired, _), future in batch:
                if future.done():  # its handler was cancelled
                    continue
                outcome = outcomes.get(desired.name)
                if isinstance(outcome, TopicOutcome):
                    future.set_result(outcome)
                else:
                    future.set_exception(
                        outcome or KafkaAdminError(f"topic {desired.name!r}: no outcome")
                    )


def next_batch(
    queue: list[tuple[Request, T]], limit: int
) -> tuple[list[tuple[Request, T]], list[tuple[Request, T]]]:
    """The queue's next batch (in order, at most `limit`, each topic once: a topic asked for
    again waits for the next batch, which then sees what the first did) and what is left."""
    batch: list[tuple[Request, T]] = []
    rest: list[tuple[Request, T]] = []
    names: set[str] = set()
    for item in queue:
        name = item[0][0].name
        if name in names or len(batch) >= limit:
            rest.append(item)
        else:
            names.add(name)
            batch.append(item)
    return batch, rest


class DirectTopicBackend:
    """The `direct` topic backend as the operator runs it (the `TopicBackend` contract): topics
    made and kept through Kafka's Admin API, the reconciles of many Logs and views batched."""

    def __init__(self, admin: KafkaAdmin) -> None:
        self.admin = admin
        self.batches = TopicBatches(DirectTopics(admin).reconcile_many)

    async def ensure(
        self,
        log: Log,
        desired: DesiredTopic,
        owner: Mapping[str, Any],
        managed: frozenset[str] = frozenset(),
    ) -> LogReconcile:
        """The topic brought to `desired`, with the topics of every other reconcile now."""
        generation = log.metadata.generation
        try:
            done = await self.batches.reconcile(desired, managed)
        except KafkaAdminError as exc:
            if exc.refused:
                spec = _spec_of(log)
                message = refusal_message(desired, exc.code, exc.detail, spec)
                # A refusal no field of the spec answers (ACLs, the cluster's settings) may
                # be lifted outside it: asked again, slowly.
                again = (
                    REFUSED_AGAIN
                    if refused_field(desired, exc.code, exc.detail, spec) == spec
                    else None
                )
                return LogReconcile(generation, desired.name, refused=message, refused_again=again)
            return LogReconcile(generation, desired.name, unreachable=str(exc))
        return LogReconcile(
            generation,
            desired.name,
            plan=done.plan,
            partitions=done.partitions,
            watermarks=done.watermarks,
        )

    async def delete(self, log: Log | None, topic: str) -> None:
        """Delete the topic through the Admin API (one already gone is fine); whose it is was
        decided before (`backends.claimed`)."""
        await asyncio.to_thread(self.admin.delete_topic, topic)

    async def release(self, namespace: str, name: str) -> list[str]:
        """No claims are kept here (`backends.claimed` keeps them): nothing to release."""
        return []


def _spec_of(log: Log) -> str:
    """Where the topic settings of `log` are written: its spec, or for a view's output Log (which
    the view writes) the view's `spec.output`."""
    return "spec.output" if VIEW_LABEL in log.metadata.labels else "spec"


@dataclass
class EnsuredRecently:
    """A topic backend that answers an ensure asked again, with the same desired topic, within
    `fresh_for` seconds of a clean outcome from that outcome, without asking Kafka.

    For `distributary run`, which reconciles every view and job every second: each reconcile
    ensures the revision's output and dead-letter topics, and asking Kafka each time was a
    description, the configs and the watermarks of each topic every second, for nothing. An
    outcome that was not clean (refused, unreachable, taken, waiting) is never kept, a topic
    this backend deletes is forgotten, and a changed spec asks again at once: only a topic changed
    or deleted behind the run's back is seen up to `fresh_for` seconds later. The watermarks of an
    answer kept are the ones read then (a view's or job's reconcile does not use them)."""

    backend: TopicBackend
    fresh_for: float = 30.0
    clock: Callable[[], float] = time.monotonic
    _kept: dict[tuple[Any, ...], tuple[float, LogReconcile]] = field(default_factory=dict)

    async def ensure(
        self,
        log: Log,
        desired: DesiredTopic,
        owner: Mapping[str, Any],
        managed: frozenset[str] = frozenset(),
    ) -> LogReconcile:
        """The backend's outcome, or the last clean one of the same ask within `fresh_for`."""
        configs = tuple(sorted(desired.configs.items()))
        key = (desired.name, desired.partitions, desired.replicas, configs, managed)
        kept = self._kept.get(key)
        generation = log.metadata.generation
        if kept is not None and self.clock() - kept[0] < self.fresh_for:
            return replace(kept[1], generation=generation)
        outcome = await self.backend.ensure(log, desired, owner, managed)
        clean = outcome.plan is not None and not any(
            (outcome.refused, outcome.unreachable, outcome.taken, outcome.waiting, outcome.invalid)
        )
        if clean:
            self._kept[key] = (self.clock(), outcome)
        else:
            self._kept.pop(key, None)
        return outcome

    async def delete(self, log: Log | None, topic: str) -> str | None:
        """The backend's delete, the topic's kept outcomes forgotten first."""
        self.forget(topic)
        return await self.backend.delete(log, topic)

    async def release(self, namespace: str, name: str) -> list[str]:
        """The backend's release, the released topics' kept outcomes forgotten."""
        released = await self.backend.release(namespace, name)
        for topic in released:
            self.forget(topic)
        return released

    def forget(self, topic: str) -> None:
        """Ask Kafka about `topic` again next time."""
        for key in [k for k in self._kept if k[0] == topic]:
            del self._kept[key]
