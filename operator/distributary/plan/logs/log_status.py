"""A Log's status from what its reconcile did and saw: the pure half of the Log controller.

The controller observes the topic, has the topic backend carry out the plan, reads the
watermarks, and hands all of it here; what comes back is the complete status to write. Refused
changes (fewer partitions, a replica change) make the Log Stalled with the refusal's message while
the rest of the spec is applied, and so does a topic Kafka refuses (more replicas than brokers, a
config value the brokers' settings forbid: `KafkaRefused`, Kafka's words and the field); a Kafka
that cannot be reached makes it Reconciling, so a dashboard tells "fix your spec" from "wait". A
topic another Log owns (`plan.kafka_topics.claims`) makes it Stalled with `TopicTaken`, and its
status names no topic: it has none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from distributary.api.common import Condition
from distributary.api.log import Log
from distributary.graph import Pipeline
from distributary.plan.kafka_topics.topics import TopicPlan
from distributary.plan.revisions.positions import Watermarks
from distributary.plan.sinks.sink_plan import sink_group
from distributary.plan.status.conditions import Observation, Problem, Work, conditions


@dataclass(frozen=True)
class LogReconcile:
    """What one reconcile of a Log did and saw. `plan` is None when Kafka was not reached
    (`unreachable` says why) or the spec is invalid (`invalid` says what to fix)."""

    generation: int
    topic: str
    plan: TopicPlan | None = None
    partitions: int | None = None
    watermarks: Watermarks | None = None
    unreachable: str | None = None
    invalid: str | None = None
    # Kafka answered no (`plan.kafka_topics.topics.refusal_message`): Stalled until the field
    # changes.
    refused: str | None = None
    refused_again: float | None = None  # seconds before asking again; None: when the spec changes
    # Accepted, and another controller (Strimzi's topic operator) has yet to act: Reconciling.
    waiting: Work | None = None
    # The topic is another Log's (`plan.kafka_topics.claims`): Stalled, TopicTaken, nothing made or
    # changed.
    taken: str | None = None


def record_problems(log: Log) -> str | None:
    """What is wrong with a declared Log's record format on its own (a schema that does not
    parse or names a column twice, a key that is not a top-level column), as the pipeline graph
    and `distributary validate` say it; None when nothing is. The Log is then `InvalidSpec`."""
    found = Pipeline.build([log]).problems
    return "; ".join(f"{p.field}: {p.message}" for p in found) or None


def _observation(result: LogReconcile, first_sight: bool) -> Observation:
    if result.invalid is not None:
        return Observation(result.generation, problems=(Problem("InvalidSpec", result.invalid),))
    if result.taken is not None:
        return Observation(result.generation, problems=(Problem("TopicTaken", result.taken),))
    if result.refused is not None:
        return Observation(result.generation, problems=(Problem("KafkaRefused", result.refused),))
    if result.plan is None and result.waiting is not None:
        return Observation(result.generation, work=(result.waiting,))
    if result.plan is None:
        message = f"Kafka cannot be reached to manage topic {result.topic}: {result.unreachable}"
        return Observation(result.generation, work=(Work("KafkaUnreachable", message),))
    refusals = tuple(Problem(r.reason, r.message) for r in result.plan.refusals)
    return Observation(
        result.generation,
        first_sight=first_sight and not result.plan.actions and not refusals,
        problems=refusals,
        ready_reason="TopicReady",
        ready_message=f"Topic {result.topic} has {result.partitions} partition(s).",
    )


def log_status(
    result: LogReconcile, previous: Mapping[str, Any] | None, now: datetime
) -> dict[str, Any]:
    """The status to write for a Log (camelCase, as the API stores it)."""
    before = previous or {}
    old_conditions: Sequence[Condition] = [
        Condition.model_validate(c) for c in before.get("conditions") or []
    ]
    observation = _observation(result, first_sight=False)
    status: dict[str, Any] = {
        "observedGeneration": result.generation,
        "conditions": [
            c.model_dump(by_alias=True, exclude_none=True)
            for c in conditions(observation, old_conditions, now)
        ],
        # Who reads the Log is the observer's to say; until it has, nobody is known to.
        "subscribers": list(before.get("subscribers") or []),
    }
    if result.taken is None:  # another Log's topic is never named as this one's
        status["topicName"] = result.topic
    if result.plan is not None:
        status["managedConfigs"] = sorted(result.plan.managed_configs)
    if result.partitions is not None:
        status["partitions"] = result.partitions
    status.update(offsets_status(result.topic, result.watermarks))
    return status


def offsets_status(topic: str, watermarks: Watermarks | None) -> dict[str, Any]:
    """`startOffsets`, `endOffsets` and `records` of a Log's status, from its topic's marks."""
    marks = (watermarks or {}).get(topic)
    if not marks:
        return {}
    return {
        "startOffsets": {str(p): start for p, (start, _) in sorted(marks.items())},
        "endOffsets": {str(p): end for p, (_, end) in sorted(marks.items())},
        "records": sum(end - start for start, end in marks.values()),
    }


def subscribers(log: str, readers: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The views, jobs and Sinks reading `log`, each with its position and lag in it (a view's
    or job's running revision's), as their statuses last reported them (the Log's
    `status.subscribers`)."""
    found = []
    for reader in readers:
        status = reader.get("status") or {}
        kind = str(reader.get("kind") or "DerivedView")
        if kind == "Sink":
            if (reader.get("spec") or {}).get("log") == log:
                found.append(_sink_subscriber(reader))
            continue
        for item in status.get("inputs") or []:
            if item.get("log") != log:
                continue
            if kind == "StreamJob":
                revision, group = status.get("revision"), status.get("consumerGroup")
            else:
                revision = status.get("servingRevision")
                group = _group(status, revision)
            found.append(
                {
                    "kind": kind,
                    "name": reader["metadata"]["name"],
                    "revision": revision,
                    "consumerGroup": group,
                    "position": dict(item.get("position") or {}),
                    "lag": item.get("lag"),
                }
            )
    return sorted(found, key=lambda s: (s["kind"], s["name"], s["revision"] or 0))


def _sink_subscriber(sink: Mapping[str, Any]) -> dict[str, Any]:
    """A Sink as its Log's subscriber: the position its store holds, mirrored to its group."""
    meta, status = sink["metadata"], sink.get("status") or {}
    return {
        "kind": "Sink",
        "name": meta["name"],
        "revision": None,
        "consumerGroup": sink_group(str(meta.get("namespace")), str(meta["name"])),
        "position": dict(status.get("position") or {}),
        "lag": status.get("lag"),
    }


def _group(status: Mapping[str, Any], revision: Any) -> str | None:
    for item in status.get("revisions") or []:
        if item.get("revision") == revision:
            group = item.get("consumerGroup")
            return str(group) if group else None
    return None
