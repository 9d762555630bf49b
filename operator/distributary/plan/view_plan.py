"""One DerivedView in its namespace: what to create for it, or why it cannot run.

The controller hands over every Log and DerivedView of the view's namespace as the API server
has them; the same graph that `distributary validate` builds from files checks them here, so a
missing input, a cycle across several views or SQL that uses an undeclared column is found the
same way in both places and reported on the view that has it. A view's output Log exists in the
API as the view's child; it is taken out of the graph (the graph derives it again from the view)
but its status, which names the topic it serves, is kept for the views that read it.

Revision 1 starts when a view has no revision yet. A later change of what determines the output
(a new hash) is classified and shown; carrying out a reprocess belongs to the revision manager,
and until it runs, the serving revision keeps running and the view says why it waits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from distributary.api import ResourceError, owner_of, parse_resource
from distributary.api.log import Log, LogStatus, log_manifest
from distributary.api.view import DerivedView
from distributary.graph import Pipeline, Ref
from distributary.plan.conditions import Problem, Work
from distributary.plan.pipeline import revision_topic
from distributary.plan.revisions import revision_hash, view_definition
from distributary.plan.runner_spec import RunnerSpec, view_runner_spec
from distributary.plan.spark import owner_reference
from distributary.plan.topics import DesiredTopic, desired_topic

VIEW_LABEL = "distributary.dev/view"
SERVING_ANNOTATION = "distributary.dev/serving-revision"


def is_child_log(body: Mapping[str, Any]) -> bool:
    """Whether a Log in the API is a view's output (created and owned by the view)."""
    return VIEW_LABEL in ((body.get("metadata") or {}).get("labels") or {})


def _document(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "labels") if meta.get(k)},
        "spec": body.get("spec"),
        "status": body.get("status"),
    }


def namespace_pipeline(
    logs: Iterable[Mapping[str, Any]], views: Iterable[Mapping[str, Any]]
) -> tuple[Pipeline, dict[str, LogStatus], dict[str, str]]:
    """The graph of a namespace's resources, the child Logs' statuses by name, and the views
    whose spec does not even parse, with the message."""
    resources: list[Any] = []
    children: dict[str, LogStatus] = {}
    invalid: dict[str, str] = {}
    for body in logs:
        name = str((body.get("metadata") or {}).get("name"))
        if is_child_log(body):
            status = body.get("status") or {}
            kept = {k: v for k, v in status.items() if k != "conditions"}
            children[name] = LogStatus.model_validate(kept)
            continue
        try:
            resources.append(parse_resource(_document(body)))
        except ResourceError:
            continue  # reported on the Log itself
    for body in views:
        try:
            resources.append(parse_resource(_document(body)))
        except ResourceError as exc:
            invalid[str((body.get("metadata") or {}).get("name"))] = str(exc)
    return Pipeline.build(resources), children, invalid


@dataclass(frozen=True)
class ViewPlan:
    """What one reconcile of a view should do. Nothing to run when `problems` or `waiting`."""

    revision: int
    problems: tuple[Problem, ...] = ()
    waiting: tuple[Work, ...] = ()
    spec_hash: str | None = None
    output_log: dict[str, Any] | None = None
    topics: tuple[DesiredTopic, ...] = ()  # the revision's output topic, the dead-letter topic
    runner: RunnerSpec | None = None
    starts: bool = False
    reprocess_pending: str | None = None


def serving_log(log: Log, children: Mapping[str, LogStatus], pipeline: Pipeline) -> Log | None:
    """An input as its readers see it: a view's output Log with the topic it serves (None while
    the upstream view has not started, so there is no topic to read yet)."""
    if not pipeline.is_derived(log):
        return log
    status = children.get(log.metadata.name)
    if status is None or not status.topic_name:
        return None
    return log.model_copy(update={"status": status})


def _output_manifest(view: DerivedView, output: Log, revision: int) -> dict[str, Any]:
    owner = owner_reference(owner_of(view))
    return log_manifest(
        output.metadata.name,
        view.metadata.namespace,
        output.spec,
        labels={"app.kubernetes.io/managed-by": "distributary", VIEW_LABEL: view.metadata.name},
        annotations={SERVING_ANNOTATION: str(revision)},
        ownerReferences=[owner],
    )


def plan_view(
    pipeline: Pipeline,
    children: Mapping[str, LogStatus],
    view: DerivedView,
    previous: Mapping[str, Any] | None,
    *,
    checkpoint_root: str,
    bootstrap_servers: str,
) -> ViewPlan:
    """The plan of `view` (checked in `pipeline`), given its previous status."""
    ref = Ref.of(view)
    serving = int((previous or {}).get("servingRevision") or 0)
    revision = serving or 1
    problems = tuple(
        Problem("InvalidSpec", str(p)) for p in pipeline.problems if p.resource == str(ref)
    )
    output = pipeline.output(ref)
    if problems or output is None:
        return ViewPlan(revision, problems=problems or (Problem("OutputTaken", _taken(view)),))
    inputs: dict[str, Log] = {}
    for alias, log in pipeline.inputs(ref).items():
        seen = serving_log(log, children, pipeline)
        if seen is None:
            message = f"input {alias} reads view output {log.metadata.name}, which has no topic yet"
            return ViewPlan(revision, waiting=(Work("WaitingForInput", message),))
        inputs[alias] = seen
    spec_hash = revision_hash(view_definition(view, inputs))
    known = _revision_hash(previous, revision)
    topic = revision_topic(output, revision)
    if known is not None and known != spec_hash:
        # The serving revision keeps running its own definition (its application is left as it
        # is) until a new revision replaces it.
        pending = (
            f"the view's output definition changed (revision hash {known} -> {spec_hash}): "
            f"revision {revision} keeps serving until a new revision is started"
        )
        return ViewPlan(revision, spec_hash=known, reprocess_pending=pending)
    runner = view_runner_spec(
        view,
        inputs,
        output,
        revision=revision,
        spec_hash=spec_hash,
        output_topic=topic,
        checkpoint_root=checkpoint_root,
        bootstrap_servers=bootstrap_servers,
    )
    return ViewPlan(
        revision,
        spec_hash=spec_hash,
        output_log=_output_manifest(view, output, revision),
        topics=(
            desired_topic(output, topic=topic),
            # Dead letters are kept like the output: as long, with as many partitions.
            DesiredTopic(runner.dead_letter_topic, output.spec.partitions, output.spec.replicas),
        ),
        runner=runner,
        starts=not serving,
    )


def _revision_hash(previous: Mapping[str, Any] | None, revision: int) -> str | None:
    for item in (previous or {}).get("revisions") or []:
        if item.get("revision") == revision:
            return str(item.get("specHash"))
    return None


def _taken(view: DerivedView) -> str:
    return (
        f"spec.output.log: the Log {view.output_log!r} is declared elsewhere or written by "
        "another view; give this view's output another name"
    )
