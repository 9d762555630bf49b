"""What `distributary run` shows: every log's end offsets and every view's position and lag.

A snapshot is read the way any Kafka tool would read it: a view's position is its revision's
consumer group's committed offsets, its lag the distance from there to its inputs' end offsets.
Records/s, the state and each revision's dead letters come from the progress topic the runner
publishes. The group is read before the end offsets, so a lag is never under-stated. What the
groups cannot tell (a change of a view that was refused, and why; the rewinds carried out) comes
from the run's plan and its state folder as a note per view, shown under the table and in the
summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from distributary.kafka.admin import KafkaAdmin
from distributary.plan.applications.runner_spec import RunnerSpec
from distributary.plan.pipelines.pipeline import PipelinePlan
from distributary.plan.revisions.positions import Offsets, offsets_json
from distributary.plan.revisions.progress import progress_key, records_behind
from distributary.plan.status.conditions import Problem


@dataclass(frozen=True)
class LogRow:
    """A log as its topic is now."""

    name: str
    topic: str
    end_offsets: dict[int, int]
    records: int


@dataclass(frozen=True)
class ViewNote:
    """What a view's group does not tell: a change refused (why, and the revision serving on),
    the rewinds carried out (`revisions.json`'s records), and why its application keeps
    failing."""

    serving: int = 1
    problem: Problem | None = None
    rewinds: tuple[Mapping[str, Any], ...] = ()
    failing: str | None = None  # why its application keeps failing (Stalled, ApplicationFailing)
    suspended: str | None = None  # what `spec.suspend` stopped (Ready False, Suspended)


def problem_line(name: str, problem: Problem, serving: int) -> str:
    """A refused change of view `name` for people: what is wrong, what to do, what runs."""
    text = f"view {name}: change refused ({problem.reason}): {problem.message}"
    if problem.reason == "HistoryIncomplete":
        text += (
            "; or restore the input's history (its records from offset 0, e.g. produced again "
            "into a fresh --state-dir) and run again"
        )
    return f"{text}. Revision {serving} keeps serving."


@dataclass(frozen=True)
class ViewRow:
    """A view's revision as its group and its progress records tell."""

    name: str
    revision: int
    output_topic: str
    position: Offsets
    lag: int
    state: str
    records_per_second: float
    dead_letters: int
    error: str | None = None
    note: ViewNote = ViewNote()
    event_time: bool = False  # an input declares a watermark
    batch_rows: int | None = None  # records the last micro-batch read (0: a watermark's batch)


@dataclass(frozen=True)
class JobRow:
    """A StreamJob's revision as its status tells: its group's position, its lag, its state,
    its dead letters."""

    name: str
    revision: int
    position: Offsets
    lag: int | None
    state: str
    dead_letters: int = 0

    def to_json(self) -> dict[str, Any]:
        """The job as the summary shows it."""
        return {
            "revision": self.revision,
            "position": offsets_json(self.position),
            "lag": self.lag,
            "state": self.state,
            "deadLetters": self.dead_letters,
        }


def job_row(name: str, status: Mapping[str, Any]) -> JobRow:
    """A job's row from the status its reconcile wrote."""
    position = {
        str(i["topic"]): {int(p): int(o) for p, o in (i.get("position") or {}).items()}
        for i in status.get("inputs") or []
    }
    ready: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
    )
    state = "Running" if ready.get("status") == "True" else str(ready.get("reason") or "Starting")
    lag = status.get("lag")
    letters = status.get("deadLetters")
    count = letters if isinstance(letters, int) else 0
    return JobRow(name, int(status.get("revision") or 1), position, lag, state, count)


@dataclass(frozen=True)
class EndRow:
    """A Source or a Sink as the live table shows it: where it reads and writes, how far it is,
    its lag and its state, each already in words."""

    kind: str  # "source" or "sink"
    name: str
    where: str
    position: str
    lag: str
    state: str


