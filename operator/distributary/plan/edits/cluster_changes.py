"""What applying a pipeline's files would do to what a cluster runs: `plan --against-cluster`.

The "before" is what the API server holds, read as the controllers read it
(`view_plan.namespace_pipeline`): a view's output Log is the view's child, taken out of the graph,
but its status, which names the topic readers read, is kept for the views that read it. Each view
and job of the files is classified against the cluster's spec, as the operator classifies the
edit that replaces that spec, and then set against what the cluster's status says runs: a view's
`servingRevision` and `revisions[]` (with their spec hashes), a job's `revision` and `specHash`.
So the report can say that revision N serves and a reprocess starts revision N+1, that an edit
only undoes a catch-up under way, or that the cluster's spec is itself an edit that does not run.

A reprocessed view's output moves to a new topic when its new revision cuts over, and the views
reading it then see a new input and reprocess in turn. Views are taken in the files' order with
each output's topic as it will be served, so that cascade shows too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from distributary.api.log import Log, LogStatus
from distributary.api.view import DerivedView
from distributary.graph import Pipeline, Ref
from distributary.plan.edits.file_changes import LogDifference, PlannedChange, log_differences
from distributary.plan.pipelines.pipeline import job_revision_hash, revision_topic
from distributary.plan.revisions.classify import (
    ChangeKind,
    Classification,
    classify_job_change,
    classify_view_change,
    revision_hash,
    view_definition,
)
from distributary.plan.revisions.lifecycle import CATCHING_UP, SERVING
from distributary.plan.views.view_plan import namespace_pipeline, serving_log

Body = Mapping[str, Any]


@dataclass(frozen=True)
class NamespaceResources:
    """One namespace's Logs (views' children included), DerivedViews and StreamJobs, as the API
    server returns them."""

    logs: tuple[Body, ...] = ()
    views: tuple[Body, ...] = ()
    jobs: tuple[Body, ...] = ()


@dataclass(frozen=True)
class ClusterPipeline:
    """One namespace as the cluster holds it: the graph, the child Logs' statuses by name, each
    view's and job's status, and the specs that do not parse (by name, with the message)."""

    pipeline: Pipeline
    children: dict[str, LogStatus]
    statuses: dict[Ref, dict[str, Any]]
    invalid: dict[str, str]


@dataclass(frozen=True)
class ClusterComparison:
    """Views and jobs that change (new, only in the cluster, or classified), those that do
    not (with their revision), and the declared Logs that differ."""

    changes: tuple[PlannedChange, ...]
    unchanged: tuple[PlannedChange, ...]
    logs: tuple[LogDifference, ...]


def cluster_pipeline(resources: NamespaceResources) -> ClusterPipeline:
    """The "before" of one namespace, built from its resources as the API server has them."""
    pipeline, children, invalid = namespace_pipeline(
        resources.logs, [*resources.views, *resources.jobs]
    )
    statuses: dict[Ref, dict[str, Any]] = {}
    for body in (*resources.views, *resources.jobs):
        meta = body.get("metadata") or {}
        ref = Ref(
            str(body.get("kind")), str(meta.get("namespace") or "default"), str(meta.get("name"))
        )
        statuses[ref] = dict(body.get("status") or {})
    return ClusterPipeline(pipeline, children, statuses, invalid)


def cluster_changes(
    after: Pipeline, cluster: Mapping[str, NamespaceResources]
) -> ClusterComparison:
    """How applying the files' pipeline `after` changes what `cluster` (by namespace) holds: its
    views and jobs in `after`'s order, then those only in the cluster; and its declared Logs."""
    changed: list[PlannedChange] = []
    unchanged: list[PlannedChange] = []
    logs: list[LogDifference] = []
    for namespace in sorted({r.namespace for r in after.order} | set(cluster)):
        before = cluster_pipeline(cluster.get(namespace, NamespaceResources()))
        walk = _Walk(after, before)
        for ref in after.order:
            if ref.namespace != namespace or ref.kind == "Log":
                continue
            change = walk.view(ref) if ref in after.views else walk.job(ref)
            (changed if change.reasons or change.kind in ("New", "Removed") else unchanged).append(
                change
            )
        changed += _only_in_cluster(after, before)
        logs += log_differences(after, before.pipeline, namespace)
    return ClusterComparison(tuple(changed), tuple(unchanged), tuple(logs))


