"""The reconcile of a Log: its topic made and kept as its spec says, and its status.

Each reconcile reads the Log (a spec that cannot be used is `InvalidSpec`, never a crash), asks
the topic backend (`Services.topics`) to bring the topic to the spec, which plans the change
(`plan.kafka_topics.topics`), refuses what Kafka cannot do (fewer partitions, a topic another
Log owns) and carries out the rest, then writes the status from the outcome
(`plan.logs.log_status`: replaced whole, so a field never outlives the reason it was written)
and tells people what it did and what it refused. The outcome is returned: what to try again,
and when, is the front end's (the operator retries a taken topic, a refusal or an unreachable
Kafka with back-off; `distributary run` makes its Logs' topics once, before anything reads them).

The topic a Log is served from is its own, or for a view's output Log the serving revision's
(`SERVING_ANNOTATION`); a Log whose topic was made before the topic naming changed keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from distributary.api import ResourceError, owner_of, parse_resource
from distributary.api.log import Log, LogStatus
from distributary.plan.applications.spark import owner_reference
from distributary.plan.kafka_topics.topics import DesiredTopic, described, desired_topic
from distributary.plan.logs.log_status import LogReconcile, log_status, record_problems
from distributary.plan.pipelines.pipeline import revision_topic
from distributary.plan.views.view_plan import SERVING_ANNOTATION, VIEW_LABEL, is_child_log
from distributary.reconcile.ports import Events, Services, StatusStore


def parse_log(body: Mapping[str, Any]) -> Log | str:
    """The Log, or the message saying why its spec cannot be used. The topic its status names
    is the one it held before (a claim it made, or one from before claims were kept)."""
    meta = body.get("metadata") or {}
    document = {k: body.get(k) for k in ("apiVersion", "kind", "spec")}
    document["metadata"] = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "labels": dict(meta.get("labels") or {}),
        "annotations": dict(meta.get("annotations") or {}),
        "generation": int(meta.get("generation") or 0),
        "uid": meta.get("uid"),
    }
    try:
        resource = parse_resource(document)
    except ResourceError as exc:
        return str(exc)
    if not isinstance(resource, Log):
        return "not a Log"
    held = (body.get("status") or {}).get("topicName")
    return resource.model_copy(update={"status": LogStatus(topic_name=held)}) if held else resource


def served_topic(log: Log) -> DesiredTopic:
    """The topic a Log is served from: its own, or for a view's output its serving revision's."""
    serving = log.metadata.annotations.get(SERVING_ANNOTATION)
    if serving and serving.isdigit():
        return desired_topic(log, topic=revision_topic(log, int(serving)))
    held = log.status.topic_name if log.status is not None else None
    if held and log.spec.topic_name is None and VIEW_LABEL not in log.metadata.labels:
        # A Log's topic never changes: one made before the topic naming changed keeps its own.
        return desired_topic(log, topic=held)
    return desired_topic(log)


async def reconcile_log(
    body: Mapping[str, Any], services: Services, store: StatusStore, events: Events
) -> LogReconcile:
    """parse -> act (the topic backend plans and carries out the topic's changes) -> record;
    the outcome, for the front end to retry what may succeed later."""
    meta = body.get("metadata") or {}
    generation = int(meta.get("generation") or 0)
    status = dict(store.status)
    found = parse_log(body)
    if isinstance(found, Log) and not is_child_log(body):  # a view's output: the view's problems
        found = record_problems(found) or found
    if isinstance(found, str):
        topic = (body.get("spec") or {}).get("topicName") or meta.get("name")
        result = LogReconcile(generation, str(topic), invalid=found)
    else:
        owner = owner_reference(owner_of(found))
        managed = frozenset(status.get("managedConfigs") or [])
        result = await services.topics.ensure(found, served_topic(found), owner, managed)
    await store.finish(log_status(result, status, datetime.now(UTC)))
    if result.invalid is not None:
        events.warn("InvalidSpec", result.invalid)
    if result.plan is not None:
        for action in result.plan.actions:
            events.info(type(action).__name__, f"Topic {result.topic}: {described(action)}")
        for refusal in result.plan.refusals:
            events.warn(refusal.reason, refusal.message)
    if result.taken is not None:
        events.warn("TopicTaken", result.taken)
    if result.refused is not None:
        events.warn("KafkaRefused", result.refused)
    return result
