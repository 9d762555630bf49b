"""One DerivedView in its namespace: what to create for it, or why it cannot run.

The front end hands over the Logs, views and jobs of the view's lineage (as the API server, or the
pipeline files, have them); the same graph that `distributary validate` builds from files checks
them here, so a missing input, a cycle across several views or SQL that uses an undeclared column is
found the same way in both places and reported on the view that has it. A view's output Log exists
in the API as the view's child; it is taken out of the graph (the graph derives it again from the
view) but its status, which names the topic it serves, is kept for the views that read it.

Revision 1 starts when a view has no revision yet. A later change of what determines the output
(a new hash) goes through the revision lifecycle (`plan.revisions.lifecycle`) as its classification
and the view's upgrade strategy say: restarted in place, reprocessed as a new revision beside the
serving one (which keeps serving until the new one has caught up), or refused with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from distributary.api import ResourceError, owner_of, parse_resource
from distributary.api.log import Log, LogStatus, log_manifest
from distributary.api.view import DerivedView, Revision, Upgrade
from distributary.graph import Pipeline, Ref
from distributary.plan.access.kafka_connection import KafkaSecurity
from distributary.plan.applications.children import with_checkpoint
from distributary.plan.applications.runner_spec import (
    RunnerSpec,
    StartingPosition,
    consumer_group,
    keeps_state,
    view_runner_spec,
)
from distributary.plan.applications.spark import owner_reference
from distributary.plan.kafka_topics.topics import DesiredTopic, dead_letter_desired, desired_topic
from distributary.plan.pipelines.pipeline import SOURCE_LABEL, revision_topic, view_output_metadata
from distributary.plan.pipelines.pipeline import VIEW_LABEL as VIEW_LABEL
from distributary.plan.revisions.classify import (
    Classification,
    classify_view_change,
    revision_hash,
    view_definition,
)
from distributary.plan.revisions.lifecycle import (
    CATCHING_UP,
    LIVE,
    Lifecycle,
    Rebuild,
    revisions_of,
    step,
)
from distributary.plan.status.conditions import Problem, Work

SERVING_ANNOTATION = "distributary.dev/serving-revision"
LATEST_ANNOTATION = "distributary.dev/latest-revision"  # the newest, e.g. one catching up
CATCH_UP_BATCH = 250_000  # records per micro-batch of a reprocessing revision, unless set


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


def planning_bodies(
    logs: Iterable[Mapping[str, Any]],
    writers: Iterable[Mapping[str, Any]],
    start: Mapping[str, Any],
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """The Logs, and the views and jobs (`start` among them), that planning `start` depends on:
    everything upstream of it, and whatever else claims a log it or they write.

    A view's or job's problems (a missing input, a cycle through it, its SQL against its
    inputs' schemas, an output another resource declares or writes) are all found in that part
    of its namespace, so it is checked there rather than in the whole namespace's graph: a
    reconcile then costs what the view's own lineage costs, not what a namespace of a thousand
    Logs does."""
    start_key = (start.get("kind"), _name(start))
    others = [w for w in writers if (w.get("kind"), _name(w)) != start_key]
    by_output: dict[str, list[Mapping[str, Any]]] = {}
    for body in [start, *others]:
        for name in _named_logs(body, "outputs"):
            by_output.setdefault(name, []).append(body)
    named: set[str] = set()
    chosen: dict[int, Mapping[str, Any]] = {}
    queue = [start]
    while queue:
        body = queue.pop()
        if id(body) in chosen:
            continue
        chosen[id(body)] = body
        for name in _named_logs(body, "inputs") + _named_logs(body, "outputs"):
            named.add(name)
            queue.extend(w for w in by_output.get(name, ()) if id(w) not in chosen)
    # One pass over the namespace's Logs, which may be thousands, for the few named.
    chosen_logs = [log for log in logs if str((log.get("metadata") or {}).get("name")) in named]
    return chosen_logs, list(chosen.values())


def reprocessing_outputs(bodies: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The output Logs of the views among `bodies` that have a revision catching up (or may be
    about to: `_unsettled`), and of the views downstream of one (they reprocess in turn once it
    cuts over): their readers wait for the cutover before they start a revision of their own,
    which would otherwise read the old revision's topic with the new one's schema."""
    views = [body for body in bodies if body.get("kind") == "DerivedView"]
    found: set[str] = set()
    for body in views:
        if _unsettled(body):
            found.update(_named_logs(body, "outputs"))
    grown = True
    while grown:  # a reader of a reprocessing output reprocesses after its cutover
        grown = False
        for body in views:
            outputs = set(_named_logs(body, "outputs"))
            if not outputs <= found and found & set(_named_logs(body, "inputs")):
                found |= outputs
                grown = True
    return frozenset(found)


def _unsettled(body: Mapping[str, Any]) -> bool:
    """Whether a view that already serves has a revision catching up, or an edit whose outcome
    its status does not show yet: a spec its reconcile has not handled (`observedGeneration`
    behind `generation`) or a change still being classified. Either may start a reprocess, so a
    reader that started its own new revision now could read the topic about to be replaced."""
    status = body.get("status") or {}
    rows = status.get("revisions") or []
    if any(isinstance(r, Mapping) and r.get("phase") == CATCHING_UP for r in rows):
        return True
    if not rows:
        return False  # a new view: its readers wait for its topic anyway
    generation = (body.get("metadata") or {}).get("generation")
    if generation is not None and status.get("observedGeneration") != generation:
        return True
    conditions = status.get("conditions") or []
    return any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("reason") == "ChangePending"
        for c in conditions
    )


