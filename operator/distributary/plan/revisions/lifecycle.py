"""The life of a view's revisions: reprocess beside the serving one, cut over, retire.

A view's revisions are rows of `status.revisions`, each with a phase:

- `Serving`: the one revision readers read (`status.servingRevision`, the output Log's topic);
- `CatchingUp`: a newer definition, reprocessing its inputs from the start into a topic of its own
  while the serving one goes on;
- `Retiring`: replaced (by a cutover, or a newer catch-up); its application is stopped and its
  topic kept until `retireAt`;
- `Retired`: done; its topic deleted when the output Log's `deletionPolicy` is Delete, and its
  consumer group deleted whatever the policy (a retired revision never runs again, and a group
  left behind would show as a stopped consumer in every lag tool).

Each reconcile hands over the rows as status has them, the hash of the definition the spec now
asks for, how the change was classified (when it is known), the view's upgrade settings and each
revision's lag, and gets the new rows and what to do. The rows are the write-ahead record: they
are written before anything acts on them, and every action they imply is idempotent (start the
running revisions, stop the others, delete due topics), so a crash at any point is repaired by
the next reconcile.

Cutover happens when the catching-up revision keeps up (behind by no more than `cutoverMaxLag`
plus what its inputs receive in `cutoverWindow`, or in two of its own micro-batches when those take
longer: a micro-batch reader that keeps up is a batch behind, and another one before that batch
commits) for `cutoverWindow`: one status write makes it
Serving and the old one Retiring. Readers follow the serving topic, so they see the old revision's
complete output until then and the new one's after.

A revision whose state is gone (its runner found no checkpoint after its group had read records:
`checkpointLost` on its row) never runs again, and a rewind of a view that keeps state would
resume it on empty state: either is rebuilt as a new revision with the same definition and a
`reason` (CheckpointLost, Rewind), reading the inputs from the start beside it and cutting over
like a reprocess, or refused when the inputs' history is incomplete.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from distributary.api.common import duration_ms
from distributary.api.view import Revision, Upgrade
from distributary.plan.revisions.classify import Classification
from distributary.plan.status.conditions import Problem, parse_time, rfc3339

SERVING: Final = "Serving"
CATCHING_UP: Final = "CatchingUp"
RETIRING: Final = "Retiring"
RETIRED: Final = "Retired"
LIVE = (SERVING, CATCHING_UP)


Phase = Literal["Pending", "CatchingUp", "Serving", "Retiring", "Retired", "Failed"]
Rebuild = Literal["CheckpointLost", "Rewind"]  # why a revision rebuilds the one before's state


def revisions_of(rows: Sequence[Mapping[str, Any] | Revision]) -> tuple[Revision, ...]:
    """Status rows (camelCase, as the API stores them) as typed revisions."""
    return tuple(r if isinstance(r, Revision) else Revision.model_validate(r) for r in rows)


def rows_json(rows: Sequence[Revision]) -> list[dict[str, Any]]:
    """Typed revisions as status rows (camelCase, no nulls: the API server drops them)."""
    return [r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in rows]


@dataclass(frozen=True)
class Lifecycle:
    """The revisions after one step: rows to write, and what follows from them."""

    serving: int
    rows: tuple[Revision, ...]
    current: int | None  # the revision that runs the spec's definition now (None: refused)
    started: int | None = None  # a revision this step created (recorded before it starts)
    cut_over: int | None = None  # the revision this step made Serving
    stop: tuple[int, ...] = ()  # revisions whose application must not run
    delete_topics: tuple[str, ...] = ()  # retired revisions' topics due for deletion
    delete_groups: tuple[int, ...] = ()  # retired revisions whose consumer group is to go
    problem: Problem | None = None
    change: Classification | None = None
    notes: tuple[str, ...] = field(default=())

    def row(self, revision: int) -> Revision | None:
        """The row of `revision`."""
        return next((r for r in self.rows if r.revision == revision), None)

    @property
    def catching_up(self) -> Revision | None:
        """The revision reprocessing beside the serving one, if any."""
        return next((r for r in self.rows if r.phase == CATCHING_UP), None)

    def beside(self, revision: int) -> bool:
        """Whether `revision` came after the view's first (a reprocess or a rebuild, which read
        the inputs from the start), rather than being the first."""
        return revision > min(r.revision for r in self.rows)

    def live(self) -> list[int]:
        """The revisions whose application runs: the serving one, and one catching up (not one
        that lost the state its checkpoint held)."""
        return [r.revision for r in self.rows if r.phase in LIVE and not r.checkpoint_lost]


def _retire(row: Revision, now: datetime, upgrade: Upgrade) -> Revision:
    after = timedelta(milliseconds=duration_ms(upgrade.retire_after))
    update = {"phase": RETIRING, "retired_at": rfc3339(now), "retire_at": rfc3339(now + after)}
    return row.model_copy(update=update)


def _new_row(
    revision: int,
    spec_hash: str,
    phase: Phase,
    topic: str,
    group: str,
    now: datetime,
    reason: Rebuild | None = None,
) -> Revision:
    return Revision(
        revision=revision,
        spec_hash=spec_hash,
        phase=phase,
        topic=topic,
        consumer_group=group,
        started_at=rfc3339(now),
        reason=reason,
    )


def keeping_up(lag: int | None, rate: float | None, seconds: float, margin: int = 0) -> bool:
    """Whether a reader `lag` records behind keeps up with inputs that grow by `rate` records
    a second: it is behind by at most what they receive in `seconds`, plus `margin`. On idle
    inputs that is a lag of at most `margin`; on live ones a reader is never at lag 0, and need
    not be."""
    return lag is not None and lag <= margin + round(max(rate or 0.0, 0.0) * seconds)


def keeping_up_seconds(upgrade: Upgrade, batch_seconds: float | None) -> float:
    """How many seconds of input a reader that keeps up may be behind by: one `cutoverWindow`,
    or two of its micro-batches when those take longer (it is a batch behind, and another one
    before that batch commits)."""
    window = duration_ms(upgrade.cutover_window) / 1000.0
    return max(window, 2 * (batch_seconds or 0.0))


def _cutover_due(
    row: Revision, lag: int | None, upgrade: Upgrade, now: datetime
) -> tuple[Revision, bool]:
    """The catching-up row with its lag recorded, and whether it has kept up (done what the
    serving revision does: read what arrives, no more behind than `keeping_up_seconds` allows)
    long enough to serve."""
    window = timedelta(milliseconds=duration_ms(upgrade.cutover_window))
    seconds = keeping_up_seconds(upgrade, row.batch_seconds)
    if not keeping_up(lag, row.input_rate, seconds, upgrade.cutover_max_lag):
        return row.model_copy(update={"lag": lag, "caught_up_since": None}), False
    since = parse_time(row.caught_up_since) or now
    updated = row.model_copy(update={"lag": lag, "caught_up_since": rfc3339(since)})
    return updated, now - since >= window


@dataclass
class _Step:
    """One step's working state: the rows by revision, and what the step found to do."""

    table: dict[int, Revision]
    serving: Revision
    upgrade: Upgrade
    now: datetime
    notes: list[str] = field(default_factory=list)
    current: int | None = None
    started: int | None = None
    cut_over: int | None = None
    problem: Problem | None = None
    acted: bool = False  # whether the change was carried out (or refused) in this step

    @property
    def catching(self) -> list[Revision]:
        return [r for r in self.table.values() if r.phase == CATCHING_UP]

    def put(self, row: Revision) -> None:
        self.table[row.revision] = row

    def retire(self, row: Revision) -> None:
        self.put(_retire(row, self.now, self.upgrade))


