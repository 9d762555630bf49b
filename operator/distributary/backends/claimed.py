"""Topics under claim: either topic backend, touching only topics its Log owns.

This wraps the backend the operator runs with (`direct` or `strimzi`), so the rule of
`plan.kafka_topics.claims` is the same under both and for every caller: a Log's own topic, a view's
revision and dead-letter topics and a job's dead-letter topic are each claimed (for the Log they
belong to) before the backend makes or changes anything, and a topic another Log owns comes back as
`taken` (the Log, or the view or job that asked, is Stalled, `TopicTaken`, naming the owner). A
deletion deletes only a topic its Log owns and made; it keeps an adopted one, and another's, and
says why. The claims live in Kafka (`kafka.claims`), so Kafka that does not answer makes the Log
wait (`unreachable`) as it would for the topic itself.

Under Strimzi the KafkaTopic's `distributary.dev/log` annotation tells a KafkaTopic's Log too,
and the backend still refuses another's; the claims decide first, so the owner is the same one
whichever backend an installation runs.

A Log deleted while no operator watched it keeps its claims until a sweep (`sweep`) finds it
gone from a listing of the Logs and releases them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from distributary.api.log import Log
from distributary.backends.base import TopicBackend
from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.kafka.claims import ClaimsLog
from distributary.plan.kafka_topics.claims import (
    Claimant,
    Deletion,
    claimant_of,
    kept_message,
    taken_message,
)
from distributary.plan.kafka_topics.topics import DesiredTopic
from distributary.plan.logs.log_status import LogReconcile
from distributary.plan.pipelines.pipeline import VIEW_LABEL

CLAIMS_AT_ONCE = 64  # claims waiting for one decision at most


class ClaimedTopicBackend:
    """A `TopicBackend` that claims each topic in `claims` before `backend` touches it."""

    def __init__(self, backend: TopicBackend, claims: ClaimsLog, admin: KafkaAdmin) -> None:
        self.backend = backend
        self.claims = claims
        self.admin = admin
        # Claims made at once are decided together (`ClaimsLog.claim`), so as many as are
        # asked for wait at once, each on a thread of this pool rather than of the shared one.
        self._claiming = concurrent.futures.ThreadPoolExecutor(CLAIMS_AT_ONCE, "claims")

    def _exists(self, topic: str) -> bool:
        return self.admin.describe_topic(topic) is not None

    def _present(self, topics: Collection[str]) -> set[str]:
        """Which of `topics` are in Kafka, from one metadata request (a topic Kafka answers
        with another error counts as present: a claim of it then adopts it, and a deletion
        keeps it)."""
        listed = self.admin.list_partitions(topics)
        return {topic for topic in topics if listed.get(topic, 0) is not None}

    async def ensure(
        self,
        log: Log,
        desired: DesiredTopic,
        owner: Mapping[str, Any],
        managed: frozenset[str] = frozenset(),
    ) -> LogReconcile:
        """Claim `desired` for `log`; then, if it is `log`'s, the backend's `ensure`."""
        generation = log.metadata.generation
        claimant = claimant_of(log.metadata.namespace, log.metadata.name, owner)
        held = log.status is not None and log.status.topic_name == desired.name
        try:
            verdict = await asyncio.get_running_loop().run_in_executor(
                self._claiming,
                self.claims.claim,
                desired.name,
                claimant,
                self._present,
                held,
            )
        except KafkaAdminError as exc:
            return LogReconcile(generation, desired.name, unreachable=str(exc))
        if not verdict.mine:
            field = "spec.output" if VIEW_LABEL in log.metadata.labels else "spec.topicName"
            message = taken_message(desired.name, verdict.owner.claimant, claimant, field)
            return LogReconcile(generation, desired.name, refused=message, taken=message)
        return await self.backend.ensure(log, desired, owner, managed)

    async def delete(self, log: Log | None, topic: str) -> str | None:
        """Delete `topic` if `log` owns it and made it; None when deleted (or gone), else why
        it was kept. Either way `log`'s claim on it is released."""
        if log is None:
            return (
                f"topic {topic} kept: the Log's spec does not parse, so whose topic it is cannot "
                "be told; delete it with Kafka's tools if it is no longer wanted"
            )
        claimant = Claimant(log.metadata.namespace, log.metadata.name)
        verdict, owner = await asyncio.to_thread(self.claims.deletion, topic, claimant)
        if verdict is Deletion.DELETE:
            await self.backend.delete(log, topic)
        await asyncio.to_thread(self.claims.release, claimant, [topic])
        if verdict is Deletion.DELETE:
            return None
        if owner is None and not await asyncio.to_thread(self._exists, topic):
            return None  # no one's and not there (deleted by an earlier try): nothing kept
        return kept_message(topic, verdict, owner, claimant)

    async def release(self, namespace: str, name: str) -> list[str]:
        """Release every claim of the deleted Log `namespace/name`; the topics released."""
        return await asyncio.to_thread(self.claims.release, Claimant(namespace, name))

    async def sweep(
        self, listed: Callable[[], Awaitable[Collection[str]]], watched: Collection[str] | None
    ) -> dict[Claimant, list[str]]:
        """Release the claims of deleted Logs of the `watched` namespaces (None: every one);
        `listed` lists the Logs there (as `namespace/name`). The claims topic's end is read
        before the listing, so a claim appended for a Log made meanwhile is never taken for a
        deleted Log's (`plan.kafka_topics.claims.stale_claims`). A listing that fails (its error is
        raised) releases nothing; the Logs and topics released."""
        start = await asyncio.to_thread(self.claims.sweep_start)
        existing = await listed()
        return await asyncio.to_thread(self.claims.release_stale, start, existing, watched)
