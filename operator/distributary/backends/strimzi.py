"""The strimzi topic backend: a Log's topic as a Strimzi `KafkaTopic`, which Strimzi makes real.

Distributary never touches Kafka here. It renders the KafkaTopic (`kafka_topic_manifest`),
applies it server-side, and reads what Strimzi's topic operator made of it from the status
(`plan.logs.strimzi_status`); the apply's response is the object as stored, so that read costs no
second request. A reconcile is a read (is the KafkaTopic someone else's?) and an apply.

The apiVersion is the first of `kafka.strimzi.io/v1` (Strimzi 0.49 and later) and `v1beta2`
(older Strimzi) the API server serves, as discovery says; the spec is the same at both.

The KafkaTopic lives in the Log's namespace, unless the operator is given the namespace Strimzi's
topic operator watches (it watches one). Owner references cannot cross namespaces: the garbage
collector treats an owner outside the dependent's namespace as absent and deletes the dependent.
And even within a namespace an owner reference would be wrong for a Log with the default
`deletionPolicy: Retain`: Strimzi's topic operator deletes the Kafka topic when its KafkaTopic is
deleted, so a garbage-collected KafkaTopic would take the Log's data with it. So the Log owns its
KafkaTopic only when both are in one namespace and the policy is `Delete`. Every KafkaTopic links
back to its Log by the label `distributary.dev/log-uid` (a uid always fits a label value, where
`namespace/name` may not) and the annotation `distributary.dev/log` (`namespace/name`). A Retain
Log's KafkaTopic outlives it, topic and all, and a Log of the same name made again adopts it; a
Delete Log in another namespace than its KafkaTopic has it removed by `delete`.

A failure to talk to the API server, including a cluster without the KafkaTopic CRD, comes back
as `unreachable`, so the controller retries as it does when the direct backend cannot reach Kafka.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from distributary.api.log import Log
from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.kube.errors import KubeError
from distributary.kube.resources import Kube
from distributary.plan.kafka_topics.topics import (
    STRIMZI_API_VERSIONS,
    DesiredTopic,
    desired_topic,
    kafka_topic_manifest,
)
from distributary.plan.logs.log_status import LogReconcile
from distributary.plan.logs.strimzi_status import (
    LOG_ANNOTATION,
    log_reconcile,
    ownership_refusal,
    read_kafka_topic,
    refused_reconcile,
)

GROUP, KIND = "kafka.strimzi.io", "KafkaTopic"
LOG_UID_LABEL = "distributary.dev/log-uid"


def log_ref(log: Log) -> str:
    """`namespace/name` of a Log, as the `distributary.dev/log` annotation holds it."""
    return f"{log.metadata.namespace}/{log.metadata.name}"


class StrimziTopics:
    """Makes Logs' topics by applying KafkaTopics for the Strimzi Kafka cluster `cluster`, in
    `namespace` (where its topic operator watches) or, when None, in each Log's namespace."""

    def __init__(self, kube: Kube, cluster: str, namespace: str | None = None) -> None:
        self.kube = kube
        self.cluster = cluster
        self.namespace = namespace

    def api_version(self) -> str:
        """The KafkaTopic apiVersion the API server serves (v1 preferred). Raises `KubeError`
        when it serves none: Strimzi is not installed."""
        served = self.kube.served_version(GROUP, KIND, STRIMZI_API_VERSIONS)
        if served is None:
            raise KubeError(
                f"the API server at {self.kube.server} serves no KafkaTopic "
                f"({' or '.join(STRIMZI_API_VERSIONS)}): the KafkaTopic CRD is not installed; "
                "install Strimzi, or run the operator with --topic-backend direct",
                status=404,
            )
        return served

    def manifest(
        self, log: Log, desired: DesiredTopic, owner: Mapping[str, Any], api_version: str
    ) -> dict[str, Any]:
        """The KafkaTopic for `desired` (the Log's topic, a view's revision topic or its
        dead-letter topic) with `desired`'s own configs, linked back to `log`; `owner` is the
        Log's owner reference (apiVersion, kind, name, uid, ...)."""
        namespace = self.namespace or log.metadata.namespace
        manifest = kafka_topic_manifest(
            log,
            cluster=self.cluster,
            namespace=namespace,
            api_version=api_version,
            desired=desired,
        )
        meta = manifest["metadata"]
        if owner.get("uid"):
            meta["labels"][LOG_UID_LABEL] = str(owner["uid"])
        if namespace == log.metadata.namespace and log.spec.deletion_policy == "Delete":
            meta["ownerReferences"] = [dict(owner)]
        return manifest

    def apply(self, log: Log, desired: DesiredTopic, owner: Mapping[str, Any]) -> LogReconcile:
        """Apply the KafkaTopic for `desired` and return the Log's outcome at its
        `metadata.generation`: Ready, waiting for the topic operator, or refused (by it, or
        because the KafkaTopic belongs to someone else). Never raises for the API server."""
        generation = log.metadata.generation
        try:
            manifest = self.manifest(log, desired, owner, self.api_version())
            meta = manifest["metadata"]
            existing = self.kube.get(manifest["apiVersion"], KIND, meta["namespace"], meta["name"])
            refusal = ownership_refusal(existing, log_ref(log), desired.name)
            if refusal is not None:
                return refused_reconcile(generation, desired, refusal)
            applied = self.kube.apply(manifest)
        except KubeError as exc:
            return LogReconcile(generation, desired.name, unreachable=str(exc))
        return log_reconcile(generation, desired, read_kafka_topic(applied))

    def delete(self, log: Log, desired: DesiredTopic) -> bool:
        """Delete the KafkaTopic of `desired` if it is `log`'s (for `deletionPolicy: Delete`;
        Strimzi's topic operator then deletes the topic). True if one was deleted. Raises
        `KubeError` when the API server fails."""
        api_version = self.api_version()
        manifest = self.manifest(log, desired, {}, api_version)
        meta = manifest["metadata"]
        existing = self.kube.get(api_version, KIND, meta["namespace"], meta["name"])
        if existing is None:
            return False
        annotations = (existing.get("metadata") or {}).get("annotations") or {}
        if annotations.get(LOG_ANNOTATION) != log_ref(log):
            return False  # not this Log's: never delete another's topic
        return self.kube.delete(api_version, KIND, meta["namespace"], meta["name"])


