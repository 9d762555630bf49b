"""The life of a view's revisions: reprocess beside the serving one, cut over, retire.

A view's revisions are rows of `status.revisions`, each with a phase:

- `Serving`: the one revision readers read (`status.servingRevision`, the output Log's topic);
- `CatchingUp`: a newer definition, reprocessing its inputs from the start into a topic of its own
  while the serving one goes on;
- `Retiring`: replaced (by a cutover, or a newer catch-up); its application is stopped and its
  topic kept until `retireAt`;
- `Retired`: done; its topic deleted when the output Log's `deletionPolicy` is Delete.

Each reconcile hands over the rows as status has them, the hash of the definition the spec now
asks for, how the change was classified (when it is known), the view's upgrade settings and each
revision's lag, and gets the new rows and what to do. The rows are the write-ahead record: they
are written before anything acts on them, and every action they imply is idempotent (start the
running revisions, stop the others, delete due topics), so a crash at any point is repaired by
the next reconcile.

Cutover happens when the catching-up revision's lag has stayed at or under `cutoverMaxLag` for
`cutoverWindow`: one status write makes it Serving and the old one Retiring. Readers follow the
serving topic, so they see the old revision's complete output until then and the new one's after.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from distributary.api.common import duration_ms
from distributary.api.view import Upgrade
from distributary.plan.classify import Classification
from distributary.plan.conditions import Problem, rfc3339

SERVING, CATCHING_UP, RETIRING, RETIRED = "Serving", "CatchingUp", "Retiring", "Retired"
LIVE = (SERVING, CATCHING_UP)


def parse_time(text: str | None) -> datetime | None:
    """A status timestamp (RFC 3339, as `rfc3339` writes it) as a datetime."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Lifecycle:
    """The revisions after one step: rows to write, and what follows from them."""

    serving: int
    rows: tuple[dict[str, Any], ...]
    current: int | None  # the revision that runs the spec's definition now (None: refused)
    started: int | None = None  # a revision this step created (recorded before it starts)
    cut_over: int | None = None  # the revision this step made Serving
    stop: tuple[int, ...] = ()  # revisions whose application must not run
    delete_topics: tuple[str, ...] = ()  # retired revisions' topics due for deletion
    problem: Problem | None = None
    change: Classification | None = None
    notes: tuple[str, ...] = field(default=())

    def row(self, revision: int) -> dict[str, Any] | None:
        """The row of `revision`."""
        return next((r for r in self.rows if r["revision"] == revision), None)

    @property
    def catching_up(self) -> dict[str, Any] | None:
        """The revision reprocessing beside the serving one, if any."""
        return next((r for r in self.rows if r["phase"] == CATCHING_UP), None)


def _retire(row: dict[str, Any], now: datetime, upgrade: Upgrade) -> dict[str, Any]:
    after = timedelta(milliseconds=duration_ms(upgrade.retire_after))
    return {**row, "phase": RETIRING, "retiredAt": rfc3339(now), "retireAt": rfc3339(now + after)}


def _new_row(
    revision: int, spec_hash: str, phase: str, topic: str, group: str, now: datetime
) -> dict[str, Any]:
    return {
        "revision": revision,
        "specHash": spec_hash,
        "phase": phase,
        "topic": topic,
        "consumerGroup": group,
        "startedAt": rfc3339(now),
    }


def _cutover_due(
    row: dict[str, Any], lag: int | None, upgrade: Upgrade, now: datetime
) -> tuple[dict[str, Any], bool]:
    """The catching-up row with its lag recorded, and whether it has stayed caught up long
    enough to serve."""
    if lag is None or lag > upgrade.cutover_max_lag:
        # No nulls in status rows: the API server drops them, and the next read would differ.
        kept = {k: v for k, v in row.items() if k not in ("lag", "caughtUpSince")}
        return ({**kept, "lag": lag} if lag is not None else kept), False
    since = parse_time(row.get("caughtUpSince")) or now
    window = timedelta(milliseconds=duration_ms(upgrade.cutover_window))
    updated = {**row, "lag": lag, "caughtUpSince": rfc3339(since)}
    return updated, now - since >= window