def _rebuild(
    state: _Step, spec_hash: str, reason: Rebuild, topic_of: Any, group_of: Any,
    history_lost: str | None,
) -> None:  # fmt: skip
    """Start a revision with the definition `spec_hash` from the start of the inputs, so that
    the state a checkpoint held is built again (or refuse, when the history is incomplete)."""
    if history_lost is not None and not state.upgrade.allow_partial_history:
        state.problem = Problem(
            "HistoryIncomplete",
            f"revision {state.serving.revision} keeps state and "
            + ("lost its checkpoint" if reason == "CheckpointLost" else "was asked to rewind")
            + f", so it is rebuilt from the start of its inputs; but {history_lost}: the "
            "rebuilt state would miss those records, so it is not started and nothing is "
            "written; set spec.upgrade.allowPartialHistory: true to rebuild from what remains",
        )
        return
    revision = max(state.table) + 1
    row = _new_row(
        revision, spec_hash, CATCHING_UP, topic_of(revision), group_of(revision), state.now, reason
    )
    state.put(row)
    state.started = revision
    why = "lost its checkpoint" if reason == "CheckpointLost" else "was asked to rewind"
    state.notes.append(
        f"revision {state.serving.revision} keeps state and {why}: revision {revision} rebuilds "
        "it from the start of the inputs beside it"
    )


