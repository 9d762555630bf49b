"""What `distributary run` shows: every log's end offsets and every view's position and lag.

A snapshot is read the way any Kafka tool would read it: a view's position is its revision's
consumer group's committed offsets, its lag the distance from there to its inputs' end offsets.
Records/s, the state and dead letters come from the progress topic the runner publishes. The group
is read before the end offsets, so a lag is never under-stated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from distributary.kafka.admin import KafkaAdmin
from distributary.plan.pipeline import PipelinePlan
from distributary.plan.positions import Offsets, offsets_json
from distributary.plan.progress import progress_key, records_behind
from distributary.plan.runner_spec import RunnerSpec


@dataclass(frozen=True)
class LogRow:
    """A log as its topic is now."""

    name: str
    topic: str
    end_offsets: dict[int, int]
    records: int


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


@dataclass(frozen=True)
class Snapshot:
    """Logs and views at one moment."""

    logs: tuple[LogRow, ...]
    views: tuple[ViewRow, ...]

    def all_end_offsets(self) -> dict[str, dict[int, int]]:
        """End offsets of every log's topic, to tell whether anything moved."""
        return {log.topic: log.end_offsets for log in self.logs}

    def to_json(self) -> dict[str, Any]:
        """The snapshot as the summary JSON object."""
        return {
            "logs": {
                log.name: {
                    "topic": log.topic,
                    "endOffsets": {str(p): o for p, o in sorted(log.end_offsets.items())},
                    "records": log.records,
                }
                for log in self.logs
            },
            "views": {
                view.name: {
                    "revision": view.revision,
                    "outputTopic": view.output_topic,
                    "position": offsets_json(view.position),
                    "lag": view.lag,
                    "state": view.state,
                    "deadLetters": view.dead_letters,
                }
                for view in self.views
            },
        }


def observe(
    plan: PipelinePlan,
    specs: Sequence[RunnerSpec],
    admin: KafkaAdmin,
    progress: Mapping[str, Mapping[str, Any]],
) -> Snapshot:
    """Read positions, end offsets and progress into a snapshot."""
    groups = {spec.consumer_group: admin.committed(spec.consumer_group) for spec in specs}
    topics = sorted({t.topic.name for t in plan.topics} | {s.dead_letter_topic for s in specs})
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
    views = tuple(_view_row(spec, groups[spec.consumer_group], marks, progress) for spec in specs)
    return Snapshot(logs=logs, views=views)


def _view_row(
    spec: RunnerSpec,
    position: Offsets,
    marks: Mapping[str, Mapping[int, tuple[int, int]]],
    progress: Mapping[str, Mapping[str, Any]],
) -> ViewRow:
    ends = {
        source.topic: {p: end for p, (_, end) in marks.get(source.topic, {}).items()}
        for source in spec.inputs
    }
    record = progress.get(progress_key(spec.kind, spec.namespace, spec.name, spec.revision), {})
    letters = marks.get(spec.dead_letter_topic, {})
    return ViewRow(
        name=spec.name,
        revision=spec.revision,
        output_topic=spec.output.topic if spec.output else "-",
        position=position,
        lag=records_behind(position, ends),
        state=str(record.get("state") or "Starting"),
        records_per_second=float(record.get("processedRowsPerSecond") or 0.0),
        # Records in the view's dead-letter topic (shared by its revisions): survives restarts.
        dead_letters=sum(end - start for start, end in letters.values()),
        error=record.get("error"),
    )


def render(snapshot: Snapshot) -> Table:
    """The live table: logs, then views."""
    table = Table(box=None, pad_edge=False, header_style="bold")
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
        table.add_row(
            "view",
            view.name,
            f"r{view.revision} -> {view.output_topic}",
            str(position),
            str(view.lag),
            f"{view.records_per_second:,.0f}",
            state,
        )
    return table


def one_line(snapshot: Snapshot) -> str:
    """A short status line for logs that are not a terminal."""
    parts = [f"{v.name} r{v.revision} lag {v.lag} {v.state}" for v in snapshot.views]
    return "; ".join(parts) or "no views"
