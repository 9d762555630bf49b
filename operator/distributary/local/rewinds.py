"""Rewinds in `distributary run`: a view's `spec.rewind`, carried out once per request id.

Under the operator a rewind stops the revision's application, moves its consumer group and starts
it again on a fresh checkpoint (`controllers.applications.rewind_once`). Here one runner process
runs every view, so a rewind is carried out while it is stopped: before it starts, at the start
of a run or when it restarts on new specs. The steps are the operator's, and so is the record:
the view's `status.rewinds` in `revisions.json` gets the request with every partition's position
before and after, marked Pending, before the group moves (a run that stops half-way carries the
same offsets out next time); then the group is moved, the revision's row names the fresh
checkpoint folder (`rewind-<requestId>`, which the planner gives the runner spec) and the record
is marked Done, so no later run rewinds again for that request id. With no checkpoint in that
folder the runner starts from the group's offsets, which is where the rewind put them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from distributary.api.common import Position
from distributary.graph import Pipeline
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.rewinds import move_group, rewind_offsets
from distributary.local.revisions import LocalRevisions, view_key
from distributary.plan.conditions import rfc3339
from distributary.plan.view_plan import ViewPlan, rewind_folder

DONE, PENDING = "Done", "Pending"


@dataclass(frozen=True)
class DueRewind:
    """A view's rewind not carried out yet: the request, and what it moves (the consumer group of
    the revision that runs the view's spec, in the topics of the inputs it names)."""

    key: str  # the view's key in revisions.json, namespace/name
    name: str
    request_id: str
    to: Position
    revision: int
    group: str
    topics: tuple[str, ...]


def due_rewinds(
    pipeline: Pipeline, plans: Mapping[str, ViewPlan], revisions: LocalRevisions
) -> list[DueRewind]:
    """The rewinds the views' specs ask for that `revisions` does not record as done, for the
    views whose plan runs a revision (a view waiting for its input, or whose change is refused,
    is rewound once it runs one, as under the operator)."""
    due = []
    for ref, view in pipeline.views.items():
        rewind, plan = view.spec.rewind, plans.get(ref.name)
        runner = plan.runner if plan is not None else None
        if rewind is None or runner is None:
            continue
        key, request = view_key(ref), rewind.request_id
        if any(r["requestId"] == request and r["phase"] == DONE for r in revisions.rewinds(key)):
            continue
        chosen = set(rewind.inputs) or {str(s.alias) for s in runner.inputs}
        topics = tuple(sorted({s.topic for s in runner.inputs if s.alias in chosen}))
        group = runner.consumer_group
        due.append(DueRewind(key, ref.name, request, rewind.to, runner.revision, group, topics))
    return due


def carry_out(
    admin: KafkaAdmin, due: DueRewind, revisions: LocalRevisions, now: datetime
) -> dict[str, Any]:
    """Rewind `due` (the runner must be stopped): record it Pending with its moves (those of a
    record left Pending by an earlier run of the same revision, else the offsets now), move the
    group, give the revision its fresh checkpoint folder, record it Done. The Done record."""
    pending = next(
        (
            r
            for r in revisions.rewinds(due.key)
            if r["requestId"] == due.request_id
            and r["phase"] == PENDING
            and r["revision"] == due.revision
        ),
        None,
    )
    if pending is None:
        pending = {
            "requestId": due.request_id,
            "revision": due.revision,
            "phase": PENDING,
            "offsets": rewind_offsets(admin, due.group, list(due.topics), due.to),
        }
        revisions.record_rewind(due.key, pending)
        revisions.save()
    move_group(admin, due.group, pending["offsets"])
    revisions.use_checkpoint(due.key, due.revision, rewind_folder(due.request_id))
    done = {**pending, "phase": DONE, "completedAt": rfc3339(now)}
    revisions.record_rewind(due.key, done)
    revisions.save()
    return done


def describe(name: str, record: Mapping[str, Any]) -> str:
    """What a rewind did, for people: the view, revision, request, and each partition moved."""
    moved = ", ".join(
        f"{m['topic']}[{m['partition']}] "
        f"{'-' if m.get('fromOffset') is None else m['fromOffset']} -> {m['toOffset']}"
        for m in record.get("offsets") or []
    )
    return (
        f"view {name}: rewound revision {record['revision']} for request "
        f"{record['requestId']}: {moved or 'no partitions'}; it reads on from there on a fresh "
        f"checkpoint ({rewind_folder(str(record['requestId']))})"
    )