def _rebuilds(
    state: _Step, spec_hash: str, requested: Rebuild | None, topic_of: Any, group_of: Any,
    history_lost: str | None,
) -> None:  # fmt: skip
    """Revisions whose state is gone (their runner found the checkpoint missing) or asked to be
    rebuilt (a rewind of a view that keeps state) are never resumed on empty state: a
    catching-up one is replaced, and the serving one is rebuilt beside it while it serves what
    it wrote (unless a revision catching up for an edit replaces it anyway). A rebuild has the
    definition of the serving revision, so it starts only while the spec asks for that one."""
    for row in state.catching:
        if row.checkpoint_lost:
            state.retire(row)
            if row.spec_hash == spec_hash:
                _rebuild(state, spec_hash, "CheckpointLost", topic_of, group_of, history_lost)
    serving = state.serving
    reason: Rebuild | None = "CheckpointLost" if serving.checkpoint_lost else requested
    if reason is None or state.catching or serving.spec_hash != spec_hash:
        return
    _rebuild(state, spec_hash, reason, topic_of, group_of, history_lost)


def _undo(state: _Step) -> None:
    """The serving revision runs the spec's definition: a catch-up is not needed any more (it
    runs on, unless its state is gone)."""
    state.current = None if state.serving.checkpoint_lost else state.serving.revision
    for row in state.catching:
        state.retire(row)
        state.notes.append(f"revision {row.revision} is not needed: the serving one matches")


def _catch_up(state: _Step, row: Revision, lag: int | None) -> None:
    """The revision catching up runs the definition: record its lag, cut over when due."""
    state.current = row.revision
    updated, due = _cutover_due(row, lag, state.upgrade, state.now)
    state.put(updated)
    if due:
        state.put(
            updated.model_copy(update={"phase": SERVING, "serving_since": rfc3339(state.now)})
        )
        state.retire(state.serving)
        state.cut_over = row.revision
        retired = state.serving.revision
        state.notes.append(f"revision {row.revision} caught up and serves; {retired} retires")


def _refusal(
    change: Classification, in_place: bool, upgrade: Upgrade, lost: str | None
) -> Problem | None:
    """Why a classified change cannot be carried out, None when it can."""
    if change.kind == "Forbidden":
        return Problem("ChangeForbidden", "; ".join(change.reasons))
    if in_place and change.kind == "Reprocess":
        return Problem(
            "ReprocessRequired",
            "; ".join(change.reasons)
            + ": Spark cannot restore the checkpoint after this change; set "
            "spec.upgrade.strategy to Reprocess (or Auto) to recompute the view beside the "
            "serving revision",
        )
    if lost is not None and not upgrade.allow_partial_history:
        return Problem(
            "HistoryIncomplete",
            f"{lost}: a new revision would miss those records, so it is not started; "
            "set spec.upgrade.allowPartialHistory: true to reprocess what remains, or keep "
            "the serving revision (revert the change)",
        )
    return None


def _carry_out(
    state: _Step, change: Classification, spec_hash: str, topic_of: Any, group_of: Any,
    history_lost: str | None,
) -> None:  # fmt: skip
    """A classified change of the definition: in place, as a new revision beside the serving
    one, or refused."""
    state.acted = True
    upgrade = state.upgrade
    in_place = upgrade.strategy == "InPlace" or (
        upgrade.strategy == "Auto" and change.kind in ("Ignore", "RestartInPlace")
    )
    state.problem = _refusal(change, in_place, upgrade, history_lost)
    if state.problem is not None:
        return
    if in_place:
        state.serving = state.serving.model_copy(update={"spec_hash": spec_hash})
        state.put(state.serving)
        state.current = state.serving.revision
        state.notes.append(f"revision {state.current} restarts in place from its checkpoint")
        return
    for row in state.catching:  # superseded by a newer definition
        state.retire(row)
    revision = max(state.table) + 1
    state.put(
        _new_row(
            revision, spec_hash, CATCHING_UP, topic_of(revision), group_of(revision), state.now
        )
    )
    state.current = state.started = revision
    state.notes.append(f"revision {revision} reprocesses beside revision {state.serving.revision}")


