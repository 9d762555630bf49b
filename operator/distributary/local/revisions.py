"""Revisions in `distributary run`: the operator's reprocessing, on one machine.

A view's revisions live in `<state dir>/revisions.json` as they live in a view's status under
the operator: the lifecycle's rows (`plan.lifecycle`), the spec the view last ran with, and the
runner spec of each revision that may run. Each time the pipeline is planned, every view goes
through the same planner as under the operator (`plan.view_plan.plan_view`), in the pipeline's
order, each reading its inputs at the topics their views serve: a view whose SQL changed since
the last run starts revision N+1 beside N; once N+1 has caught up it serves, N stops, and the
views that read its output reprocess in turn.

The operator's retention guard holds here too: before a reprocessing revision starts, its
inputs' history is checked (`kafka.history.lost_input_history`: a partition that no longer
starts at 0, a compacted one with records removed), and when some is lost the view is planned
again with the history it lost, which refuses the reprocess unless the spec allows partial
history. A refused change is recorded in the view's `status.problem`, and the serving revision
runs on from its recorded spec. The rewinds carried out (`local.rewinds`) are kept in
`status.rewinds`.

    {"views": {"default/enriched": {"view": {...spec...}, "status": {"servingRevision": 1,
      "revisions": [...]}, "specs": {"1": {...runner spec...}}}}}
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from distributary.api.log import LogStatus
from distributary.api.view import DerivedView
from distributary.graph import Pipeline, Ref
from distributary.plan.lifecycle import CATCHING_UP, LIVE, mark_deleted
from distributary.plan.runner_spec import RunnerSpec
from distributary.plan.view_plan import ViewPlan, plan_view

REVISIONS_FILE = "revisions.json"


def view_key(ref: Ref) -> str:
    """The key of a view in the file: `namespace/name`."""
    return f"{ref.namespace}/{ref.name}"


@dataclass
class LocalRevisions:
    """The revisions of every view of a run, kept in the state folder."""

    state_dir: Path
    views: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, state_dir: Path) -> LocalRevisions:
        """The revisions recorded in `state_dir` (none for a first run)."""
        path = state_dir / REVISIONS_FILE
        try:
            data = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            return cls(state_dir)
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"{path} cannot be read ({exc}): delete it to start every view at revision 1 "
                "again (their outputs are recomputed)"
            ) from None
        return cls(state_dir, dict(data.get("views") or {}))

    def save(self) -> None:
        """Write the file atomically (a temporary file renamed over it)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=self.state_dir, prefix=".revisions.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"views": self.views}, out, indent=1, sort_keys=True)
            os.replace(temporary, self.state_dir / REVISIONS_FILE)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def record_lags(self, lags: Mapping[tuple[str, int], int]) -> None:
        """Each running revision's lag (by view name and revision), as the rows carry it."""
        for entry in self.views.values():
            name = entry["view"]["metadata"]["name"]
            for row in entry["status"].get("revisions") or []:
                lag = lags.get((name, int(row["revision"])))
                if lag is not None:
                    row["lag"] = lag

    def topics_deleted(self, name: str, topics: list[str]) -> None:
        """Record that retired topics of view `name` were deleted."""
        for entry in self.views.values():
            if entry["view"]["metadata"]["name"] == name:
                status = entry["status"]
                status["revisions"] = mark_deleted(status.get("revisions") or [], topics)

    def rewinds(self, key: str) -> list[dict[str, Any]]:
        """The rewinds recorded for view `key` (`namespace/name`), oldest first."""
        entry = self.views.get(key) or {}
        return [dict(r) for r in (entry.get("status") or {}).get("rewinds") or []]

    def record_rewind(self, key: str, record: Mapping[str, Any]) -> None:
        """Record rewind `record` of view `key`, in place of an earlier record of its request."""
        status = self.views[key]["status"]
        kept = [r for r in status.get("rewinds") or [] if r["requestId"] != record["requestId"]]
        status["rewinds"] = [*kept, dict(record)]

    def use_checkpoint(self, key: str, revision: int, folder: str) -> None:
        """Make revision `revision` of view `key` checkpoint in `folder` from now on (a fresh
        checkpoint after a rewind), as its row's `checkpoint` says under the operator."""
        status = self.views[key]["status"]
        status["revisions"] = [
            {**row, "checkpoint": folder} if int(row["revision"]) == revision else row
            for row in status.get("revisions") or []
        ]

    def catching_up(self) -> list[str]:
        """The views with a revision catching up."""
        return sorted(
            entry["view"]["metadata"]["name"]
            for entry in self.views.values()
            if any(r.get("phase") == CATCHING_UP for r in entry["status"].get("revisions") or [])
        )


@dataclass(frozen=True)
class LocalPlan:
    """Every view's plan, the runner specs to run, and each log's serving topic."""

    views: dict[str, ViewPlan]
    specs: list[RunnerSpec]
    serving: dict[str, str]  # derived log name -> the topic its view serves