def source_row(name: str, entry: Mapping[str, Any]) -> EndRow:
    """A Source's row from what the run records of it (`<state>/sources.json`): its slot's lag in
    bytes and seconds, the Logs it writes, the Ready reason (and a DataLossRisk)."""
    status = entry.get("status") or {}
    slot = status.get("slot") or {}
    logs = ", ".join(str(t.get("log")) for t in status.get("tables") or [])
    lag = "-"
    if isinstance(slot.get("lagBytes"), int):
        seconds = slot.get("lagSeconds")
        lag = f"{slot['lagBytes']:,} B" + (f" / {seconds:.0f} s" if seconds is not None else "")
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready") or {}
    state = "Capturing" if ready.get("status") == "True" else str(ready.get("reason") or "Starting")
    if "DataLossRisk" in conditions:
        state += ": " + str(conditions["DataLossRisk"].get("message"))
    return EndRow(
        "source", name, f"slot {slot.get('name') or '-'} -> {logs or '-'}", "", lag, state
    )


def sink_row(name: str, entry: Mapping[str, Any]) -> EndRow:
    """A Sink's row from what the run records of it (`<state>/sinks.json`)."""
    position = sum(int(o) for o in (entry.get("position") or {}).values())
    lag = entry.get("lag")
    if entry.get("problem"):
        state = f"Stalled: {entry['problem']}"
    else:
        state = "Running" if entry.get("ready") else "Starting"
    where = f"{entry.get('topic')} -> {entry.get('table')}"
    return EndRow("sink", name, where, str(position), "-" if lag is None else str(lag), state)


@dataclass(frozen=True)
class Snapshot:
    """Logs, views and jobs (and Sources and Sinks) at one moment."""

    logs: tuple[LogRow, ...]
    views: tuple[ViewRow, ...]
    jobs: tuple[JobRow, ...] = ()
    ends: tuple[EndRow, ...] = ()

    def all_end_offsets(self) -> dict[str, dict[int, int]]:
        """End offsets of every log's topic, to tell whether anything moved."""
        return {log.topic: log.end_offsets for log in self.logs}

    def to_json(self) -> dict[str, Any]:
        """The snapshot as the summary JSON object (`jobs` when there are)."""
        found = {
            "logs": {
                log.name: {
                    "topic": log.topic,
                    "endOffsets": {str(p): o for p, o in sorted(log.end_offsets.items())},
                    "records": log.records,
                }
                for log in self.logs
            },
            "views": {view.name: _view_json(view) for view in self.views},
        }
        if self.jobs:
            found["jobs"] = {job.name: job.to_json() for job in self.jobs}
        return found


def _view_json(view: ViewRow) -> dict[str, Any]:
    found: dict[str, Any] = {
        "revision": view.revision,
        "outputTopic": view.output_topic,
        "position": offsets_json(view.position),
        "lag": view.lag,
        "state": view.state,
        "deadLetters": view.dead_letters,
    }
    if view.note.failing is not None:
        found["keepsFailing"] = view.note.failing
    if view.note.suspended is not None:
        found["suspended"] = view.note.suspended
    problem = view.note.problem
    if problem is not None:
        found["problem"] = {"reason": problem.reason, "message": problem.message}
    if view.note.rewinds:
        found["rewinds"] = [dict(r) for r in view.note.rewinds]
    return found


def observe(
    plan: PipelinePlan,
    specs: Sequence[RunnerSpec],
    admin: KafkaAdmin,
    progress: Mapping[str, Mapping[str, Any]],
    notes: Mapping[str, ViewNote] | None = None,
    jobs: Mapping[str, Mapping[str, Any]] | None = None,
) -> Snapshot:
    """Read positions, end offsets and progress into a snapshot, with each view's note (by
    view name) and each job as its status (`jobs`: entries by `namespace/name`) tells."""
    groups = {spec.consumer_group: admin.committed(spec.consumer_group) for spec in specs}
    topics = sorted({t.topic.name for t in plan.topics})
    marks = admin.watermarks(topics)
    logs = tuple(
        LogRow(
            name=t.log.name,
            topic=t.topic.name,
            end_offsets={p: end for p, (_, end) in sorted(marks.get(t.topic.name, {}).items())},
            records=sum(end - start for start, end in marks.get(t.topic.name, {}).values()),
        )
        for t in plan.topics
    )
    views = tuple(
        _view_row(spec, groups[spec.consumer_group], marks, progress, (notes or {}).get(spec.name))
        for spec in specs
    )
    rows = tuple(
        job_row(key.split("/", 1)[-1], entry.get("status") or {})
        for key, entry in sorted((jobs or {}).items())
    )
    return Snapshot(logs=logs, views=views, jobs=rows)