def _retirements(
    table: dict[int, Revision], lags: Mapping[int, int | None], now: datetime, delete: bool
) -> list[str]:
    """Record the serving revision's lag and retire what is due; the topics to delete."""
    deletes: list[str] = []
    for revision, row in sorted(table.items()):
        lag = lags.get(revision)
        if row.phase == SERVING and lag is not None:
            table[revision] = row.model_copy(update={"lag": lag})
        retire_at = parse_time(row.retire_at)
        if row.phase == RETIRING and retire_at is not None and now >= retire_at:
            table[revision] = row.model_copy(update={"phase": RETIRED})
        retired = table[revision].phase == RETIRED and not table[revision].topic_deleted
        if retired and delete and row.topic:
            deletes.append(row.topic)
    return deletes


def step(
    rows: Sequence[Revision | Mapping[str, Any]],
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
    rebuild: Rebuild | None = None,
    first: int = 1,
) -> Lifecycle:
    """One step of the lifecycle. `change` is how the spec's edit was classified (None when the
    definition is unchanged or the change is not known yet: then nothing new starts);
    `topic_of(revision)` and `group_of(revision)` name a revision's topic and consumer group;
    `delete_retired` says whether retired topics are deleted (the output's deletion policy);
    `history_lost` says why the inputs' history is incomplete, which refuses a reprocess;
    `rebuild` asks for the serving revision's state to be rebuilt (a rewind of a view that keeps
    state); `first` numbers a new view's first revision (past what an earlier view of the same
    name left in Kafka)."""
    table = {r.revision: r for r in revisions_of(rows)}
    serving_rows = [r for r in table.values() if r.phase in (SERVING, "Pending")]
    if not serving_rows:  # a view's first revision
        row = _new_row(first, spec_hash, SERVING, topic_of(first), group_of(first), now)
        return Lifecycle(first, (row,), current=first, started=first)
    serving = max(serving_rows, key=lambda r: r.revision).model_copy(update={"phase": SERVING})
    table[serving.revision] = serving
    state = _Step(table, serving, upgrade, now)
    _rebuilds(state, spec_hash, rebuild, topic_of, group_of, history_lost)
    matching = next((r for r in state.catching if r.spec_hash == spec_hash), None)
    if matching is not None and (serving.spec_hash != spec_hash or matching.reason):
        _catch_up(state, matching, lags.get(matching.revision))
    elif serving.spec_hash == spec_hash:
        _undo(state)
        # Nothing catches up now: a serving revision whose state is gone is rebuilt.
        _rebuilds(state, spec_hash, rebuild, topic_of, group_of, history_lost)
        state.current = state.started or state.current
    elif change is not None:
        _carry_out(state, change, spec_hash, topic_of, group_of, history_lost)
    # else: waiting for the change to be classified
    serving_now = next(r.revision for r in table.values() if r.phase == SERVING)
    deletes = _retirements(table, lags, now, delete_retired)
    groups = tuple(
        r
        for r, row in sorted(table.items())
        if row.phase == RETIRED and row.consumer_group and not row.group_deleted
    )
    stop = tuple(
        sorted(
            r
            for r, row in table.items()
            if row.phase in (RETIRING, RETIRED) or (row.phase in LIVE and row.checkpoint_lost)
        )
    )
    return Lifecycle(
        serving_now,
        tuple(table[r] for r in sorted(table)),
        current=state.current,
        started=state.started,
        cut_over=state.cut_over,
        stop=stop,
        delete_topics=tuple(deletes),
        delete_groups=groups,
        problem=state.problem,
        change=change if state.acted else None,
        notes=tuple(state.notes),
    )


def mark_deleted(rows: Sequence[Revision], topics: Sequence[str]) -> list[Revision]:
    """`rows` with the revisions whose topic is in `topics` marked as deleted."""
    return [r.model_copy(update={"topic_deleted": True}) if r.topic in topics else r for r in rows]


def mark_groups_deleted(rows: Sequence[Revision], revisions: Sequence[int]) -> list[Revision]:
    """`rows` with the consumer groups of `revisions` marked as deleted."""
    return [
        r.model_copy(update={"group_deleted": True}) if r.revision in revisions else r for r in rows
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
