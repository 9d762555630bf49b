"""The plan of a whole pipeline: every topic, child Log and Spark application it would create.

This is what `distributary plan` shows and what a first reconcile of a fresh namespace would do:
each Log becomes a topic, each view becomes revision 1 (its own topic, `<log>.r1`, and its own
Spark application), each job becomes revision 1 of its application. Nothing here looks at a live
cluster; the controllers plan against what they observe with the same functions.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from distributary.api import owner_of
from distributary.api.log import Log, LogStatus, log_manifest
from distributary.api.names import MAX_TOPIC_NAME, label_value, shortened
from distributary.graph import Pipeline, Ref
from distributary.plan.access.kafka_connection import KafkaSecurity
from distributary.plan.applications.runner_spec import RunnerSpec, view_runner_spec
from distributary.plan.applications.spark import job_application, spark_application
from distributary.plan.kafka_topics.topics import DesiredTopic, desired_topic, kafka_topic_manifest
from distributary.plan.revisions.classify import revision_hash, view_definition

TopicBackend = Literal["strimzi", "direct"]
SparkRuntime = Literal["spark-operator", "local"]

DEFAULT_IMAGE = "distributary-spark:0.1.0"
DEFAULT_CHECKPOINT_ROOT = "file:///var/lib/distributary/checkpoints"
# One set of defaults for the operator and `distributary plan`, so a plan previews what runs.
DEFAULT_TOPIC_BACKEND: TopicBackend = "direct"  # works with any Kafka; the chart picks strimzi
DEFAULT_STRIMZI_CLUSTER = "my-cluster"
VIEW_LABEL = "distributary.dev/view"  # on a view's output Log: the view (also an annotation)
SOURCE_LABEL = "distributary.dev/source"  # on a Source's table Log (under the operator): the Source


def revision_topic(log: Log, revision: int) -> str:
    """The topic revision `revision` of a view writes: `<output topic>.r<revision>`.

    Every revision gets a topic of its own so that a reprocessing revision never writes where
    readers are reading; the output Log's status names the serving one. A view's output topic
    leaves room for the suffix (`api.names.MAX_OUTPUT_TOPIC`); past it, the topic is shortened
    with a digest rather than made longer than Kafka allows."""
    suffix = f".r{revision}"
    return shortened(log.topic, MAX_TOPIC_NAME - len(suffix)) + suffix


def view_output_metadata(view: str) -> dict[str, dict[str, str]]:
    """The labels (and annotation) that mark a Log as view `view`'s output. A label value holds
    63 characters, so a longer name is shortened there and kept whole in the annotation."""
    value = label_value(view)
    labels = {"app.kubernetes.io/managed-by": "distributary", VIEW_LABEL: value}
    if value == view:
        return {"labels": labels}
    return {"labels": labels, "annotations": {VIEW_LABEL: view}}


def job_revision_hash(spec: Any) -> str:
    """Hash of what a StreamJob runs: image, file, arguments, environment, inputs and outputs."""
    fields = {
        "image": spec.image,
        "file": spec.main_application_file,
        "arguments": list(spec.arguments),
        "env": dict(sorted(spec.env.items())),
        "inputs": sorted(i.log for i in spec.inputs),
        "outputs": sorted(o.log for o in spec.outputs),
    }
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class PlannedTopic:
    """A topic the pipeline needs: which Log it belongs to and, for a view's, which revision."""

    log: Ref
    topic: DesiredTopic
    derived_from: Ref | None = None
    revision: int | None = None


@dataclass(frozen=True)
class PlannedView:
    """Revision 1 of a view: its hash, the runner spec and the application that runs it."""

    view: Ref
    revision: int
    spec_hash: str
    runner: RunnerSpec
    application: dict[str, Any]


@dataclass(frozen=True)
class PlannedJob:
    """Revision 1 of a StreamJob and the application that runs it."""

    job: Ref
    revision: int
    spec_hash: str
    application: dict[str, Any]


@dataclass(frozen=True)
class PipelinePlan:
    """Everything a pipeline would create, in the pipeline's topological order."""

    topics: tuple[PlannedTopic, ...]
    child_logs: tuple[dict[str, Any], ...]
    views: tuple[PlannedView, ...]
    jobs: tuple[PlannedJob, ...]
    kafka_topics: tuple[dict[str, Any], ...]

    def manifests(self) -> list[dict[str, Any]]:
        """The child objects as Kubernetes manifests: topics (strimzi), Logs, applications."""
        return [
            *self.kafka_topics,
            *self.child_logs,
            *(v.application for v in self.views),
            *(j.application for j in self.jobs),
        ]


