"""One StreamJob in its namespace: which revision runs, what runs it, or why it cannot run.

A job is checked in the same graph as views (`plan.views.view_plan.namespace_pipeline`): an input or
output Log that does not exist, or an output another view or job writes, is reported on the job.
An input that is a view's output is read at the topic that view serves.

The revision is the hash of what the job runs (image, file, arguments, environment, inputs,
outputs). When it changes, `spec.upgrade.strategy` decides: `InPlace` applies the new spec to the
running revision (same checkpoint and consumer group: the job's author keeps them compatible);
`Reprocess` starts revision N+1 on a fresh checkpoint and consumer group from the inputs'
starting positions, and stops revision N. Under `InPlace` a change of the input logs is refused:
Spark cannot restore a checkpoint whose sources changed.

A job that reads has a dead-letter topic, `distributary.<namespace>.<job>.dlq`, made as a view's
is (`cleanup.policy=delete`, the retention of `spec.deadLetters`). It is made on behalf of one of
the job's Logs, the first output (else the first input): it takes that Log's partitions and
replicas, belongs to it under the strimzi backend, and is deleted with it when the Log is deleted
under `deletionPolicy: Delete` (`plan.logs.log_deletion`), as a view's goes with its output Log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from distributary.api import owner_of
from distributary.api.job import StreamJob
from distributary.api.log import Log, LogStatus
from distributary.api.names import progress_topic_in_force
from distributary.graph import Pipeline, Ref
from distributary.plan.access.kafka_connection import KafkaSecurity
from distributary.plan.applications.children import rewind_folder
from distributary.plan.applications.runner_spec import (
    consumer_group,
    dead_letter_topic,
    reading_topic,
)
from distributary.plan.applications.spark import (
    DEFAULT_SERVICE_ACCOUNT,
    Application,
    job_launch,
    spark_application_of,
)
from distributary.plan.kafka_topics.topics import DesiredTopic, dead_letter_desired
from distributary.plan.pipelines.pipeline import job_revision_hash
from distributary.plan.revisions.classify import Classification, classify_job_change
from distributary.plan.status.conditions import Problem, Work
from distributary.plan.views.view_plan import serving_log


@dataclass(frozen=True)
class JobInputTopic:
    """An input log and the topic the job reads it at."""

    log: str
    topic: str


@dataclass(frozen=True)
class JobDeadLetters:
    """The job's dead-letter topic, and the Log it is made on behalf of."""

    log: Log
    topic: DesiredTopic


def dead_letter_log(job: StreamJob) -> str | None:
    """The name of the Log the job's dead-letter topic belongs to: its first output, else its
    first input; None for a job that reads nothing (it has no dead letters)."""
    if not job.spec.inputs:
        return None
    return (job.spec.outputs[0] if job.spec.outputs else job.spec.inputs[0]).log


def job_dead_letters(
    job: StreamJob, inputs: Mapping[str, Log], outputs: Mapping[str, Log]
) -> JobDeadLetters | None:
    """The job's dead-letter topic (see the module docstring), None when it reads nothing."""
    name = dead_letter_log(job)
    log = None if name is None else outputs.get(name) or inputs.get(name)
    if log is None:
        return None
    topic = dead_letter_topic(job.metadata.namespace, job.metadata.name)
    return JobDeadLetters(log, dead_letter_desired(topic, log, job.spec.dead_letters))


@dataclass(frozen=True)
class JobPlan:
    """What one reconcile of a job should do. Nothing to start when `launch` is None."""

    revision: int
    problems: tuple[Problem, ...] = ()
    waiting: tuple[Work, ...] = ()
    spec_hash: str | None = None
    consumer_group: str | None = None
    inputs: tuple[JobInputTopic, ...] = ()
    launch: Application | None = None
    application: dict[str, Any] | None = None  # the SparkApplication, for spark-operator
    starts: bool = False  # a new revision: recorded in status before anything runs
    retires: int | None = None  # the revision the new one replaces (every other one stops)
    change: Classification | None = None  # how the last change of the spec is carried out
    dead_letters: JobDeadLetters | None = None  # the topic to make before the job runs


def _previous_inputs(previous: Mapping[str, Any]) -> set[str]:
    return {str(row.get("log")) for row in previous.get("inputs") or [] if row.get("log")}


def _logs(
    job: StreamJob,
    pipeline: Pipeline,
    children: Mapping[str, LogStatus],
    names: list[str],
) -> dict[str, Log] | str:
    """The Logs `names` as the job reads or writes them; a message when one has no topic yet."""
    found: dict[str, Log] = {}
    for name in names:
        log = pipeline.logs.get(Ref.log(name, job.metadata.namespace))
        if log is None:
            return f"log {name} is not declared"  # the graph reports it with the fix
        seen = serving_log(log, children, pipeline)
        if seen is None:
            return f"log {name} is a view's output, which has no topic yet"
        found[name] = seen
    return found