def step(
    rows: Sequence[Mapping[str, Any]],
    *,
    spec_hash: str,
    change: Classification | None,
    upgrade: Upgrade,
    lags: Mapping[int, int | None],
    now: datetime,
    topic_of: Any,
    group_of: Any,
    delete_retired: bool,
    history_lost: str | None = None,
) -> Lifecycle:
    """One step of the lifecycle. `change` is how the spec's edit was classified (None when the
    definition is unchanged or the change is not known yet: then nothing new starts);
    `topic_of(revision)` and `group_of(revision)` name a revision's topic and consumer group;
    `delete_retired` says whether retired topics are deleted (the output's deletion policy);
    `history_lost` says why the inputs' history is incomplete, which refuses a reprocess."""
    table = {int(r["revision"]): dict(r) for r in rows}
    serving_rows = [r for r in table.values() if r.get("phase") in (SERVING, "Pending")]
    if not serving_rows:  # a view's first revision
        first = _new_row(1, spec_hash, SERVING, topic_of(1), group_of(1), now)
        return Lifecycle(1, (first,), current=1, started=1)
    serving = max(serving_rows, key=lambda r: int(r["revision"]))
    serving = {**serving, "phase": SERVING}
    table[int(serving["revision"])] = serving
    notes: list[str] = []
    acted = False  # whether `change` was carried out (or refused) in this step
    problem: Problem | None = None
    current: int | None = None
    started = cut_over = None
    catching = [r for r in table.values() if r.get("phase") == CATCHING_UP]
    if serving["specHash"] == spec_hash:
        current = int(serving["revision"])
        for row in catching:  # the edit was undone: its reprocess is not needed any more
            table[int(row["revision"])] = _retire(row, now, upgrade)
            notes.append(f"revision {row['revision']} is not needed: the serving one matches")
    elif any(r["specHash"] == spec_hash for r in catching):
        row = next(r for r in catching if r["specHash"] == spec_hash)
        current = int(row["revision"])
        updated, due = _cutover_due(row, lags.get(current), upgrade, now)
        table[current] = updated
        if due:
            table[current] = {**updated, "phase": SERVING, "servingSince": rfc3339(now)}
            table[int(serving["revision"])] = _retire(serving, now, upgrade)
            cut_over = current
            notes.append(f"revision {current} caught up and serves; {serving['revision']} retires")
    elif change is None:
        current = None  # waiting for the change to be classified
    else:
        acted = True
        kind = change.kind
        in_place = upgrade.strategy == "InPlace" or (
            upgrade.strategy == "Auto" and kind in ("Ignore", "RestartInPlace")
        )
        if kind == "Forbidden":
            problem = Problem("ChangeForbidden", "; ".join(change.reasons))
        elif in_place and kind == "Reprocess":
            problem = Problem(
                "ReprocessRequired",
                "; ".join(change.reasons)
                + ": Spark cannot restore the checkpoint after this change; set "
                "spec.upgrade.strategy to Reprocess (or Auto) to recompute the view beside the "
                "serving revision",
            )
        elif history_lost is not None and not upgrade.allow_partial_history:
            problem = Problem(
                "HistoryIncomplete",
                f"{history_lost}: a new revision would miss those records, so it is not started; "
                "set spec.upgrade.allowPartialHistory: true to reprocess what remains, or keep "
                "the serving revision (revert the change)",
            )
        elif in_place:
            serving = {**serving, "specHash": spec_hash}
            table[int(serving["revision"])] = serving
            current = int(serving["revision"])
            notes.append(f"revision {current} restarts in place from its checkpoint")
        else:
            for row in catching:  # superseded by a newer definition
                table[int(row["revision"])] = _retire(row, now, upgrade)
            revision = max(table) + 1
            table[revision] = _new_row(
                revision, spec_hash, CATCHING_UP, topic_of(revision), group_of(revision), now
            )
            current = started = revision
            notes.append(f"revision {revision} reprocesses beside revision {serving['revision']}")
    serving_now = next(int(r["revision"]) for r in table.values() if r["phase"] == SERVING)
    deletes: list[str] = []
    for revision, row in sorted(table.items()):
        lag = lags.get(revision)
        if row["phase"] == SERVING and lag is not None:
            table[revision] = {**table[revision], "lag": lag}
        retire_at = parse_time(row.get("retireAt"))
        if row["phase"] == RETIRING and retire_at is not None and now >= retire_at:
            table[revision] = {**row, "phase": RETIRED}
        retired = table[revision]["phase"] == RETIRED and not table[revision].get("topicDeleted")
        if retired and delete_retired and row.get("topic"):
            deletes.append(str(row["topic"]))
    stop = tuple(sorted(r for r, row in table.items() if row["phase"] in (RETIRING, RETIRED)))
    return Lifecycle(
        serving_now,
        tuple(table[r] for r in sorted(table)),
        current=current,
        started=started,
        cut_over=cut_over,
        stop=stop,
        delete_topics=tuple(deletes),
        problem=problem,
        change=change if acted else None,
        notes=tuple(notes),
    )


def mark_deleted(rows: Sequence[Mapping[str, Any]], topics: Sequence[str]) -> list[dict[str, Any]]:
    """`rows` with the revisions whose topic is in `topics` marked as deleted."""
    return [
        {**row, "topicDeleted": True} if row.get("topic") in topics else dict(row) for row in rows
    ]


def reprocess_progress(
    start: Mapping[str, Mapping[int, int]],
    position: Mapping[str, Mapping[int, int]],
    end: Mapping[str, Mapping[int, int]],
) -> tuple[int, int]:
    """(records read, records to read) of a reprocessing revision over its inputs: from each
    partition's first retained offset to its end offset now."""
    done = total = 0
    for topic, partitions in end.items():
        for partition, last in partitions.items():
            first = start.get(topic, {}).get(partition, 0)
            at = min(max(position.get(topic, {}).get(partition, first), first), last)
            total += max(0, last - first)
            done += max(0, at - first)
    return done, total


def progress_message(revision: int, done: int, total: int) -> str:
    """ "reprocessing 43%: 1.2M of 2.8M records" for people."""
    percent = 100 if done >= total else min(99, round(done * 100 / total))
    return f"revision {revision} reprocessing {percent}%: {_count(done)} of {_count(total)} records"


def _count(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    return str(n)


def read_topics(readers: Any) -> set[str]:
    """The topics live revisions of these views and jobs read (from their statuses)."""
    found: set[str] = set()
    for body in readers:
        status = body.get("status") or {}
        for item in status.get("inputs") or []:
            found.add(str(item.get("topic")))
        for row in status.get("revisions") or []:
            if row.get("phase") in LIVE:
                found |= {str(i.get("topic")) for i in row.get("inputs") or []}
    return found
