"""Rewinds and starting positions that name a place the log does not have are refused with a
message naming the field; places the log has, or will have next, are not."""

from __future__ import annotations

import pytest

from distributary.plan.applications.position_refusals import instant, refused_position
from distributary.plan.applications.runner_spec import StartingPosition

FIELD = "spec.rewind.to"
LOGS = {"clicks": "page-clicks"}
T = 1_700_000_000_000  # 2023-11-14T22:13:20Z
# Two partitions: 0 retains offsets 0 to 49, 1 lost 0 to 9 to retention and retains 10 to 29.
MARKS = {"clicks": {0: (0, 50), 1: (10, 30)}}


def offsets(**named: int) -> StartingPosition:
    return StartingPosition(kind="offsets", offsets={int(p[1:]): o for p, o in named.items()})


def at_time(ms: int = T) -> StartingPosition:
    return StartingPosition(kind="timestamp", timestamp_ms=ms)


@pytest.mark.parametrize("kind", ["earliest", "latest"])
def test_earliest_and_latest_are_never_refused(kind: str) -> None:
    empty = {"clicks": {0: (0, 0)}}
    start = StartingPosition.model_validate({"kind": kind})
    assert refused_position(FIELD, start, MARKS, LOGS) is None
    assert refused_position(FIELD, start, empty, LOGS) is None


@pytest.mark.parametrize(
    "start",
    [
        offsets(p0=0, p1=10),  # the oldest retained records
        offsets(p0=50, p1=30),  # the ends: the next records written
        offsets(p0=17),  # a partition not named starts at its earliest
        offsets(),
    ],
)
def test_offsets_the_partitions_hold_or_write_next_are_taken(start: StartingPosition) -> None:
    assert refused_position(FIELD, start, MARKS, LOGS) is None


@pytest.mark.parametrize(
    ("start", "marks", "said"),
    [
        (offsets(p2=0), MARKS, "names partition 2, but log page-clicks (topic clicks) has "
         "2 partitions (0 to 1)"),
        (offsets(p0=1, p7=3, p5=0), MARKS, "names partition 5,"),
        (offsets(p1=0), {"clicks": {0: (0, 4)}}, "has 1 partition (partition 0)"),
    ],
)  # fmt: skip
def test_a_partition_the_log_does_not_have_is_refused(
    start: StartingPosition, marks: dict[str, dict[int, tuple[int, int]]], said: str
) -> None:
    refused = refused_position(FIELD, start, marks, LOGS)
    assert refused is not None
    assert refused.startswith(f"{FIELD}.offsets ")
    assert said in refused


@pytest.mark.parametrize(("partition", "offset", "end"), [(0, 51, 50), (1, 31, 30), (0, 10**9, 50)])
def test_an_offset_past_the_end_is_refused_not_taken_as_the_end(
    partition: int, offset: int, end: int
) -> None:
    refused = refused_position(FIELD, offsets(**{f"p{partition}": offset}), MARKS, LOGS)
    assert refused is not None
    assert f"{FIELD}.offsets asks for offset {offset} of partition {partition}" in refused
    assert f"only up to offset {end}" in refused
    assert "from: Latest" in refused


@pytest.mark.parametrize("offset", [0, 5, 9])
def test_an_offset_retention_deleted_is_refused_unless_partial_history_is_allowed(
    offset: int,
) -> None:
    start = offsets(p1=offset)
    refused = refused_position(FIELD, start, MARKS, LOGS, partial_history=False)
    assert refused is not None
    assert f"deleted offsets {offset} to 9" in refused
    assert "spec.upgrade.allowPartialHistory: true" in refused
    # A kind without the switch (a job) is not told of it.
    without = refused_position(FIELD, start, MARKS, LOGS)
    assert without is not None
    assert "allowPartialHistory" not in without
    assert refused_position(FIELD, start, MARKS, LOGS, partial_history=True) is None


@pytest.mark.parametrize(
    "by_time",
    [
        {"clicks": {0: 42, 1: 20}},
        {"clicks": {0: 42, 1: -1}},  # every record of partition 1 is older: it starts at its end
        {"clicks": {0: 0, 1: 25}},  # partition 0 never lost a record: its first is no loss
    ],
)
def test_a_time_records_have_reached_is_taken(by_time: dict[str, dict[int, int]]) -> None:
    assert refused_position(FIELD, at_time(), MARKS, LOGS, by_time=by_time) is None


@pytest.mark.parametrize(
    ("marks", "by_time"),
    [
        (MARKS, {"clicks": {0: -1, 1: -1}}),
        (MARKS, {}),  # Kafka answered nothing for any partition
        ({"clicks": {0: (0, 0)}}, {"clicks": {0: -1}}),  # an empty log
        ({"clicks": {0: (0, 5)}, "views": {0: (0, 9)}}, {"clicks": {0: -1}, "views": {0: -1}}),
    ],
)
def test_a_time_no_record_has_reached_is_refused_not_a_jump_to_the_end(
    marks: dict[str, dict[int, tuple[int, int]]], by_time: dict[str, dict[int, int]]
) -> None:
    refused = refused_position(FIELD, at_time(), marks, LOGS, by_time=by_time)
    assert refused is not None
    assert refused.startswith(f"{FIELD}.timestamp is 2023-11-14T22:13:20.000Z, ")
    assert "has reached that time yet" in refused
    assert "log page-clicks (topic clicks)" in refused


def test_one_log_that_has_reached_the_time_is_enough_for_the_others_to_start_at_their_end() -> None:
    marks = {"clicks": {0: (0, 5)}, "views": {0: (0, 9)}}
    by_time = {"clicks": {0: -1}, "views": {0: 4}}
    assert refused_position(FIELD, at_time(), marks, LOGS, by_time=by_time) is None


@pytest.mark.parametrize("first", [1, 10, 1000])
def test_a_time_before_retention_is_refused_unless_partial_history_is_allowed(first: int) -> None:
    marks = {"clicks": {0: (0, 50), 1: (first, first + 20)}}
    by_time = {"clicks": {0: 3, 1: first}}  # partition 1's answer is its oldest retained record
    refused = refused_position(
        FIELD, at_time(), marks, LOGS, by_time=by_time, partial_history=False
    )
    assert refused is not None
    assert f"{FIELD}.timestamp is {instant(T)}" in refused
    assert f"partition 1 to retention (offsets 0 to {first - 1})" in refused
    assert f"offset {first}, is already at or after that time" in refused
    assert "from: Earliest" in refused
    allowed = refused_position(FIELD, at_time(), marks, LOGS, by_time=by_time, partial_history=True)
    assert allowed is None


def test_a_time_after_the_oldest_retained_record_is_no_loss() -> None:
    by_time = {"clicks": {0: 0, 1: 11}}  # partition 1's record 10 is older than the time
    assert refused_position(FIELD, at_time(), MARKS, LOGS, by_time=by_time) is None


def test_the_field_is_the_one_given() -> None:
    field = "spec.inputs[1].startingPosition"
    refused = refused_position(field, offsets(p9=0), MARKS, {})
    assert refused is not None
    assert refused.startswith(f"{field}.offsets names partition 9, but log clicks has")