def _name(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("name"))


def _named_logs(body: Mapping[str, Any], which: str) -> list[str]:
    """The log names a view's or job's spec reads (`inputs`) or writes (`outputs`), as far as
    the spec can be read (a malformed one names fewer: the graph reports it)."""
    spec = body.get("spec")
    if not isinstance(spec, Mapping):
        return []
    if which == "outputs" and body.get("kind") == "DerivedView":
        output = spec.get("output")
        named = output.get("log") if isinstance(output, Mapping) else None
        return [str(named or _name(body))]
    items = spec.get(which)
    if not isinstance(items, list):
        return []
    return [str(i["log"]) for i in items if isinstance(i, Mapping) and i.get("log")]


def namespace_pipeline(
    logs: Iterable[Mapping[str, Any]],
    views: Iterable[Mapping[str, Any]],
    *,
    allowed_functions: frozenset[str] = frozenset(),
) -> tuple[Pipeline, dict[str, LogStatus], dict[str, str]]:
    """The graph of a namespace's resources, the child Logs' statuses by name, and the views
    whose spec does not even parse, with the message. Views may call the unsafe SQL functions
    in `allowed_functions` (the operator's setting), no others.

    Building it is the costly part of planning a view (every Log's schema and every view's SQL
    are analysed), and each view is planned against its whole namespace: so the last graph
    built is kept, and given again for the same resources at the same resourceVersions in any
    order, as when the observer plans every view of a namespace from one listing. Callers on
    several threads share it: the slot is read and replaced whole, never changed in place."""
    logs, views = list(logs), list(views)
    key = (_versions(logs), _versions(views), allowed_functions)
    last = _last_built[0]
    if last is not None and last[0] == key:
        pipeline, children, invalid = last[1]
    else:
        pipeline, children, invalid = _build_pipeline(logs, views, allowed_functions)
        known = key[0] is not None and key[1] is not None  # bodies from files have no version
        _last_built[0] = (key, (pipeline, children, invalid)) if known else None
    return pipeline, dict(children), dict(invalid)


_Built = tuple[Pipeline, dict[str, LogStatus], dict[str, str]]
_Versions = frozenset[tuple[str, str, str, str]] | None
_BuiltFrom = tuple[_Versions, _Versions, frozenset[str]]
_last_built: list[tuple[_BuiltFrom, _Built] | None] = [None]  # one slot


def _versions(bodies: list[Mapping[str, Any]]) -> _Versions:
    """What identifies the bodies' contents on one API server: each one's kind, namespace, name
    and resourceVersion. None when a body has no resourceVersion (never kept, never reused)."""
    found = set()
    for body in bodies:
        meta = body.get("metadata") or {}
        if not meta.get("resourceVersion"):
            return None
        found.add(
            (str(body.get("kind")), str(meta.get("namespace")), str(meta.get("name")),
             str(meta["resourceVersion"]))
        )  # fmt: skip
    return frozenset(found)


def _build_pipeline(
    logs: list[Mapping[str, Any]], views: list[Mapping[str, Any]], allowed: frozenset[str]
) -> _Built:
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
    return Pipeline.build(resources, allowed_functions=allowed), children, invalid