@dataclass(frozen=True)
class _Revisions:
    """A view's revisions as its status records them."""

    serving: int | None = None
    serving_hash: str | None = None
    catching: int | None = None
    catching_hash: str | None = None
    next: int = 1  # the number a new revision gets
    live: frozenset[str] = frozenset()
    last_change: str | None = None  # status.lastChange.classification

    @classmethod
    def of(cls, status: Mapping[str, Any]) -> _Revisions:
        rows = [r for r in status.get("revisions") or [] if isinstance(r, Mapping)]
        if not rows:
            return cls()
        serving = max(
            (r for r in rows if r.get("phase") in (SERVING, "Pending")),
            key=lambda r: int(r["revision"]),
            default=None,
        )
        catching = next((r for r in rows if r.get("phase") == CATCHING_UP), None)
        return cls(
            serving=int(serving["revision"]) if serving else None,
            serving_hash=serving.get("specHash") if serving else None,
            catching=int(catching["revision"]) if catching else None,
            catching_hash=catching.get("specHash") if catching else None,
            next=max(int(r["revision"]) for r in rows) + 1,
            live=frozenset(str(r.get("specHash")) for r in (serving, catching) if r),
            last_change=(status.get("lastChange") or {}).get("classification"),
        )

    def describe(self) -> str:
        if self.serving is None:
            return "cluster: no revision recorded yet (the operator has not started it)"
        text = f"cluster: revision {self.serving} serves ({self.serving_hash})"
        if self.catching is not None:
            text += f", revision {self.catching} is catching up ({self.catching_hash})"
        return text