def _change(
    job: StreamJob, old: StreamJob | None, before: Mapping[str, Any], spec_hash: str
) -> Classification | None:
    """How the change from the running spec is carried out: classified field by field when the
    previous spec is known (an update), else from the hash and the inputs status lists. None
    once this generation's change is carried out: a retry of the update's reconcile, whose
    previous spec is then no longer what ran before it, keeps the recorded classification."""
    known = before.get("specHash")
    recorded = before.get("lastChange") or {}
    if known == spec_hash and recorded.get("generation") == job.metadata.generation:
        return None
    # The previous spec tells what changed only if it is what runs (not a refused edit).
    if old is not None and old.spec != job.spec and job_revision_hash(old.spec) == known:
        found = classify_job_change(old, job)
        if found.kind == "Reprocess" and known == spec_hash:
            # What the job runs is unchanged (e.g. only its resources): the revision stays.
            return Classification("RestartInPlace", found.reasons)
        return found
    if not before.get("revision") or not known or known == spec_hash:
        return None
    now = {i.log for i in job.spec.inputs}
    if _previous_inputs(before) and _previous_inputs(before) != now:
        change = f"inputs changed ({', '.join(sorted(_previous_inputs(before)))} -> "
        change += f"{', '.join(sorted(now))})"
        if job.spec.upgrade.strategy == "InPlace":
            refused = "Spark cannot restore a checkpoint whose sources changed; set "
            refused += "upgrade.strategy to Reprocess to start on a fresh checkpoint"
            return Classification("Forbidden", (f"{change}: {refused}",))
        return Classification("Reprocess", (f"{change}: a new revision starts afresh",))
    if job.spec.upgrade.strategy == "InPlace":
        reason = "the job's definition changed: it restarts from its checkpoint"
        return Classification("RestartInPlace", (reason,))
    return Classification("Reprocess", ("the job's definition changed: a new revision starts",))


def refused_revision(plan: JobPlan, previous: Mapping[str, Any], problem: Problem) -> JobPlan:
    """The plan when the revision `plan` would start is refused (`problem`): the running one
    `plan.retires` stays as status records it, observed and nothing of it changed, and nothing
    starts or stops. A job's first revision (nothing runs yet) gets a plan of the problem only."""
    if plan.retires is None:
        return JobPlan(plan.revision, problems=(*plan.problems, problem))
    before = dict(previous)
    known, group = before.get("specHash"), before.get("consumerGroup")
    rows = [row for row in before.get("inputs") or [] if row.get("log") and row.get("topic")]
    return JobPlan(
        plan.retires,
        problems=(*plan.problems, problem),
        spec_hash=str(known) if known else None,
        consumer_group=str(group) if group else None,
        inputs=tuple(JobInputTopic(str(row["log"]), str(row["topic"])) for row in rows),
        change=plan.change,
    )


CHECKPOINT_VARIABLE = "DISTRIBUTARY_CHECKPOINT_LOCATION"


def with_job_checkpoint(launch: Application, folder: str) -> Application:
    """`launch` checkpointing in `folder` under its revision's checkpoint (a rewind's)."""
    location = f"{launch.env[CHECKPOINT_VARIABLE].rstrip('/')}/{folder}"
    return replace(launch, env={**launch.env, CHECKPOINT_VARIABLE: location})


def with_job_rewind(plan: JobPlan, folder: str, service_account: str, job: StreamJob) -> JobPlan:
    """`plan` with its application on the fresh checkpoint of a rewind."""
    assert plan.launch is not None
    launch = with_job_checkpoint(plan.launch, folder)
    application = spark_application_of(launch, job.spec.spark, service_account, owner_of(job))
    return replace(plan, launch=launch, application=application)


def plan_job(
    pipeline: Pipeline,
    children: Mapping[str, LogStatus],
    job: StreamJob,
    previous: Mapping[str, Any] | None,
    *,
    checkpoint_root: str,
    bootstrap_servers: str,
    kafka_security: KafkaSecurity | None = None,
    old: StreamJob | None = None,
    service_account: str = DEFAULT_SERVICE_ACCOUNT,
) -> JobPlan:
    """The plan of `job` (checked in `pipeline`), given its previous status and, on an update,
    the spec it replaces."""
    before = dict(previous or {})
    running = int(before.get("revision") or 0)
    revision = running or 1
    ref = Ref.of(job)
    problems = tuple(
        Problem("InvalidSpec", str(p)) for p in pipeline.problems if p.resource == str(ref)
    )
    if problems:
        return JobPlan(revision, problems=problems)
    inputs = _logs(job, pipeline, children, [i.log for i in job.spec.inputs])
    outputs = _logs(job, pipeline, children, [o.log for o in job.spec.outputs])
    for found in (inputs, outputs):
        if isinstance(found, str):
            return JobPlan(revision, waiting=(Work("WaitingForInput", found),))
    assert isinstance(inputs, dict)
    assert isinstance(outputs, dict)
    spec_hash = job_revision_hash(job.spec)
    change = _change(job, old, before, spec_hash)
    group = consumer_group(job.metadata.namespace, job.metadata.name, revision)
    if change is not None and change.kind == "Forbidden":
        problem = Problem("ChangeForbidden", "; ".join(change.reasons))
        known = before.get("specHash")
        return JobPlan(
            revision,
            problems=(problem,),
            spec_hash=str(known) if known else None,
            consumer_group=group,
            change=change,
        )
    retires = None
    if running and change is not None and change.kind == "Reprocess":
        revision, retires = running + 1, running
    launch = job_launch(
        job,
        inputs,
        outputs,
        revision=revision,
        spec_hash=spec_hash,
        checkpoint_root=checkpoint_root,
        bootstrap_servers=bootstrap_servers,
        kafka_security=kafka_security,
        progress_topic=progress_topic_in_force(),
    )
    rewound = before.get("lastRewind") or {}
    if rewound.get("revision") == revision and rewound.get("phase") == "Done":
        launch = with_job_checkpoint(launch, rewind_folder(str(rewound["requestId"])))
    application = spark_application_of(launch, job.spec.spark, service_account, owner_of(job))
    return JobPlan(
        revision,
        spec_hash=spec_hash,
        consumer_group=consumer_group(job.metadata.namespace, job.metadata.name, revision),
        inputs=tuple(JobInputTopic(name, reading_topic(log)) for name, log in inputs.items()),
        launch=launch,
        application=application,
        starts=revision != running,
        retires=retires,
        change=change,
        dead_letters=job_dead_letters(job, inputs, outputs),
    )
