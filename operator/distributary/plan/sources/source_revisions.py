"""A Source's revisions of its table Logs: a fresh snapshot taken beside the serving one, then
cutover, as a view reprocesses. Pure: the connectors' offsets and slots are read by a runtime.

Revision 1 writes each table into its Log's own topic. A new revision N starts beside it when
`spec.snapshot.epoch` is raised, or when a revision's snapshot is found to have been interrupted
(below): a connector of its own (`<connector>.rN`), with its own replication slot and
publication (`<identifier>_rN`), taking a fresh snapshot of every table into topics of its own
(`<topic>.rN`). The serving revision's connector runs on meanwhile, so its readers miss nothing.
Revision N has caught up when its snapshot is whole and it has written every transaction the
serving one has (the WAL positions their committed offsets name, which Connect commits in the same
Kafka transaction as the records). Then the table Logs serve N's topics (readers reprocess them, as
after an upstream view's cutover), and the revision that served is retired: its connector deleted,
its slot and publication dropped, so it keeps no WAL on the server. Its topics stay: they are
data, and deleting data is asked for, never implied.

An interrupted snapshot: Debezium takes a snapshot interrupted by a crash again, on the slot it
made the first time, from a later point, and streams from there, so a change made in between can
be missed. A clean snapshot is taken at the slot's own starting point: while the connector has
not yet streamed, the position its offsets name is the slot's confirmed position. A later one
means the snapshot was taken again: that revision is never trusted. One catching up is retired
and replaced; one serving is marked (`SnapshotInterrupted`) and replaced beside it, as a raised
epoch would.

The steps are recorded before they are carried out (the status is the write-ahead record): a
run or operator stopped between the two finds a `Retiring` revision and finishes dropping it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distributary.api.log import Log
from distributary.api.source import Source
from distributary.plan.pipelines.pipeline import revision_topic
from distributary.plan.sources.source_plan import SNAPSHOT_INTERRUPTED, connector_name

SERVING = "Serving"
CATCHING_UP = "CatchingUp"
RETIRING = "Retiring"  # recorded as superseded; its connector, slot and publication still to go
RETIRED = "Retired"
KEPT_RETIRED = 5  # retired revisions listed in status (their topics stay in Kafka)


INTERRUPTED = SNAPSHOT_INTERRUPTED


@dataclass(frozen=True)
class CapturePosition:
    """What a connector's committed offsets say: whether its snapshot has been read whole, the
    WAL position up to which it has written every transaction (None: none yet), and whether it
    has begun to stream changes (before that, `lsn` is where its snapshot was taken)."""

    snapshot_done: bool
    lsn: int | None
    streaming: bool = False


def capture_position(offsets: Mapping[str, Any] | None) -> CapturePosition | None:
    """The position in Connect's `GET /connectors/NAME/offsets` answer; None while the
    connector has committed no offset. Debezium marks an offset written during its snapshot
    with `snapshot` (and `snapshot_completed: false`); once streaming, `lsn_commit` is the
    last transaction written whole (`lsn`, before any, the snapshot's own position)."""
    entries = (offsets or {}).get("offsets") or []
    if not entries or not isinstance(entries[0], Mapping):
        return None
    offset = entries[0].get("offset") or {}
    done = "snapshot" not in offset or offset.get("snapshot_completed") is True
    lsn = offset.get("lsn_commit", offset.get("lsn"))
    streaming = "lsn_proc" in offset or "lsn_commit" in offset
    return CapturePosition(done, int(lsn) if isinstance(lsn, int) else None, streaming)


def snapshot_check(position: CapturePosition | None, confirmed: int | None) -> str | None:
    """Whether a revision's snapshot was taken at its slot's starting point ("Clean") or later
    ("Interrupted": taken again after a crash); None while it cannot be told (no offset yet,
    the slot not read, or the connector streams already, which moves the slot on)."""
    if position is None or position.lsn is None or confirmed is None or position.streaming:
        return None
    return "Clean" if position.lsn <= confirmed else "Interrupted"


def lsn_text(lsn: int | None) -> str | None:
    """A WAL position as PostgreSQL writes it (`0/3205A10`)."""
    return None if lsn is None else f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def revision_topics(source: Source, logs: Mapping[str, Log], revision: int) -> dict[str, str]:
    """Each table's topic in a revision: its Log's own topic in revision 1, `<topic>.rN` after."""
    return {
        table: log.topic if revision == 1 else revision_topic(log, revision)
        for table, log in logs.items()
    }


def revision_row(
    source: Source, logs: Mapping[str, Log], revision: int, phase: str, now: str
) -> dict[str, Any]:
    """A revision as its status row (camelCase, as recorded), for the spec's epoch."""
    return {
        "revision": revision,
        "epoch": source.spec.snapshot.epoch,
        "phase": phase,
        "connector": connector_name(source, revision),
        "slot": source.revision_identifier(revision),
        "topics": revision_topics(source, logs, revision),
        "startedAt": now,
    }


@dataclass(frozen=True)
class RevisionStep:
    """What a round does with a Source's revisions: `rows` to record (before acting), the
    revision serving, the one catching up, the connectors to run, those to retire (delete the
    connector, drop slot and publication, then mark Retired), and a problem to report."""

    rows: tuple[dict[str, Any], ...]
    serving: int
    catching_up: int | None
    retire: tuple[int, ...] = ()
    cut_over: bool = False
    problem: str | None = None

    @property
    def running(self) -> tuple[int, ...]:
        """The revisions whose connectors run: the serving one and the one catching up."""
        return (self.serving,) if self.catching_up is None else (self.serving, self.catching_up)


def _phase(rows: Sequence[Mapping[str, Any]], phase: str) -> int | None:
    found = [int(r["revision"]) for r in rows if r.get("phase") == phase]
    return max(found) if found else None


def revision_step(
    source: Source,
    logs: Mapping[str, Log],
    recorded: Sequence[Mapping[str, Any]],
    positions: Mapping[int, CapturePosition | None],
    now: str,
    slots: Mapping[int, int | None] | None = None,
    restarted: Collection[int] = (),
) -> RevisionStep:
    """The next step for a Source whose status recorded `recorded` revision rows, given the
    positions of the connectors that run and their slots' confirmed positions (by revision;
    missing: not read, None: no slot), and the revisions whose connectors were started again
    since the last step (a worker or run that died, a task restarted)."""
    rows = [dict(r) for r in recorded]
    serving = _phase(rows, SERVING)
    if serving is None:
        serving = 1
        rows.insert(0, revision_row(source, logs, 1, SERVING, now))
    catching = _phase(rows, CATCHING_UP)
    wanted = source.spec.snapshot.epoch
    problem = None
    cut_over = False

    def row_of(revision: int) -> dict[str, Any]:
        return next(r for r in rows if r["revision"] == revision)

    for revision in (serving, catching):
        if revision is None:
            continue
        row = row_of(revision)
        slot = (slots or {}).get(revision)
        if (
            revision in restarted
            and row.get("snapshotDone") is not True
            and slot is not None
            and (revision > 1 or source.spec.snapshot.mode == "Initial")
        ):
            row["snapshot"] = "Interrupted"  # started again before its snapshot was whole
        position = positions.get(revision)
        if position is not None:
            _note(row, position)
        check = snapshot_check(position, slot)
        if position is not None and position.streaming and check is None:
            check = "Unchecked"  # it streamed before its snapshot's point could be compared
        if check == "Interrupted" or (check is not None and "snapshot" not in row):
            row["snapshot"] = check
    have = int(row_of(serving).get("epoch", 0))
    if wanted < have:
        problem = (
            f"spec.snapshot.epoch: {wanted} is below {have}, the epoch of revision {serving}, "
            f"which serves: the epoch only moves forward; set it to {have} (or more, to take a "
            "new snapshot)"
        )
    target = max(wanted, have)
    if catching is not None and (
        int(row_of(catching).get("epoch", 0)) != target
        or row_of(catching).get("snapshot") == "Interrupted"
    ):
        row_of(catching)["phase"] = RETIRING  # asked for no more, or not to be trusted
        catching = None
    serving_interrupted = row_of(serving).get("snapshot") == "Interrupted"
    if catching is None and (target > have or serving_interrupted):
        catching = max(int(r["revision"]) for r in rows) + 1
        row = revision_row(source, logs, catching, CATCHING_UP, now)
        row["epoch"] = target
        rows.append(row)
    elif catching is not None and _caught_up(positions.get(catching), positions.get(serving)):
        row_of(serving)["phase"] = RETIRING
        row_of(catching)["phase"] = SERVING
        row_of(catching)["caughtUpAt"] = now
        serving, catching, cut_over = catching, None, True
    retire = tuple(int(r["revision"]) for r in rows if r.get("phase") == RETIRING)
    rows.sort(key=lambda r: int(r["revision"]))
    retired = [r for r in rows if r.get("phase") == RETIRED]
    dropped = {id(r) for r in retired[:-KEPT_RETIRED]} if len(retired) > KEPT_RETIRED else set()
    kept = tuple(r for r in rows if id(r) not in dropped)
    return RevisionStep(kept, serving, catching, retire, cut_over, problem)


def interrupted_message(revision: int) -> str:
    """What a Source says while its serving revision's snapshot is not to be trusted."""
    return (
        f"the snapshot of revision {revision} was interrupted and taken again from a later "
        "point, so changes made in between may be missing from its topics; a new revision "
        "takes a fresh snapshot beside it and serves once it has caught up"
    )


def interrupted(rows: Sequence[Mapping[str, Any]]) -> int | None:
    """The serving revision when its snapshot was interrupted (its rows may not be the
    table's until the revision replacing it serves), else None."""
    for row in rows:
        if row.get("phase") == SERVING and row.get("snapshot") == "Interrupted":
            return int(row["revision"])
    return None


def _note(row: dict[str, Any], position: CapturePosition) -> None:
    row["snapshotDone"] = position.snapshot_done
    if position.lsn is not None:
        row["position"] = lsn_text(position.lsn)


def _caught_up(new: CapturePosition | None, old: CapturePosition | None) -> bool:
    """Whether the revision catching up (`new`) has written what the serving one (`old`) has:
    its snapshot whole, and every transaction the serving one wrote whole (a serving connector
    that has committed no offset yet, e.g. one started with NoData, has written nothing)."""
    if new is None or not new.snapshot_done:
        return False
    if old is None or old.lsn is None:
        return True
    return new.lsn is not None and new.lsn >= old.lsn


def retired(rows: Sequence[Mapping[str, Any]], revision: int) -> tuple[dict[str, Any], ...]:
    """The rows with `revision` marked Retired (its connector, slot and publication gone)."""
    return tuple({**r, "phase": RETIRED} if r["revision"] == revision else dict(r) for r in rows)


def serving_topics(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each table's topic in the serving revision, as the rows recorded (empty: none did)."""
    for row in rows:
        if row.get("phase") == SERVING:
            return dict(row.get("topics") or {})
    return {}


def catching_up(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a revision is catching up beside the serving one."""
    return any(r.get("phase") == CATCHING_UP for r in rows)
