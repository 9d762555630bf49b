"""Positions a log does not have: refused, never approximated.

A rewind or a starting position names a place in a log: a partition and an offset, or the
first record at or after a time. Kafka answers a question about a place that does not exist
with the nearest one it has (an offset past the end is the end, a time no record has reached is
the end too, a time before retention is the oldest retained record), and moving a consumer
there silently skips or re-reads records the user never asked about. So the request is checked
against what the log holds first, here, from the partitions' watermarks and Kafka's answer to
`offsetsForTimes`, and an impossible one becomes a message that names the field, the log and
what it does hold; the caller moves nothing.

Two places are not impossible, though Kafka has no record there yet: a partition (or a log of
several) whose every record is older than the time asked for starts at its end, which is where
its first record at or after that time will be written, as long as some rewound partition has
reached the time; and an offset equal to a partition's end, its next record.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from distributary.errors import DistributaryError
from distributary.plan.applications.runner_spec import StartingPosition
from distributary.plan.revisions.positions import Offsets

PARTIAL_HISTORY = "spec.upgrade.allowPartialHistory"  # a view's switch to read what remains


class PositionRefusedError(DistributaryError, ValueError):
    """A rewind or a starting position names a place its log does not have; the message names
    the field, what is wrong and what to do. Nothing was moved."""


def refused_position(
    field: str,
    start: StartingPosition,
    watermarks: Mapping[str, Mapping[int, tuple[int, int]]],
    logs: Mapping[str, str],
    *,
    by_time: Offsets | None = None,
    partial_history: bool | None = None,
) -> str | None:
    """Why `start` (the position at `field`, e.g. `spec.rewind.to`) cannot be taken in the
    topics of `watermarks` (topic -> partition -> (first retained, end)), or None when it can.
    `logs` names each topic's Log for people; `by_time` is Kafka's first offset at or after
    the time in each partition (-1: none), for a position by time. `partial_history` is the
    spec's allowance to read what retention left (None: the kind has no such switch)."""
    if start.kind == "offsets":
        offsets = start.offsets or {}
        return _refused_offsets(f"{field}.offsets", offsets, watermarks, logs, partial_history)
    if start.kind == "timestamp" and start.timestamp_ms is not None:
        at = start.timestamp_ms
        found = by_time or {}
        return _refused_time(f"{field}.timestamp", at, watermarks, logs, found, partial_history)
    return None  # earliest and latest are places every partition has


def _refused_offsets(
    field: str,
    explicit: Mapping[int, int],
    watermarks: Mapping[str, Mapping[int, tuple[int, int]]],
    logs: Mapping[str, str],
    partial_history: bool | None,
) -> str | None:
    """The first partition named that a topic lacks, then the first offset past a partition's
    end, then the first below its oldest retained record (unless partial history is allowed)."""
    for topic, marks in sorted(watermarks.items()):
        log = _named(topic, logs)
        missing = sorted(set(explicit) - set(marks))
        if missing:
            return (
                f"{field} names partition {missing[0]}, but {log} has {_count(len(marks))}"
                f"{_range(len(marks))}: name only partitions the log has"
            )
    for topic, marks in sorted(watermarks.items()):
        for partition, offset in sorted(explicit.items()):
            first, end = marks[partition]
            if offset > end:
                return (
                    f"{field} asks for offset {offset} of partition {partition}, but "
                    f"{_named(topic, logs)} has written only up to offset {end} there: no "
                    f"record has reached offset {offset} yet; give an offset up to {end}, or "
                    "from: Latest"
                )
            if offset < first and not partial_history:
                return (
                    f"{field} asks for offset {offset} of partition {partition}, but "
                    f"{_named(topic, logs)} keeps records from offset {first} on there: "
                    f"retention deleted offsets {offset} to {first - 1}; give an offset from "
                    f"{first}, or from: Earliest{_allow(partial_history)}"
                )
    return None


def _refused_time(
    field: str,
    timestamp_ms: int,
    watermarks: Mapping[str, Mapping[int, tuple[int, int]]],
    logs: Mapping[str, str],
    by_time: Offsets,
    partial_history: bool | None,
) -> str | None:
    """Refused when no rewound partition has a record at or after the time (the move would
    only skip to the end), or when a partition's answer is its oldest retained record while
    retention deleted older ones: those may have been at or after the time too."""
    when = instant(timestamp_ms)
    found = {
        (topic, p): by_time.get(topic, {}).get(p, -1)
        for topic, marks in watermarks.items()
        for p in marks
    }
    if not any(offset >= 0 for offset in found.values()):
        names = ", ".join(_named(topic, logs) for topic in sorted(watermarks)) or "the log"
        return (
            f"{field} is {when}, but no record of {names} has reached that time yet: moving "
            "there would only skip to the end; give a time records have reached, or from: "
            "Latest to skip to the end"
        )
    if partial_history:
        return None
    for (topic, partition), offset in sorted(found.items()):
        first = watermarks[topic][partition][0]
        if offset >= 0 and offset == first and first > 0:
            return (
                f"{field} is {when}, but {_named(topic, logs)} has lost records of partition "
                f"{partition} to retention (offsets 0 to {first - 1}), and the first one it "
                f"keeps, offset {first}, is already at or after that time: records the rewind "
                "asks for may be gone; give a later time, or from: Earliest"
                f"{_allow(partial_history)}"
            )
    return None


def instant(timestamp_ms: int) -> str:
    """Epoch milliseconds as RFC 3339 in UTC, to the millisecond."""
    moment = datetime.fromtimestamp(timestamp_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _named(topic: str, logs: Mapping[str, str]) -> str:
    log = logs.get(topic)
    return f"log {log} (topic {topic})" if log and log != topic else f"log {topic}"


def _count(partitions: int) -> str:
    return f"{partitions} partition{'' if partitions == 1 else 's'}"


def _range(partitions: int) -> str:
    if partitions == 0:
        return ""
    return " (partition 0)" if partitions == 1 else f" (0 to {partitions - 1})"


def _allow(partial_history: bool | None) -> str:
    if partial_history is None:
        return ""
    return f", or set {PARTIAL_HISTORY}: true to read what remains"