@dataclass(frozen=True)
class ViewPlan:
    """What one reconcile of a view should do. Nothing to run when `problems` or `waiting`.

    `revision` is the serving revision; `runner` runs the definition the spec asks for now, as
    revision `runner.revision` (the serving one, or one catching up beside it); `lifecycle` holds
    every revision's row and what follows from them (revisions to stop, topics to delete)."""

    revision: int
    problems: tuple[Problem, ...] = ()
    waiting: tuple[Work, ...] = ()
    spec_hash: str | None = None
    output_log: dict[str, Any] | None = None
    topics: tuple[DesiredTopic, ...] = ()  # the running revision's output topic, the dead letters
    runner: RunnerSpec | None = None
    starts: bool = False
    lifecycle: Lifecycle | None = None
    upgrade: Upgrade | None = None  # what keeping up means (the cutover's window and margin)
    tables: frozenset[str] = frozenset()  # the inputs that are a Source's table Logs


def _after_upstream(
    revision: int,
    rows: tuple[Revision, ...],
    spec_hash: str,
    change: Classification | None,
    upstream: list[str],
) -> ViewPlan:
    """The plan of a view whose new revision waits for an upstream cutover: the revisions as
    they are (the serving one runs on), the change's classification kept for when it starts."""
    waiting = Work(
        "WaitingForUpstream",
        f"input {', '.join(upstream)} is being reprocessed by its view (or will be, once a "
        "view upstream of it cuts over); this view's new revision starts once it serves (it "
        "then reads the new revision's topic)",
    )
    unchanged = Lifecycle(revision, rows, current=None, change=change)
    return ViewPlan(revision, waiting=(waiting,), spec_hash=spec_hash, lifecycle=unchanged)


def partitions_lowered(output: Log, child: LogStatus | None) -> Problem | None:
    """A refusal when the view's output asks for fewer partitions than its topic has: Kafka
    cannot remove partitions, and applying it would fail."""
    have = child.partitions if child is not None else None
    want = output.spec.partitions
    if have is None or want >= have:
        return None
    return Problem(
        "PartitionsLowered",
        f"spec.output.partitions: {want} is fewer than the {have} partitions the output topic "
        f"has, and Kafka cannot remove partitions; set it to {have} or more (or leave it unset "
        "if the inputs have as many), or create a new view to shrink it",
    )


def is_table_log(log: Log, pipeline: Pipeline) -> bool:
    """Whether `log` is a Source's table Log: derived from a Source in the pipeline (`distributary
    run`), or made by one and labelled so (the operator's)."""
    return pipeline.is_captured(log) or SOURCE_LABEL in log.metadata.labels


def serving_log(log: Log, children: Mapping[str, LogStatus], pipeline: Pipeline) -> Log | None:
    """An input as its readers see it: a view's output Log with the topic it serves (None while
    the upstream view has not started, so there is no topic to read yet); a Source's table Log
    with the topic of the revision serving when one is known (a re-snapshot's, after its
    cutover), else its own."""
    status = children.get(log.metadata.name)
    if not pipeline.is_derived(log):
        if pipeline.is_captured(log) and status is not None and status.topic_name:
            return log.model_copy(update={"status": status})
        return log
    if status is None or not status.topic_name:
        return None
    return log.model_copy(update={"status": status})


def _output_manifest(
    view: DerivedView, output: Log, revision: int, latest: int | None = None
) -> dict[str, Any]:
    owner = owner_reference(owner_of(view))
    marks = view_output_metadata(view.metadata.name)
    return log_manifest(
        output.metadata.name,
        view.metadata.namespace,
        output.spec,
        labels=marks["labels"],
        annotations={
            **marks.get("annotations", {}),
            SERVING_ANNOTATION: str(revision),
            LATEST_ANNOTATION: str(max(latest or revision, revision)),
        },
        ownerReferences=[owner],
    )


def input_change(previous: Mapping[str, Any] | None, generation: int) -> Classification | None:
    """How an unclassified change of the definition is carried out: as status recorded for this
    generation (an edit classified when it was handled, e.g. refused); else, when the spec has
    not changed since status was last written, what changed is an input's serving topic (an
    upstream view cut over), which is reprocessed; otherwise the edit awaits its
    classification."""
    recorded = (previous or {}).get("lastChange") or {}
    if recorded.get("generation") == generation and recorded.get("classification"):
        return Classification(recorded["classification"], tuple(recorded.get("reasons") or ()))
    observed = int((previous or {}).get("observedGeneration") or 0)
    if not observed or observed != generation:
        return None
    reason = "an input's serving topic changed (an upstream view cut over to a new revision)"
    return Classification("Reprocess", (reason,))


