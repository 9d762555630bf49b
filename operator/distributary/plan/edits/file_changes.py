"""What an edit of a pipeline's files does to each view and job: `distributary plan --against`.

Each view or job of the new pipeline is compared with the one of the same name in the previous
files, and its change classified as the operator will (`plan.revisions.classify`): Ignore,
RestartInPlace, Reprocess or Forbidden, with one reason per difference. What the operator then does
follows the resource's upgrade strategy: under `Reprocess`, a view's reprocess runs beside the
serving revision and cuts over once caught up. A declared Log's differences are listed field by
field; the Log controller applies or refuses them (`plan.kafka_topics.topics`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from distributary.api.log import Log
from distributary.graph import Pipeline, Ref
from distributary.plan.revisions.classify import (
    Classification,
    classify_job_change,
    classify_view_change,
)


@dataclass(frozen=True)
class PlannedChange:
    """One view's or job's change: new, removed, or classified."""

    ref: Ref
    kind: str  # "New", "Removed", or a classification's kind
    reasons: tuple[str, ...] = ()
    # Against a cluster (`plan.edits.cluster_changes`): the revision that serves (a view) or runs (a
    # job) there, the revision this change starts, and what the cluster's status says.
    revision: int | None = None
    starts: int | None = None
    notes: tuple[str, ...] = ()


def pipeline_changes(before: Pipeline, after: Pipeline) -> list[PlannedChange]:
    """The changes from `before` to `after`, in `after`'s order, then what was removed; views
    and jobs whose definitions are equal are left out."""
    found: list[PlannedChange] = []
    for ref in after.order:
        if ref in after.views:
            if ref not in before.views:
                found.append(PlannedChange(ref, "New"))
                continue
            try:
                change = classify_view_change(
                    before.views[ref],
                    after.views[ref],
                    before.inputs(ref),
                    after.inputs(ref),
                )
            except ValueError as exc:  # SqlError too: the old files do not plan
                change = Classification("Reprocess", (f"the previous definition: {exc}",))
        elif ref in after.jobs:
            if ref not in before.jobs:
                found.append(PlannedChange(ref, "New"))
                continue
            change = classify_job_change(before.jobs[ref], after.jobs[ref])
        else:
            continue
        if change.reasons:
            found.append(PlannedChange(ref, change.kind, change.reasons))
    for ref in [*before.views, *before.jobs]:
        if ref not in after.views and ref not in after.jobs:
            found.append(PlannedChange(ref, "Removed"))
    return found


@dataclass(frozen=True)
class LogDifference:
    """A declared Log only in the files, only in what they are compared with (the cluster), or
    with another spec there."""

    ref: Ref
    kind: Literal["OnlyInFiles", "OnlyInCluster", "Changed"]
    fields: tuple[str, ...] = ()  # for Changed: "partitions: 2 -> 4"


def log_differences(after: Pipeline, before: Pipeline, namespace: str) -> list[LogDifference]:
    """The declared (not derived) Logs of `namespace` only in `after`, only in `before`, or
    with another spec in each."""
    mine = _declared(after, namespace)
    theirs = _declared(before, namespace)
    found: list[LogDifference] = []
    for ref, log in mine.items():
        if ref not in theirs:
            found.append(LogDifference(ref, "OnlyInFiles"))
        elif fields := spec_differences(theirs[ref], log):
            found.append(LogDifference(ref, "Changed", fields))
    found += [LogDifference(ref, "OnlyInCluster") for ref in theirs if ref not in mine]
    return found


def _declared(pipeline: Pipeline, namespace: str) -> dict[Ref, Log]:
    return {
        ref: log
        for ref, log in sorted(pipeline.logs.items())
        if ref.namespace == namespace and not pipeline.is_derived(ref)
    }


def spec_differences(old: Log, new: Log) -> tuple[str, ...]:
    """Each top-level field of the Log's spec that differs: "partitions: 2 -> 4"."""
    before = old.spec.model_dump(by_alias=True, mode="json")
    after = new.spec.model_dump(by_alias=True, mode="json")
    return tuple(
        f"{name}: {_shown(before.get(name))} -> {_shown(after.get(name))}"
        for name in sorted(before.keys() | after.keys())
        if before.get(name) != after.get(name)
    )


def _shown(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
