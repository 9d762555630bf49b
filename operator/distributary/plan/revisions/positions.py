"""Positions in logs as plain data: offsets per partition, lag, and Spark's JSON form of offsets.

A consumer's position is its logical clock in a log, and everything the operator reports about
it (lag, progress, record counts) is arithmetic on three maps of the same shape: where each
partition starts, where it ends and where the consumer is. That arithmetic lives here, free of
any client, so it is tested without a broker and shared by the adapter, the runner's progress
records and the status writers.

Spark writes offsets as JSON objects whose partition keys are strings (`{"clicks": {"0": 12}}`,
with -2 meaning earliest and -1 latest in starting offsets); `parse_offsets` and
`render_offsets` convert between that form and `Offsets`, whose partitions are ints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from distributary.errors import DistributaryError
from distributary.plan.status.conditions import parse_time

Offsets = dict[str, dict[int, int]]
"""Topic -> partition -> offset (the next record to read, or a watermark)."""

Watermarks = dict[str, dict[int, tuple[int, int]]]
"""Topic -> partition -> (start, end): the first retained offset and the next offset to write."""

EARLIEST = -2
LATEST = -1


RATE_SECONDS = 10.0  # an input rate is measured over at least this long


def input_rate(
    mark: Mapping[str, Any] | None, rate: float | None, records: int, now: datetime
) -> tuple[dict[str, Any], float | None]:
    """How fast inputs grow: from `mark` (`{"at": RFC 3339, "records": n}`, the sum of their end
    offsets then) to `records` now. The mark to keep, and the rate (records/s; `rate`, the last
    one, until `RATE_SECONDS` have passed since the mark). The rate is measured from the mark
    once that long has passed, and the mark moves on then, so every rate is measured over that
    long or more, never over a moment between two reads. The mark's time keeps milliseconds: a
    time to the second would overstate the seconds by up to one, and understate the rate.

    Inputs that do not grow keep the mark where it is and the rate at 0, so an idle view's status
    does not change at every observation (it was written anew each time, for nothing). The first
    growth after that is measured from the mark, over the idle time too: for one observation the
    rate is lower than the inputs grow now (a cutover that waits for lag under the rate x 2 s
    then waits for a little less lag, never for more)."""
    moment = now.astimezone(UTC) if now.tzinfo is not None else now
    here = {
        "at": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "records": records,
    }
    try:
        at = parse_time(str(mark["at"])) if mark and mark.get("at") else None
    except ValueError:  # not a time: measured afresh
        at = None
    if mark is None or at is None:
        return here, rate
    if rate == 0 and records == int(mark.get("records") or 0):  # idle: nothing to measure
        return dict(mark), rate
    seconds = (now - at).total_seconds()
    if seconds < RATE_SECONDS:
        return dict(mark), rate
    return here, round(max(records - int(mark.get("records") or 0), 0) / seconds, 3)


class OffsetsError(DistributaryError, ValueError):
    """Offsets in Spark's JSON form could not be read; the message names the part that is wrong."""


def total_lag(lag: Mapping[str, Mapping[int, int]]) -> int:
    """The records still to read, summed over every topic and partition of `lag`."""
    return sum(sum(partitions.values()) for partitions in lag.values())


def lag_per_topic(lag: Mapping[str, Mapping[int, int]]) -> dict[str, int]:
    """The records still to read in each topic, summed over its partitions."""
    return {topic: sum(partitions.values()) for topic, partitions in sorted(lag.items())}


def partition_lag(
    start: Mapping[str, Mapping[int, int]],
    end: Mapping[str, Mapping[int, int]],
    committed: Mapping[str, Mapping[int, int]],
) -> Offsets:
    """The records a consumer at `committed` still has to read, per partition of `end`.

    A partition with no committed offset, or one behind the start of retained history (records
    it never read were deleted by retention), counts from `start`: those retained records are
    what is left to read. A position past the end counts as caught up, never as negative lag.
    """
    lag: Offsets = {}
    for topic, ends in sorted(end.items()):
        starts, positions = start.get(topic, {}), committed.get(topic, {})
        lag[topic] = {}
        for partition, end_offset in sorted(ends.items()):
            first = starts.get(partition, 0)
            position = max(positions.get(partition, first), first)
            lag[topic][partition] = max(end_offset - position, 0)
    return lag


def retained_records(
    start: Mapping[str, Mapping[int, int]], end: Mapping[str, Mapping[int, int]]
) -> int:
    """The records a log holds now: end minus start, summed over its partitions (on a compacted
    topic an upper bound, as compaction leaves gaps in the offsets)."""
    return sum(
        max(end_offset - start.get(topic, {}).get(partition, 0), 0)
        for topic, ends in end.items()
        for partition, end_offset in ends.items()
    )