class StrimziTopicBackend:
    """The `strimzi` topic backend as the operator runs it (the `TopicBackend` contract):
    KafkaTopics applied through `topics`, and a Ready topic's watermarks read with `admin` when
    Kafka answers (it need not: Strimzi's topic operator is the one that talks to it)."""

    def __init__(self, topics: StrimziTopics, admin: KafkaAdmin) -> None:
        self.topics = topics
        self.admin = admin

    async def ensure(
        self,
        log: Log,
        desired: DesiredTopic,
        owner: Mapping[str, Any],
        managed: frozenset[str] = frozenset(),
    ) -> LogReconcile:
        """Apply the KafkaTopic of `desired`; Strimzi keeps the configs it manages itself."""
        result = await asyncio.to_thread(self.topics.apply, log, desired, owner)
        if result.plan is None:
            return result
        try:
            marks = await asyncio.to_thread(self.admin.watermarks, [result.topic])
        except KafkaAdminError:
            return result
        return replace(result, watermarks=marks)

    async def delete(self, log: Log | None, topic: str) -> None:
        """Delete the topic's KafkaTopic if it is `log`'s: Strimzi's topic operator deletes the
        topic with it (deleting the topic alone, it would make it again). Without a Log to
        tell whose the KafkaTopic is, the topic is deleted through the Admin API."""
        if log is None:
            await asyncio.to_thread(self.admin.delete_topic, topic)
            return
        await asyncio.to_thread(self.topics.delete, log, desired_topic(log, topic=topic))

    async def release(self, namespace: str, name: str) -> list[str]:
        """No claims are kept here (`backends.claimed` keeps them): nothing to release."""
        return []