def edit_change(
    old: DerivedView,
    new: DerivedView,
    inputs: Mapping[str, Log],
    pipeline: Pipeline,
    children: Mapping[str, LogStatus],
    running: set[Any],
) -> Classification:
    """How an edit from `old` to `new` is carried out: classified field by field when `old` is
    what runs (its hash is a live revision's), else reprocessed, which is right for any edit."""
    before: dict[str, Log] = {}
    for item in old.spec.inputs:
        log = pipeline.logs.get(Ref.log(item.log, old.metadata.namespace))
        seen = serving_log(log, children, pipeline) if log is not None else None
        if seen is not None:
            before[item.alias] = seen
    try:
        if revision_hash(view_definition(old, before)) in running:
            return classify_view_change(old, new, before, inputs)
    except ValueError:  # SqlError too: an old spec that no longer parses
        pass
    reason = "the definition changed from one that does not run (an edit that was refused)"
    return Classification("Reprocess", (reason,))


def plan_view(
    pipeline: Pipeline,
    children: Mapping[str, LogStatus],
    view: DerivedView,
    previous: Mapping[str, Any] | None,
    *,
    checkpoint_root: str,
    bootstrap_servers: str,
    kafka_security: KafkaSecurity | None = None,
    change: Classification | None = None,
    generation: int = 0,
    now: datetime | None = None,
    edited_from: DerivedView | None = None,
    history_lost: str | None = None,
    upstream_reprocessing: frozenset[str] = frozenset(),
    first_revision: int = 1,
) -> ViewPlan:
    """The plan of `view` (checked in `pipeline`) at `generation`, given its previous status.
    A change of its definition is carried out as `change` says; for an edit from the spec
    `edited_from` it is classified here (`plan.revisions.classify.classify_view_change`). A
    reprocess is refused when `history_lost` says the inputs' history is incomplete (`lost_history`)
    and the spec does not allow partial history. A new revision waits while a view whose output it
    reads has one catching up (`upstream_reprocessing`: those outputs), until its cutover. A new
    view's first revision is `first_revision`."""
    ref = Ref.of(view)
    before = dict(previous or {})
    serving = int(before.get("servingRevision") or 0)
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
    rows = revisions_of(before.get("revisions") or [])
    lowered = partitions_lowered(output, children.get(output.metadata.name))
    if lowered is not None and rows:
        # Refused before anything moves: the revisions and the output Log stay as they are.
        unchanged = Lifecycle(revision, rows, current=None, problem=lowered)
        return ViewPlan(revision, problems=(lowered,), spec_hash=spec_hash, lifecycle=unchanged)
    known = {r.spec_hash for r in rows if r.phase in ("Pending", *LIVE)}
    if rows and spec_hash not in known and change is None:
        change = (
            edit_change(edited_from, view, inputs, pipeline, children, known)
            if edited_from is not None
            else input_change(previous, generation)
        )
    lifecycle = step(
        rows,
        spec_hash=spec_hash,
        change=change,
        upgrade=view.spec.upgrade,
        lags={r.revision: r.lag for r in rows},
        now=now or datetime.now(UTC),
        topic_of=lambda r: revision_topic(output, r),
        group_of=lambda r: consumer_group(view.metadata.namespace, view.metadata.name, r),
        delete_retired=output.spec.deletion_policy == "Delete",
        history_lost=history_lost,
        rebuild=_rewind_rebuild(view, before),
        first=first_revision,
    )
    upstream = sorted({log.metadata.name for log in inputs.values()} & upstream_reprocessing)
    if lifecycle.started is not None and lifecycle.beside(lifecycle.started) and upstream:
        return _after_upstream(revision, rows, spec_hash, lifecycle.change, upstream)
    plan = ViewPlan(
        lifecycle.serving,
        problems=(lifecycle.problem,) if lifecycle.problem else (),
        spec_hash=spec_hash,
        output_log=_output_manifest(
            view, output, lifecycle.serving, max(r.revision for r in lifecycle.rows)
        ),
        lifecycle=lifecycle,
        upgrade=view.spec.upgrade,
        tables=frozenset(
            log.metadata.name for log in inputs.values() if is_table_log(log, pipeline)
        ),
    )
    if lifecycle.current is None:
        if lifecycle.problem is None:
            pending = Work("ChangePending", "the spec changed; its change is being classified")
            return replace(plan, waiting=(pending,))
        return plan
    current = lifecycle.current
    # A reprocessing revision reads its inputs' retained history from the start.
    fresh = (
        {a: StartingPosition(kind="earliest") for a in inputs}
        if lifecycle.beside(current)
        else None
    )
    runner = view_runner_spec(
        view,
        inputs,
        output,
        revision=current,
        spec_hash=spec_hash,
        output_topic=revision_topic(output, current),
        checkpoint_root=checkpoint_root,
        bootstrap_servers=bootstrap_servers,
        starting_positions=fresh,
        kafka_security=kafka_security,
    )
    if fresh is not None and runner.max_offsets_per_trigger is None:
        # Read in bounded batches, so that each commits and its progress shows as it goes.
        runner = runner.model_copy(update={"max_offsets_per_trigger": CATCH_UP_BATCH})
    row = lifecycle.row(current)
    runner = with_checkpoint(runner, row.checkpoint if row is not None else None)
    return replace(
        plan,
        topics=(
            desired_topic(output, topic=revision_topic(output, current)),
            # As many partitions as the output, but never compacted: a dead letter may have
            # no key. Kept as long as the view's spec.deadLetters says.
            dead_letter_desired(runner.dead_letter_topic, output, view.spec.dead_letters),
        ),
        runner=runner,
        starts=lifecycle.started is not None,
    )