@dataclass(frozen=True)
class PlanSettings:
    """The operator settings a plan depends on."""

    backend: TopicBackend = DEFAULT_TOPIC_BACKEND
    strimzi_cluster: str = DEFAULT_STRIMZI_CLUSTER
    image: str = DEFAULT_IMAGE
    checkpoint_root: str = DEFAULT_CHECKPOINT_ROOT
    bootstrap_servers: str | None = None
    kafka_security: KafkaSecurity | None = None


def _serving(pipeline: Pipeline, log: Log) -> Log:
    """The log as readers will find it: a view's output serves its revision 1 topic."""
    ref = Ref.of(log)
    if not pipeline.is_derived(ref):
        return log
    status = LogStatus(topic_name=revision_topic(log, 1), partitions=log.spec.partitions)
    return log.model_copy(update={"status": status})


def _plan_view(pipeline: Pipeline, ref: Ref, settings: PlanSettings) -> PlannedView | None:
    view = pipeline.views[ref]
    output = pipeline.output(ref)
    inputs = {alias: _serving(pipeline, log) for alias, log in pipeline.inputs(ref).items()}
    if output is None or len(inputs) != len(view.spec.inputs):
        return None
    spec_hash = revision_hash(view_definition(view, inputs))
    runner = view_runner_spec(
        view,
        inputs,
        output,
        revision=1,
        spec_hash=spec_hash,
        output_topic=revision_topic(output, 1),
        checkpoint_root=settings.checkpoint_root,
        bootstrap_servers=settings.bootstrap_servers,
        kafka_security=settings.kafka_security,
    )
    application = spark_application(
        runner, view.spec.spark, image=settings.image, owner=owner_of(view)
    )
    return PlannedView(ref, 1, spec_hash, runner, application)


def plan_pipeline(pipeline: Pipeline, settings: PlanSettings | None = None) -> PipelinePlan:
    """The plan of a pipeline that has no problems (check `pipeline.ok` first)."""
    settings = settings or PlanSettings()
    topics: list[PlannedTopic] = []
    child_logs: list[dict[str, Any]] = []
    views: list[PlannedView] = []
    jobs: list[PlannedJob] = []
    for ref in pipeline.order:
        if ref in pipeline.logs:
            log = pipeline.logs[ref]
            writer = pipeline.writer(ref)
            if writer is not None and writer in pipeline.views:
                topics.append(
                    PlannedTopic(ref, desired_topic(log, topic=revision_topic(log, 1)), writer, 1)
                )
                child_logs.append(
                    log_manifest(
                        log.metadata.name,
                        ref.namespace,
                        log.spec,
                        **view_output_metadata(writer.name),
                    )
                )
            else:
                topics.append(PlannedTopic(ref, desired_topic(log)))
        elif ref in pipeline.views:
            planned = _plan_view(pipeline, ref, settings)
            if planned is not None:
                views.append(planned)
        elif ref in pipeline.jobs:
            job = pipeline.jobs[ref]
            logs = {
                log_ref.name: pipeline.logs[log_ref]
                for log_ref in pipeline.logs
                if log_ref.namespace == ref.namespace
            }
            spec_hash = job_revision_hash(job.spec)
            application = job_application(
                job,
                logs,
                logs,
                revision=1,
                spec_hash=spec_hash,
                checkpoint_root=settings.checkpoint_root,
                bootstrap_servers=settings.bootstrap_servers,
                kafka_security=settings.kafka_security,
                owner=owner_of(job),
            )
            jobs.append(PlannedJob(ref, 1, spec_hash, application))
    kafka_topics: list[dict[str, Any]] = []
    if settings.backend == "strimzi":
        for planned_topic in topics:
            log = pipeline.logs[planned_topic.log]
            kafka_topics.append(
                kafka_topic_manifest(
                    log,
                    cluster=settings.strimzi_cluster,
                    namespace=planned_topic.log.namespace,
                    topic=planned_topic.topic.name,
                )
            )
    return PipelinePlan(
        tuple(topics), tuple(child_logs), tuple(views), tuple(jobs), tuple(kafka_topics)
    )