def _view_row(
    spec: RunnerSpec,
    position: Offsets,
    marks: Mapping[str, Mapping[int, tuple[int, int]]],
    progress: Mapping[str, Mapping[str, Any]],
    note: ViewNote | None = None,
) -> ViewRow:
    ends = {
        source.topic: {p: end for p, (_, end) in marks.get(source.topic, {}).items()}
        for source in spec.inputs
    }
    record = progress.get(progress_key(spec.kind, spec.namespace, spec.name, spec.revision), {})
    return ViewRow(
        name=spec.name,
        revision=spec.revision,
        output_topic=spec.output.topic if spec.output else "-",
        position=position,
        lag=records_behind(position, ends),
        state="Suspended" if note is not None and note.suspended else _state(record),
        records_per_second=float(record.get("processedRowsPerSecond") or 0.0),
        dead_letters=revision_dead_letters(record),
        error=record.get("error"),
        note=note or ViewNote(),
        event_time=any(source.watermark is not None for source in spec.inputs),
        batch_rows=record.get("numInputRows"),
    )


def _state(record: Mapping[str, Any]) -> str:
    return str(record.get("state") or "Starting")


def revision_dead_letters(record: Mapping[str, Any]) -> int:
    """A revision's dead letters from its last progress record: its runner's count over the
    revision's whole run (read back from Kafka when it starts). Not the records in the view's
    dead-letter topic: every revision of the view writes there, and under exactly-once delivery
    transaction markers take offsets too. 0 before its runner has reported."""
    count = record.get("deadLetters")
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def render(snapshot: Snapshot) -> Table:
    """The live table: logs, then views; under it why a view's change was refused."""
    refused = {
        v.name: problem_line(v.name, v.note.problem, v.note.serving)
        for v in snapshot.views
        if v.note.problem is not None
    }
    table = Table(
        box=None,
        pad_edge=False,
        header_style="bold",
        caption="\n".join(refused.values()) or None,
        caption_justify="left",
    )
    for column in (
        "",
        "name",
        "topic / revision",
        "end offsets / position",
        "lag",
        "rec/s",
        "state",
    ):
        table.add_column(column)
    for log in snapshot.logs:
        ends = " ".join(str(o) for _, o in sorted(log.end_offsets.items())) or "-"
        table.add_row("log", log.name, log.topic, f"{ends}  ({log.records} records)", "", "", "")
    for view in snapshot.views:
        position = sum(o for offsets in view.position.values() for o in offsets.values())
        state = view.state + (f": {view.error}" if view.error else "")
        if view.dead_letters:
            state += f" ({view.dead_letters} dead letters)"
        if view.note.problem is not None:
            state += f"; change refused: {view.note.problem.reason} (below)"
        table.add_row(
            "view",
            view.name,
            f"r{view.revision} -> {view.output_topic}",
            str(position),
            str(view.lag),
            f"{view.records_per_second:,.0f}",
            state,
        )
    for job in snapshot.jobs:
        position = sum(o for offsets in job.position.values() for o in offsets.values())
        lag = "-" if job.lag is None else str(job.lag)
        state = job.state + (f" ({job.dead_letters} dead letters)" if job.dead_letters else "")
        table.add_row("job", job.name, f"r{job.revision}", str(position), lag, "", state)
    for end in snapshot.ends:
        table.add_row(end.kind, end.name, end.where, end.position, end.lag, "", end.state)
    return table


def one_line(snapshot: Snapshot) -> str:
    """A short status line for logs that are not a terminal."""
    parts = [
        f"{v.name} r{v.revision} lag {v.lag} {v.state}"
        + (f", change refused: {v.note.problem.reason}" if v.note.problem is not None else "")
        for v in snapshot.views
    ]
    parts += [f"{j.name} r{j.revision} lag {j.lag} {j.state}" for j in snapshot.jobs]
    parts += [f"{e.kind} {e.name} lag {e.lag} {e.state}" for e in snapshot.ends]
    return "; ".join(parts) or "no views"
