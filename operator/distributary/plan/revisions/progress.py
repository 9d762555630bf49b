"""A running revision's progress: from Spark's micro-batch reports to positions, ranges and records.

Spark checkpoints its own offsets and commits none to Kafka, so the runner turns each
micro-batch report into three things: the offsets to mirror into the revision's consumer group
(its position, which every Kafka tool can read), the offset range whose records must be scanned
for the dead-letter topic, and the progress record the local loop and the operator display.

A range is scanned when the batch saw records that did not parse, and also when the reports do not
join up with the position already committed: after a crash between Spark's commit and the group's,
or when reports were dropped, the records in between were processed but never checked for dead
letters. Everything here is pure, so these rules are tested without Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from distributary.api.names import PROGRESS_TOPIC as PROGRESS_TOPIC
from distributary.plan.revisions.positions import Offsets, offsets_json, parse_offsets

CORRUPT_METRIC = "dead_letters"  # the observed metric counting unparseable records of one input


def merge(*many: Mapping[str, Mapping[int, int]]) -> Offsets:
    """Offsets of several inputs as one mapping (later ones win per partition)."""
    merged: Offsets = {}
    for offsets in many:
        for topic, partitions in offsets.items():
            merged.setdefault(topic, {}).update(partitions)
    return merged


def covers(
    position: Mapping[str, Mapping[int, int]], start: Mapping[str, Mapping[int, int]]
) -> bool:
    """Whether `position` reaches `start` on every partition `start` names."""
    return all(
        position.get(topic, {}).get(p, -1) >= offset
        for topic, partitions in start.items()
        for p, offset in partitions.items()
    )


def records_behind(
    position: Mapping[str, Mapping[int, int]], ends: Mapping[str, Mapping[int, int]]
) -> int:
    """Records between `position` and `ends`, over every partition in `ends`."""
    return sum(
        max(0, end - position.get(topic, {}).get(p, 0))
        for topic, partitions in ends.items()
        for p, end in partitions.items()
    )


@dataclass(frozen=True)
class Batch:
    """One micro-batch report, reduced to what the runner acts on."""

    batch_id: int
    timestamp: str
    start: Offsets  # empty for a query's first batch, which Spark reports without a start
    end: Offsets
    latest: Offsets
    rows: int
    corrupt: int
    input_rate: float
    processed_rate: float
    duration_ms: int
    # Where the batch's time went: Spark's phases (`addBatch`, `queryPlanning`, `walCommit`,
    # `commitOffsets`, `latestOffset`, ...) and `stateCommit`, its state stores' commits summed.
    phases_ms: Mapping[str, int] = field(default_factory=dict)


def batch_of(progress: Mapping[str, Any]) -> Batch:
    """A `Batch` from Spark's StreamingQueryProgress JSON."""
    sources = progress.get("sources") or []
    metrics = progress.get("observedMetrics") or {}
    corrupt = sum(
        int(row.get(CORRUPT_METRIC) or 0)
        for name, row in metrics.items()
        if name.startswith(CORRUPT_METRIC) and isinstance(row, Mapping)
    )
    return Batch(
        batch_id=int(progress.get("batchId", -1)),
        timestamp=str(progress.get("timestamp", "")),
        start=merge(*(_offsets(s.get("startOffset")) for s in sources)),
        end=merge(*(_offsets(s.get("endOffset")) for s in sources)),
        latest=merge(*(_offsets(s.get("latestOffset")) for s in sources)),
        rows=int(progress.get("numInputRows") or 0),
        corrupt=corrupt,
        input_rate=_rate(progress.get("inputRowsPerSecond")),
        processed_rate=_rate(progress.get("processedRowsPerSecond")),
        duration_ms=int((progress.get("durationMs") or {}).get("triggerExecution") or 0),
        phases_ms=_phases(progress),
    )


def _phases(progress: Mapping[str, Any]) -> dict[str, int]:
    durations = progress.get("durationMs") or {}
    phases = {
        name: int(ms)
        for name, ms in durations.items()
        if name != "triggerExecution" and isinstance(ms, int | float)
    }
    operators = [o for o in progress.get("stateOperators") or [] if isinstance(o, Mapping)]
    if operators:
        phases["stateCommit"] = sum(int(o.get("commitTimeMs") or 0) for o in operators)
    return phases


def _offsets(value: str | Mapping[str, Any] | None) -> Offsets:
    return parse_offsets(value) if value else {}


def _rate(value: Any) -> float:
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return 0.0
    return rate if rate == rate and rate not in (float("inf"), float("-inf")) else 0.0


@dataclass(frozen=True)
class Step:
    """What to do for one batch: scan `scan_from`..`end` for dead letters (None: nothing to scan;
    an empty `scan_from` means from the query's starting position), then commit `end`."""

    scan_from: Offsets | None
    end: Offsets
    commit: bool


def step(committed: Offsets | None, batch: Batch) -> Step:
    """The step for `batch`, given the position already committed for the group (None when the
    runner has not learned it yet: a fresh group starts where the batch starts)."""
    if not batch.end:
        return Step(scan_from=None, end={}, commit=False)
    known = committed if committed else None
    start = batch.start or None
    joined = known is None or start is None or _same_on(known, start)
    moved = known is None or not covers(known, batch.end)
    if batch.corrupt > 0 or not joined:
        # The range from what is committed (or the batch's own start) to the batch's end.
        origin = known if known is not None and not joined else (batch.start or {})
        return Step(scan_from=origin, end=batch.end, commit=moved)
    return Step(scan_from=None, end=batch.end, commit=moved)


def _same_on(committed: Offsets, start: Offsets) -> bool:
    return all(
        committed.get(topic, {}).get(p, 0) == offset
        for topic, partitions in start.items()
        for p, offset in partitions.items()
    )


def progress_key(kind: str, namespace: str, name: str, revision: int) -> str:
    """The key of a revision's record in the progress topic."""
    return f"{kind}/{namespace}/{name}/r{revision}"


def progress_record(
    identity: Mapping[str, Any],
    *,
    state: str,
    batch: Batch | None = None,
    position: Offsets | None = None,
    dead_letters: int = 0,
    error: str | None = None,
) -> dict[str, Any]:
    """The JSON value published for a revision: who it is, its state, and its last batch."""
    record: dict[str, Any] = {**identity, "state": state, "error": error}
    record["deadLetters"] = dead_letters
    if position is not None:
        record["position"] = offsets_json(position)
    if batch is not None:
        record.update(
            {
                "batchId": batch.batch_id,
                "timestamp": batch.timestamp,
                "numInputRows": batch.rows,
                "inputRowsPerSecond": round(batch.input_rate, 1),
                "processedRowsPerSecond": round(batch.processed_rate, 1),
                "batchDurationMs": batch.duration_ms,
                "batchPhasesMs": dict(batch.phases_ms),
                "latest": offsets_json(batch.latest),
                "lag": records_behind(position or batch.end, batch.latest)
                if batch.latest
                else None,
            }
        )
    return record


def topics_of(offsets: Iterable[Mapping[str, Mapping[int, int]]]) -> list[str]:
    """Every topic named in any of `offsets`, sorted."""
    return sorted({topic for item in offsets for topic in item})
