"""What an edit of a pipeline's files does to each view and job: `distributary plan --against`.

Each view or job of the new pipeline is compared with the one of the same name in the previous
files, and its change classified as the operator will (`plan.revisions`): Ignore, RestartInPlace,
Reprocess or Forbidden, with one reason per difference. What the operator then does follows the
resource's upgrade strategy: under `Reprocess`, a view's reprocess runs beside the serving
revision and cuts over once caught up.
"""

from __future__ import annotations

from dataclasses import dataclass

from distributary.graph import Pipeline, Ref
from distributary.plan.revisions import Classification, classify_job_change, classify_view_change


@dataclass(frozen=True)
class PlannedChange:
    """One view's or job's change: new, removed, or classified."""

    ref: Ref
    kind: str  # "New", "Removed", or a classification's kind
    reasons: tuple[str, ...] = ()


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