def first_revision(
    view: DerivedView, output: Log, topics: Collection[str], groups: Collection[str]
) -> int:
    """The number of a new view's first revision: past every revision whose topic or consumer
    group an earlier view of the same name left behind, so that a view deleted and created
    again never appends to the old one's topic or resumes from its group."""
    ns, name = view.metadata.namespace, view.metadata.name
    taken = [0]
    for topic in topics:
        prefix = f"{output.topic}.r"
        if topic.startswith(prefix) and topic[len(prefix) :].isdigit():
            taken.append(int(topic[len(prefix) :]))
    prefix = consumer_group(ns, name, 0)[:-1]
    for group in groups:
        if group.startswith(prefix) and group[len(prefix) :].isdigit():
            taken.append(int(group[len(prefix) :]))
    return max(taken) + 1


def _rewind_rebuild(view: DerivedView, previous: Mapping[str, Any]) -> Rebuild | None:
    """ "Rewind" when the spec asks for a rewind not carried out yet of a view that keeps
    state: moving its position would resume it on empty state, so it is rebuilt instead."""
    rewind = view.spec.rewind
    last = previous.get("lastRewind") or {}
    if rewind is None or last.get("requestId") == rewind.request_id:
        return None
    return "Rewind" if keeps_state(view.spec.sql) else None


LostHistory = Callable[[Mapping[str, str], Collection[str]], str | None]
"""Why some input topics (topic -> log) no longer hold their whole history, None if they do
(`kafka.history.lost_input_history`); the second argument names the Logs that are a Source's
tables (their topics are written in transactions, whose markers read as compaction's gaps, and
begin with a snapshot: only retention is checked there)."""


def history_guard(
    plan: ViewPlan, planned: Callable[..., ViewPlan], lost_history_of: LostHistory | None
) -> ViewPlan:
    """`plan`, or, when the reprocessing revision it would start reads an input whose history
    retention or compaction removed, the view planned again with that history lost
    (`planned(history_lost=)`: refused unless the spec allows partial history). The operator's
    retention guard."""
    runner, lifecycle = plan.runner, plan.lifecycle
    if lost_history_of is None or not plan.starts or runner is None or lifecycle is None:
        return plan
    if not lifecycle.beside(runner.revision):  # a view's first revision reprocesses nothing
        return plan
    lost = lost_history_of({source.topic: source.log for source in runner.inputs}, plan.tables)
    return plan if lost is None else planned(history_lost=lost)


def _taken(view: DerivedView) -> str:
    return (
        f"spec.output.log: the Log {view.output_log!r} is declared elsewhere or written by "
        "another view; give this view's output another name"
    )