def split_watermarks(
    watermarks: Mapping[str, Mapping[int, tuple[int, int]]],
) -> tuple[Offsets, Offsets]:
    """The start offsets and the end offsets of `watermarks`."""
    start = {t: {p: first for p, (first, _) in parts.items()} for t, parts in watermarks.items()}
    end = {t: {p: last for p, (_, last) in parts.items()} for t, parts in watermarks.items()}
    return start, end


def parse_offsets(value: str | Mapping[str, Any]) -> Offsets:
    """Offsets from Spark's JSON form, given as text or as the decoded object.

    `{"clicks": {"0": 12, "1": 7}}` becomes `{"clicks": {0: 12, 1: 7}}`. Offsets may be -2
    (earliest) or -1 (latest), as in Spark's `startingOffsets`; anything else that is not a
    partition number mapped to a whole number raises `OffsetsError`.
    """
    decoded: Any = value
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError as exc:
            raise OffsetsError(
                f"offsets {value[:80]!r} are not JSON ({exc.msg}): write them as "
                '{"<topic>": {"<partition>": <offset>}}'
            ) from None
    if not isinstance(decoded, Mapping):
        raise OffsetsError(
            'offsets must be a JSON object {"<topic>": {"<partition>": <offset>}}, '
            f"not {type(decoded).__name__}"
        )
    return {str(topic): _partitions(str(topic), parts) for topic, parts in decoded.items()}


def _partitions(topic: str, partitions: Any) -> dict[int, int]:
    if not isinstance(partitions, Mapping):
        raise OffsetsError(
            f"offsets of topic {topic!r} must be an object of partition to offset, "
            f'e.g. {{"0": 12}}, not {type(partitions).__name__}'
        )
    parsed: dict[int, int] = {}
    for key, offset in partitions.items():
        partition = _partition_number(topic, key)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
            raise OffsetsError(
                f"offset of topic {topic!r} partition {partition} is {offset!r}: an offset is "
                f"a whole number, {LATEST} (latest) or {EARLIEST} (earliest)"
            )
        parsed[partition] = offset
    return dict(sorted(parsed.items()))


def _partition_number(topic: str, key: Any) -> int:
    text = str(key)
    if not text.isascii() or not text.isdigit():
        raise OffsetsError(
            f"partition {key!r} of topic {topic!r} is not a partition number: "
            'partitions are written as "0", "1", ...'
        )
    return int(text)