@dataclass
class _Walk:
    """The views and jobs of one namespace, in order; `served` holds each view output's topic
    as readers will read it once the changes seen so far are carried out."""

    after: Pipeline
    before: ClusterPipeline
    served: dict[str, LogStatus] = field(default_factory=dict)
    moved: dict[str, tuple[Ref, int]] = field(default_factory=dict)  # output -> (view, revision)

    def __post_init__(self) -> None:
        self.served = dict(self.before.children)

    def view(self, ref: Ref) -> PlannedChange:
        new = self.after.views[ref]
        old = self.before.pipeline.views.get(ref)
        revisions = _Revisions.of(self.before.statuses.get(ref, {}))
        if old is None:
            if ref.name in self.before.invalid and revisions.serving is not None:
                why = f"the cluster's spec does not parse ({self.before.invalid[ref.name]})"
                found = Classification("Reprocess", (f"{why}: the files' definition is new",))
                return self._moved(ref, _reprocess(ref, found, revisions))
            return self._moved(ref, PlannedChange(ref, "New", starts=1))
        before_inputs = _inputs(self.before.pipeline, ref, self.before.children)
        after_inputs = _inputs(self.after, ref, self.served)
        base = _classified(old, new, before_inputs, after_inputs)
        old_hash, new_hash = _hash(old, before_inputs), _hash(new, after_inputs)
        change = _against_revisions(ref, new, base, old_hash, new_hash, revisions)
        upstream = [
            self.moved[log.metadata.name]
            for log in self.after.inputs(ref).values()
            if log.metadata.name in self.moved
        ]
        if upstream and change.starts is not None:
            # The edit alone, with the inputs served now: does it start a revision of its own?
            now = _inputs(self.after, ref, self.before.children)
            own = _against_revisions(ref, new, _classified(old, new, before_inputs, now),
                                     old_hash, _hash(new, now), revisions)  # fmt: skip
            change = _cascade(change, upstream, own.starts is not None)
        return self._moved(ref, change)

    def _moved(self, ref: Ref, change: PlannedChange) -> PlannedChange:
        """Record where the view's output will be served when `change` starts a revision."""
        output = self.after.output(ref)
        if output is not None and change.starts is not None:
            topic = revision_topic(output, change.starts)
            self.served[output.metadata.name] = LogStatus.model_validate({"topicName": topic})
            self.moved[output.metadata.name] = (ref, change.starts)
        return change

    def job(self, ref: Ref) -> PlannedChange:
        new = self.after.jobs[ref]
        old = self.before.pipeline.jobs.get(ref)
        status = self.before.statuses.get(ref, {})
        running = int(status.get("revision") or 0) or None
        known = status.get("specHash")
        if old is None or running is None:
            if old is None:
                return PlannedChange(ref, "New", starts=1)
            found = classify_job_change(old, new)
            note = "cluster: no revision recorded yet (the operator has not started it)"
            return PlannedChange(ref, found.kind, found.reasons, notes=(note,))
        found = classify_job_change(old, new)
        new_hash, old_hash = job_revision_hash(new.spec), job_revision_hash(old.spec)
        notes = [f"cluster: revision {running} runs ({known})"]
        if new_hash == known and old_hash != known:
            undo = f"the files' spec is the one revision {running} runs: the cluster's edit, "
            found = Classification("Ignore", (undo + "which does not run, is undone",))
        elif found.kind == "Reprocess" and new_hash == known:
            # What the job runs is unchanged (e.g. only its resources): the revision stays.
            found = Classification("RestartInPlace", found.reasons)
        elif old_hash != known and new_hash != known:
            notes.append(
                f"cluster: its spec is not the one revision {running} runs (an edit that was "
                "refused); the change is classified against that spec"
            )
        starts = running + 1 if found.kind == "Reprocess" else None
        then = {
            "Reprocess": f"then: revision {starts} starts on a fresh checkpoint; {running} stops",
            "RestartInPlace": f"then: revision {running} restarts from its checkpoint",
            "Forbidden": f"then: refused; revision {running} keeps running",
        }
        if found.reasons and found.kind in then:
            notes.append(then[found.kind])
        return PlannedChange(ref, found.kind, found.reasons, running, starts, tuple(notes))


def _classified(
    old: DerivedView, new: DerivedView, before: Mapping[str, Log], after: Mapping[str, Log]
) -> Classification:
    try:
        return classify_view_change(old, new, before, after)
    except ValueError as exc:  # SqlError too: the cluster's spec no longer plans
        return Classification("Reprocess", (f"the cluster's definition: {exc}",))


def _cascade(
    change: PlannedChange, upstream: list[tuple[Ref, int]], own_revision: bool
) -> PlannedChange:
    """`change` of a view whose inputs move to new topics when upstream views cut over: it
    reprocesses then, after the revision its own edit starts now (`own_revision`), if any."""
    assert change.starts is not None
    once = " and ".join(f"{up.kind} {up.name} cuts over to revision {r}" for up, r in upstream)
    starts, serving = change.starts, change.revision
    if own_revision:
        then = (
            f"then: revision {starts} reprocesses beside revision {serving} now, and once "
            f"{once} (a new input topic), revision {starts + 1} does"
        )
        starts += 1
    else:
        then = (
            f"then: once {once} (a new input topic), revision {starts} reprocesses beside "
            f"revision {serving}, which serves until it has caught up"
        )
    notes = (*change.notes[:1], then)
    return PlannedChange(change.ref, change.kind, change.reasons, serving, starts, notes)


def _inputs(pipeline: Pipeline, ref: Ref, served: Mapping[str, LogStatus]) -> dict[str, Log]:
    """A view's inputs by alias as it reads them: a view's output at the topic it serves (as
    it is declared while it has none)."""
    return {
        alias: serving_log(log, served, pipeline) or log
        for alias, log in pipeline.inputs(ref).items()
    }


def _hash(view: DerivedView, inputs: Mapping[str, Log]) -> str | None:
    try:
        return revision_hash(view_definition(view, inputs))
    except ValueError:  # SqlError too
        return None


