"""What deleting a Log deletes in Kafka: the pure half of the Log controller's delete handler.

`deletionPolicy: Retain` (the default) keeps every topic. `Delete` deletes the Log's topic and,
when the Log is a view's output (the child Log a view creates, labelled with the view's name),
every topic the view wrote for it as well: one topic per revision, `<topic>.r1` up to the serving
revision (older revisions are kept until their grace period ends, so any of them may still be
there), and the view's dead-letter topic. The child Log is the one place that outlives the view
long enough to clean up: garbage collection deletes it after the view is gone, and its finalizer
holds it until the topics are deleted.

The serving revision comes from the annotation the view writes on its child and from the topic
the child's status names; the larger wins, so a status written after the last apply still counts.
Deleting a topic that is already gone is not an error for either topic backend, so listing a
revision whose topic was never made (or was already removed) is harmless.

A StreamJob's dead-letter topic belongs to one of its Logs (`plan.jobs.job_plan.dead_letter_log`:
the first output, else the first input) and goes with that Log in the same way, as long as the job
is still there to say so when the Log is deleted.
"""

from __future__ import annotations

from collections.abc import Iterable

from distributary.api.job import StreamJob
from distributary.api.log import Log
from distributary.plan.applications.runner_spec import dead_letter_topic
from distributary.plan.jobs.job_plan import dead_letter_log
from distributary.plan.pipelines.pipeline import revision_topic
from distributary.plan.views.view_plan import LATEST_ANNOTATION, SERVING_ANNOTATION, VIEW_LABEL


def _revision_named(log: Log, topic: str | None) -> int:
    """The revision whose topic `topic` is (`<log topic>.r<N>`), else 0."""
    prefix = f"{log.topic}.r"
    if topic and topic.startswith(prefix) and topic[len(prefix) :].isdigit():
        return int(topic[len(prefix) :])
    return 0


def serving_revision(log: Log, status_topic: str | None = None) -> int:
    """The highest revision a view's output Log is known to have had a topic for: from its
    serving- and latest-revision annotations (a revision catching up has a topic too) and from
    the topic its status names; 0 when none says."""
    found = [_revision_named(log, status_topic)]
    for key in (SERVING_ANNOTATION, LATEST_ANNOTATION):
        annotated = log.metadata.annotations.get(key, "")
        found.append(int(annotated) if annotated.isdigit() else 0)
    return max(found)


def view_of(log: Log) -> str | None:
    """The name of the view whose output `log` is, or None for a Log of its own."""
    # The annotation holds the whole name when the label had to shorten it.
    return log.metadata.annotations.get(VIEW_LABEL) or log.metadata.labels.get(VIEW_LABEL) or None


def deleted_topics(
    log: Log, status_topic: str | None = None, jobs: Iterable[StreamJob] = ()
) -> tuple[str, ...]:
    """The topics to delete with `log`, in order; `status_topic` is the topic its status names,
    `jobs` the StreamJobs of its namespace.

    None under `Retain`. Under `Delete`: a Log's own topic, or for a view's output Log the topic
    of every revision from 1 to the serving one and the view's dead-letter topic; and the
    dead-letter topic of every job whose dead letters belong to the Log."""
    if log.spec.deletion_policy != "Delete":
        return ()
    ns, name = log.metadata.namespace, log.metadata.name
    letters = tuple(
        dead_letter_topic(ns, job.metadata.name)
        for job in jobs
        if job.metadata.namespace == ns and dead_letter_log(job) == name
    )
    view = view_of(log)
    if not view:
        return (status_topic or log.topic, *letters)
    serving = max(serving_revision(log, status_topic), 1)
    topics = [revision_topic(log, revision) for revision in range(1, serving + 1)]
    if status_topic and status_topic not in topics:
        topics.append(status_topic)  # the topic this Log's controller made for it
    topics.append(dead_letter_topic(log.metadata.namespace, view))
    return (*topics, *letters)