LostHistory = Callable[[Mapping[str, str]], str | None]
"""Why some input topics (topic -> log) no longer hold their whole history, None if they do
(`kafka.history.lost_input_history`)."""


def plan_views(
    pipeline: Pipeline,
    revisions: LocalRevisions,
    *,
    checkpoint_root: str,
    bootstrap_servers: str,
    localize: Any,
    now: datetime | None = None,
    lost_history_of: LostHistory | None = None,
) -> LocalPlan:
    """Plan every view in order, record the outcome in `revisions`, and list the specs to run:
    each view's current revision, and beside a catching-up one, or alone while a change is
    refused, the revision still serving (its recorded spec). `localize(spec)` adds this
    machine's Spark settings; `lost_history_of`, when given, guards reprocessing against lost
    history."""
    moment = now or datetime.now(UTC)
    children: dict[str, LogStatus] = {}
    plans: dict[str, ViewPlan] = {}
    specs: list[RunnerSpec] = []
    serving: dict[str, str] = {}
    for ref in pipeline.order:
        if ref not in pipeline.views:
            continue
        view = pipeline.views[ref]
        entry = revisions.views.get(view_key(ref))
        before = DerivedView.model_validate(entry["view"]) if entry else None
        edited = before if before is not None and before.spec != view.spec else None
        previous = dict(entry["status"]) if entry else None
        if previous is not None:
            previous["observedGeneration"] = 1  # the spec as last run: only inputs may differ
        planned = functools.partial(
            plan_view,
            pipeline,
            children,
            view,
            previous,
            checkpoint_root=checkpoint_root,
            bootstrap_servers=bootstrap_servers,
            generation=1,
            now=moment,
            edited_from=edited,
        )
        plan = history_guard(planned(), planned, lost_history_of)
        plans[ref.name] = plan
        recorded = dict((entry or {}).get("specs") or {})
        running = None
        if plan.runner is not None:
            runner = localize(plan.runner)
            specs.append(runner)
            recorded[str(runner.revision)] = runner.model_dump(mode="json")
            running = runner.revision
        # Beside it, the other live revisions run on from their recorded specs: the serving
        # one, and one catching up while a later edit is refused (it may still cut over).
        rows = plan.lifecycle.rows if plan.lifecycle is not None else ()
        live = {int(r["revision"]) for r in rows if r.get("phase") in LIVE} | {plan.revision}
        for revision in sorted(live - {running}, reverse=True):
            if str(revision) in recorded:
                specs.append(RunnerSpec.model_validate(recorded[str(revision)]))
        if plan.lifecycle is not None:
            row = plan.lifecycle.row(plan.revision) or {}
            output = pipeline.output(ref)
            if output is not None and row.get("topic"):
                serving[output.metadata.name] = str(row["topic"])
                children[output.metadata.name] = LogStatus(topic_name=str(row["topic"]))
            # A refused edit is not what runs: the next run compares with what does.
            ran = view if not plan.problems or before is None else before
            revisions.views[view_key(ref)] = _entry(ran, plan, entry, recorded)
    return LocalPlan(plans, specs, serving)


def history_guard(
    plan: ViewPlan, planned: Callable[..., ViewPlan], lost_history_of: LostHistory | None
) -> ViewPlan:
    """`plan`, or, when the reprocessing revision it would start reads an input whose history
    retention or compaction removed, the view planned again with that history lost
    (`planned(history_lost=)`: refused unless the spec allows partial history). The operator's
    retention guard."""
    runner = plan.runner
    if lost_history_of is None or not plan.starts or runner is None or runner.revision <= 1:
        return plan
    lost = lost_history_of({source.topic: source.log for source in runner.inputs})
    return plan if lost is None else planned(history_lost=lost)


def _entry(
    ran: DerivedView, plan: ViewPlan, entry: Mapping[str, Any] | None, recorded: dict[str, Any]
) -> dict[str, Any]:
    """The view's record in the file after `plan`: the spec that runs, status, live specs."""
    assert plan.lifecycle is not None
    before = dict((entry or {}).get("status") or {})
    status: dict[str, Any] = {
        "servingRevision": plan.revision,
        "revisions": list(plan.lifecycle.rows),
    }
    change = plan.lifecycle.change
    if change is not None:
        status["lastChange"] = {"classification": change.kind, "reasons": change.reasons}
    elif before.get("lastChange"):
        status["lastChange"] = before["lastChange"]
    if plan.problems:
        problem = plan.problems[0]
        status["problem"] = {"reason": problem.reason, "message": problem.message}
    if before.get("rewinds"):
        status["rewinds"] = before["rewinds"]
    live = {str(r["revision"]) for r in plan.lifecycle.rows if r["phase"] != "Retired"}
    return {
        "view": ran.model_dump(mode="json", by_alias=True, exclude_none=True),
        "status": status,
        "specs": {k: v for k, v in recorded.items() if k in live},
    }
