"""The write-ahead records: what the operator writes to a resource's status before it acts.

Status is the operator's write-ahead log. Before a revision starts, before the output Log moves
to a new revision at a cutover, and before a rewind moves a consumer group, the record of what is
about to happen is written; the action follows only once it is. A restarted operator reads the
record and carries the same action on (the same revision, the same offsets) instead of deciding
anew, and every action is idempotent, so doing it twice is harmless. Every such record is built
here and written through the front end's status store (`controllers/status.py` in the API
server, `local/revisions.py` in the state folder):

| record         | written before                     | a restarted operator                    |
|----------------|------------------------------------|-----------------------------------------|
| StartRevision  | a view's or job's revision starts  | starts that same revision               |
| CutOver        | the output Log serves the revision | points the output Log at it             |
| Rewind         | a consumer group's offsets move    | moves them to the offsets recorded      |

A restarted reconcile carries on from the records themselves: the revision rows and
`servingRevision` (a started revision is in the rows, so it is run rather than started anew; a
cutover is in `servingRevision`, which the output Log is pointed at) and `lastRewind` (its
offsets). `pendingAction` says, for people and tools, what was under way; the status the
reconcile writes when it is done clears it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from distributary.api.common import PendingAction
from distributary.api.view import Revision
from distributary.plan.applications.children import rewind_folder
from distributary.plan.jobs.job_plan import JobPlan
from distributary.plan.revisions.lifecycle import rows_json
from distributary.plan.revisions.positions import rewind_destinations
from distributary.plan.status.conditions import rfc3339
from distributary.plan.views.view_plan import ViewPlan
from distributary.plan.views.view_status import runner_inputs

Action = Literal["StartRevision", "Rewind"]


def pending_action(action: Action, revision: int, generation: int, now: datetime) -> dict[str, Any]:
    """`status.pendingAction`: the action, the revision and the generation it was decided from."""
    record = PendingAction(
        action=action, revision=revision, generation=generation, started_at=rfc3339(now)
    )
    return record.model_dump(by_alias=True, exclude_none=True)


def start_record(plan: ViewPlan, generation: int, now: datetime) -> dict[str, Any]:
    """StartRevision of a view: every revision's row as the lifecycle decided (the new one with
    its topic, group and inputs), which one serves, and the action."""
    assert plan.runner is not None
    assert plan.lifecycle is not None
    rows = rows_json(plan.lifecycle.rows)
    for row in rows:
        if row["revision"] == plan.runner.revision:
            row["inputs"] = runner_inputs(plan)
    return {
        "pendingAction": pending_action("StartRevision", plan.runner.revision, generation, now),
        "servingRevision": plan.revision,
        "revisions": rows,
    }


def job_start_record(plan: JobPlan, generation: int, now: datetime) -> dict[str, Any]:
    """StartRevision of a job: the revision, its hash, consumer group and inputs."""
    return {
        "pendingAction": pending_action("StartRevision", plan.revision, generation, now),
        "revision": plan.revision,
        "specHash": plan.spec_hash,
        "consumerGroup": plan.consumer_group,
        "inputs": [{"log": i.log, "topic": i.topic} for i in plan.inputs],
    }


def cutover_record(serving: int, rows: Sequence[Revision]) -> dict[str, Any]:
    """CutOver: which revision serves now, and every row's phase; written on the view before
    its output Log moves (readers follow the Log, which follows this)."""
    return {"servingRevision": serving, "revisions": rows_json(rows)}


def rewind_record(
    request_id: str,
    revision: int,
    offsets: Sequence[Mapping[str, Any]],
    generation: int,
    now: datetime,
) -> dict[str, Any]:
    """Rewind: the request, the revision, every partition's offset before and after (a
    restarted operator moves the group to these, not to offsets looked up again), Pending."""
    last = {"requestId": request_id, "revision": revision, "phase": "Pending", "offsets": offsets}
    return {
        "lastRewind": last,
        "pendingAction": pending_action("Rewind", revision, generation, now),
    }


def checked_rewind(
    last: Mapping[str, Any], progress: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """`lastRewind` with its verdict, once the rewound revision's run on the rewind's checkpoint
    has reported the offsets it started from (`startedFrom` in its progress record): Held when
    they are the moved offsets, Undone when they are not. None while there is nothing to add."""
    if last.get("phase") != "Done" or last.get("verified") or last.get("rebuiltAs") is not None:
        return None
    if progress is None or progress.get("revision") != last.get("revision"):
        return None
    folder = rewind_folder(str(last.get("requestId")))
    started = progress.get("startedFrom")
    if not str(progress.get("checkpoint") or "").rstrip("/").endswith(folder) or started is None:
        return None
    moved = rewind_destinations(last.get("offsets") or [])
    held = all(
        (started.get(topic) or {}).get(str(partition)) == offset
        for topic, partitions in moved.items()
        for partition, offset in partitions.items()
    )
    return {**last, "verified": "Held" if held else "Undone"}


def rebuilt_rewind(
    status: Mapping[str, Any], plan: ViewPlan, request_id: str, now: datetime
) -> dict[str, Any] | None:
    """The `lastRewind` of a view that keeps state, once its rebuild has started (a rewind
    would resume it on empty state); None when recorded before or not started (refused)."""
    if (status.get("lastRewind") or {}).get("requestId") == request_id:
        return None
    rows = plan.lifecycle.rows if plan.lifecycle is not None else ()
    rebuilt = [r for r in rows if r.reason == "Rewind" and r.phase == "CatchingUp"]
    if not rebuilt:
        return None
    return {
        "requestId": request_id,
        "revision": plan.revision,
        "phase": "Done",
        "rebuiltAs": rebuilt[-1].revision,
        "completedAt": rfc3339(now),
    }


def replaced_rewind(
    last: Mapping[str, Any], request_id: str, revision: int, now: datetime
) -> dict[str, Any] | None:
    """`lastRewind` closed without moving anything, when request `request_id` was recorded
    (Pending) for another revision than `revision`, the one that runs the spec's definition now:
    an edit replaced that revision before the rewind was carried out (its reconcile did not
    finish). The offsets recorded are positions of the other revision's group; moving this
    revision's group to them would make it skip or repeat records. It is `Undone`: request it
    again to move the revision that runs now. None otherwise."""
    if last.get("requestId") != request_id or last.get("phase") != "Pending":
        return None
    if int(last.get("revision") or 0) == revision:
        return None
    return {**last, "phase": "Done", "verified": "Undone", "completedAt": rfc3339(now)}


def rewind_message(record: Mapping[str, Any]) -> str:
    """What a rewind did, for people: the revision, the request, each partition moved."""
    if record.get("verified") == "Undone":
        return (
            f"request {record['requestId']} was recorded for revision {record['revision']}, which "
            "an edit replaced before it was carried out: nothing was moved; request it again to "
            "rewind the revision that runs now"
        )
    if record.get("rebuiltAs") is not None:
        return (
            f"revision {record['revision']} keeps state, so request {record['requestId']} does "
            f"not move it (it would go on from empty state): revision {record['rebuiltAs']} "
            "rebuilds it from the start of the inputs beside it and serves once caught up"
        )
    moved = ", ".join(
        f"{m['topic']}[{m['partition']}] "
        f"{'-' if m.get('fromOffset') is None else m['fromOffset']} -> {m['toOffset']}"
        for m in record.get("offsets") or []
    )
    return (
        f"rewound revision {record['revision']} for request {record['requestId']}: "
        f"{moved or 'no partitions'}; it reads on from there on a fresh checkpoint "
        f"({rewind_folder(str(record['requestId']))})"
    )