def _against_revisions(
    ref: Ref,
    view: DerivedView,
    base: Classification,
    old_hash: str | None,
    new_hash: str | None,
    revisions: _Revisions,
) -> PlannedChange:
    """The classification `base` (the cluster's spec to the files') set against the revisions
    that run, as the operator decides: a definition a live revision already has starts nothing,
    and an edit from a spec that does not run is reprocessed whatever it changes."""
    serving = revisions.serving
    if serving is None:
        return PlannedChange(ref, base.kind, base.reasons, notes=(revisions.describe(),))
    live = (revisions.serving_hash, revisions.catching_hash)
    if new_hash is not None and new_hash in live and old_hash != new_hash:
        # The cluster's spec is an edit the files undo: a live revision has their definition.
        which = serving if new_hash == revisions.serving_hash else revisions.catching
        state = "serves" if which == serving else "is catching up"
        retires = which == serving and revisions.catching is not None
        base = Classification(
            "Ignore",
            (f"the definition is revision {which}'s, which {state}: the cluster's edit is undone"
             + (f" and revision {revisions.catching}'s catch-up retires" if retires else ""),),
        )  # fmt: skip
    elif old_hash is not None and old_hash == new_hash and old_hash not in revisions.live:
        why = (
            f"the files repeat the cluster's definition, which does not run (last classified "
            f"{revisions.last_change or 'not yet'}): applying them changes nothing"
        )
        base = Classification("Ignore", (why, *base.reasons))
    elif old_hash is None or old_hash not in revisions.live:
        why = (
            "the cluster's spec is not what runs (its definition is no live revision's, e.g. an "
            "edit that was refused): the operator reprocesses any new definition"
        )
        if view.spec.upgrade.strategy == "InPlace":
            why += "; upgrade.strategy InPlace refuses that: set it to Reprocess or Auto"
            return _refused(ref, Classification("Forbidden", (why, *base.reasons)), revisions)
        kind: ChangeKind = "Forbidden" if base.kind == "Forbidden" else "Reprocess"
        base = Classification(kind, (why, *base.reasons))
    if base.kind == "Reprocess":
        return _reprocess(ref, base, revisions)
    if base.kind == "Forbidden":
        return _refused(ref, base, revisions)
    then = {"RestartInPlace": f"then: revision {serving} restarts from its checkpoint"}
    notes = (revisions.describe(), then.get(base.kind, f"then: revision {serving} keeps serving"))
    return PlannedChange(ref, base.kind, base.reasons, serving, notes=notes)


def _reprocess(ref: Ref, change: Classification, revisions: _Revisions) -> PlannedChange:
    start = revisions.next
    then = (
        f"then: revision {start} reprocesses beside revision {revisions.serving}, which serves "
        "until it has caught up"
    )
    if revisions.catching is not None:
        then += f"; revision {revisions.catching}'s catch-up is superseded and retires"
    notes = (revisions.describe(), then)
    return PlannedChange(ref, change.kind, change.reasons, revisions.serving, start, notes)


def _refused(ref: Ref, change: Classification, revisions: _Revisions) -> PlannedChange:
    then = f"then: refused; revision {revisions.serving} keeps serving"
    notes = (revisions.describe(), then)
    return PlannedChange(ref, change.kind, change.reasons, revisions.serving, notes=notes)


def _only_in_cluster(after: Pipeline, before: ClusterPipeline) -> list[PlannedChange]:
    found = []
    for ref in [*before.pipeline.views, *before.pipeline.jobs]:
        if ref in after.views or ref in after.jobs:
            continue
        status = before.statuses.get(ref, {})
        if ref.kind == "DerivedView":
            revisions = _Revisions.of(status)
            found.append(PlannedChange(ref, "Removed", revision=revisions.serving,
                                       notes=(revisions.describe(),)))  # fmt: skip
        else:
            running = int(status.get("revision") or 0) or None
            note = f"cluster: revision {running} runs" if running else "cluster: not started"
            found.append(PlannedChange(ref, "Removed", revision=running, notes=(note,)))
    return found