def offsets_json(offsets: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    """`offsets` as Spark's JSON object (string partition keys), topics and partitions in order,
    ready to embed in another JSON document."""
    return {
        topic: {str(partition): offset for partition, offset in sorted(partitions.items())}
        for topic, partitions in sorted(offsets.items())
    }


def render_offsets(offsets: Mapping[str, Mapping[int, int]]) -> str:
    """`offsets` as compact JSON text in Spark's form, e.g. `{"clicks":{"0":12}}`; the inverse of
    `parse_offsets`."""
    return json.dumps(offsets_json(offsets), separators=(",", ":"))


class CoverError(DistributaryError, ValueError):
    """A `--covers` argument is not LOG:PARTITION:OFFSET; the message says what is wrong."""


def parse_cover(text: str) -> tuple[str, int, int]:
    """`LOG:PARTITION:OFFSET` as (log, partition, offset): a record the position must cover."""
    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        raise CoverError(f"{text!r}: write LOG:PARTITION:OFFSET, e.g. page-views:0:41")
    log, partition, offset = parts
    if not partition.isdigit() or not offset.isdigit():
        raise CoverError(f"{text!r}: the partition and the offset are whole numbers (LOG:P:O)")
    return log, int(partition), int(offset)


def uncovered(
    covers: list[tuple[str, int, int]], positions: Mapping[str, Mapping[int, int]]
) -> list[str]:
    """The covers a consumer's `positions` (log -> partition -> next offset to read) do not
    cover yet, each as `log:partition:offset (at N)`. A record is covered once it has been
    read, that is when the position is past its offset."""
    missing = []
    for log, partition, offset in covers:
        at = positions.get(log, {}).get(partition)
        if at is None or at <= offset:
            missing.append(f"{log}:{partition}:{offset} (at {'-' if at is None else at})")
    return missing


def lost_history(starts: Mapping[str, Mapping[int, int]], topics: Mapping[str, str]) -> str | None:
    """Why reading `topics` (topic -> log) from the start would miss records: the first
    partition whose first retained offset is above 0 (retention or deletion removed what came
    before), or None when every partition still starts at 0."""
    for topic, log in sorted(topics.items()):
        for partition, first in sorted(starts.get(topic, {}).items()):
            if first > 0:
                return (
                    f"input log {log} (topic {topic}) has lost its history to retention: "
                    f"partition {partition} starts at offset {first}, not 0"
                )
    return None


def compacted_history(
    read: Mapping[str, Mapping[int, Sequence[int]]],
    starts: Mapping[str, Mapping[int, int]],
    topics: Mapping[str, str],
) -> str | None:
    """Why reading compacted `topics` (topic -> log) from the start would miss records: the first
    gap in the offsets `read` from the head of a partition (from its first retained offset on),
    which compaction left where it removed older records of a key. None when there is none."""
    for topic, log in sorted(topics.items()):
        for partition, offsets in sorted(read.get(topic, {}).items()):
            expected = starts.get(topic, {}).get(partition, 0)
            for offset in sorted(offsets):
                if offset > expected:
                    missing = (
                        f"offset {expected}"
                        if offset == expected + 1
                        else f"offsets {expected} to {offset - 1}"
                    )
                    return (
                        f"input log {log} (topic {topic}) is compacted and compaction has "
                        f"removed records from its history: partition {partition} has no "
                        f"records at {missing}, so a reprocess would see only the latest record "
                        "of some keys"
                    )
                expected = offset + 1
    return None


RISK_SHARE = 0.1  # a position this close to the oldest retained record is at risk


def data_loss_risk(
    position: Mapping[int, int], starts: Mapping[int, int], ends: Mapping[int, int]
) -> str | None:
    """Whether a consumer at `position` in one topic may lose records to retention: records it
    has not read were already deleted, or its position is within 10% of the retained range from
    the oldest retained offset (the next to go) while it still lags. A message, or None."""
    for partition, end in sorted(ends.items()):
        first = starts.get(partition, 0)
        at = position.get(partition, 0)
        if at < first:
            return f"partition {partition}: records {at} to {first - 1} were deleted before read"
        retained = end - first
        if first > 0 and at < end and at - first < max(1, RISK_SHARE * retained):
            return (
                f"partition {partition}: position {at} is {at - first} record(s) from the oldest "
                f"retained offset {first}; retention deletes the oldest records first"
            )
    return None


def rewind_targets(
    kind: str,
    starts: Mapping[int, int],
    ends: Mapping[int, int],
    *,
    explicit: Mapping[int, int] | None = None,
    by_time: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """Where a rewind puts a consumer in each partition of one topic, kept within what the
    partition retains: the first retained offset (earliest), the end (latest), the first record
    at or after a time (`by_time`, -1 where there is none: the end), or `explicit` offsets
    (partitions not named: earliest)."""
    targets = {}
    for partition, end in sorted(ends.items()):
        first = starts.get(partition, 0)
        if kind == "latest":
            wanted = end
        elif kind == "timestamp":
            found = (by_time or {}).get(partition, -1)
            wanted = end if found < 0 else found
        elif kind == "offsets":
            wanted = (explicit or {}).get(partition, first)
        else:
            wanted = first
        targets[partition] = min(max(wanted, first), end)
    return targets


def rewind_moves(
    kind: str,
    committed: Mapping[str, Mapping[int, int]],
    watermarks: Mapping[str, Mapping[int, tuple[int, int]]],
    *,
    explicit: Mapping[int, int] | None = None,
    by_time: Mapping[str, Mapping[int, int]] | None = None,
) -> list[dict[str, Any]]:
    """Every partition of the topics of `watermarks` as a rewind of `kind` moves a consumer now
    at `committed`: its position before (None where it has committed none) and after
    (`rewind_targets`), as `status.lastRewind.offsets` lists them, topics and partitions in
    order. `by_time` is each topic's `offsets_for_time` for a rewind to a timestamp."""
    moves = []
    for topic, marks in sorted(watermarks.items()):
        targets = rewind_targets(
            kind,
            {p: first for p, (first, _) in marks.items()},
            {p: end for p, (_, end) in marks.items()},
            explicit=explicit,
            by_time=(by_time or {}).get(topic),
        )
        for partition, target in targets.items():
            before = committed.get(topic, {}).get(partition)
            moves.append(
                {"topic": topic, "partition": partition, "fromOffset": before, "toOffset": target}
            )
    return moves


def moved_from(
    committed: Mapping[str, Mapping[int, int]], moves: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """A rewind's recorded `moves` with each partition's `fromOffset` where the group stands
    just before it moves (`committed`, once the old process can commit no more): the position
    recorded ahead was read before that process stopped, and it may have read on since. Where
    the group has committed nothing, or already stands at the target (moved before a restart
    of the operator), the recorded position stays."""
    found = []
    for move in moves:
        at = committed.get(str(move["topic"]), {}).get(int(move["partition"]))
        found.append(
            {**move, "fromOffset": at} if at is not None and at != move["toOffset"] else dict(move)
        )
    return found


def rewind_destinations(moves: Sequence[Mapping[str, Any]]) -> Offsets:
    """The offsets to commit for a rewind's recorded moves (`rewind_moves`)."""
    offsets: Offsets = {}
    for move in moves:
        offsets.setdefault(str(move["topic"]), {})[int(move["partition"])] = int(move["toOffset"])
    return offsets
