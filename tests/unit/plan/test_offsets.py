"""Positions as data: lag arithmetic, record counts, and Spark's JSON form of offsets."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.plan.revisions.positions import (
    OffsetsError,
    compacted_history,
    lag_per_topic,
    offsets_json,
    parse_offsets,
    partition_lag,
    render_offsets,
    retained_records,
    split_watermarks,
    total_lag,
)


def test_total_lag_sums_every_partition_of_every_topic() -> None:
    assert total_lag({"clicks": {0: 3, 1: 4}, "users": {0: 10}}) == 17
    assert total_lag({}) == 0


def test_lag_per_topic_sums_partitions_and_orders_topics() -> None:
    lag = lag_per_topic({"users": {0: 10}, "clicks": {0: 3, 1: 4}, "empty": {}})
    assert lag == {"clicks": 7, "empty": 0, "users": 10}
    assert list(lag) == ["clicks", "empty", "users"]


def test_lag_is_end_minus_committed() -> None:
    lag = partition_lag(
        start={"clicks": {0: 0, 1: 0}},
        end={"clicks": {0: 10, 1: 8}},
        committed={"clicks": {0: 4, 1: 8}},
    )
    assert lag == {"clicks": {0: 6, 1: 0}}


def test_a_partition_without_a_committed_offset_lags_by_its_retained_records() -> None:
    lag = partition_lag(start={"clicks": {0: 2, 1: 5}}, end={"clicks": {0: 10, 1: 5}}, committed={})
    assert lag == {"clicks": {0: 8, 1: 0}}


def test_a_position_behind_retention_counts_from_the_start_of_history() -> None:
    lag = partition_lag(
        start={"clicks": {0: 100}}, end={"clicks": {0: 150}}, committed={"clicks": {0: 40}}
    )
    assert lag == {"clicks": {0: 50}}


def test_a_position_past_the_end_is_caught_up_not_negative() -> None:
    lag = partition_lag(start={"t": {0: 0}}, end={"t": {0: 5}}, committed={"t": {0: 9}})
    assert lag == {"t": {0: 0}}


def test_lag_covers_the_partitions_of_end_only() -> None:
    lag = partition_lag(
        start={"t": {0: 0}},
        end={"t": {0: 5}},
        committed={"t": {0: 1, 7: 3}, "other": {0: 1}},
    )
    assert lag == {"t": {0: 4}}


def test_retained_records_are_end_minus_start() -> None:
    start = {"a": {0: 2, 1: 0}, "b": {0: 0}}
    end = {"a": {0: 10, 1: 3}, "b": {0: 0}}
    assert retained_records(start, end) == 11
    assert retained_records({}, {"a": {0: 4}}) == 4


def test_parses_sparks_json_with_string_partitions() -> None:
    assert parse_offsets('{"clicks": {"1": 7, "0": 12}, "users": {"0": 0}}') == {
        "clicks": {0: 12, 1: 7},
        "users": {0: 0},
    }


def test_parses_a_decoded_object_and_keeps_earliest_and_latest_markers() -> None:
    assert parse_offsets({"clicks": {"0": -2, "1": -1}}) == {"clicks": {0: -2, 1: -1}}


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"clicks": [12]}', "topic 'clicks'"),
        ('{"clicks": {"zero": 12}}', "partition 'zero' of topic 'clicks'"),
        ('{"clicks": {"-1": 12}}', "partition '-1'"),
        ('{"clicks": {"0": "12"}}', "topic 'clicks' partition 0"),
        ('{"clicks": {"0": 1.5}}', "topic 'clicks' partition 0"),
        ('{"clicks": {"0": true}}', "topic 'clicks' partition 0"),
        ('{"clicks": {"0": -3}}', "topic 'clicks' partition 0"),
    ],
)
def test_malformed_offsets_are_refused_naming_the_part(value: str, names: str) -> None:
    with pytest.raises(OffsetsError, match=names):
        parse_offsets(value)


def test_renders_compact_sorted_json_with_string_partitions() -> None:
    text = render_offsets({"users": {0: 3}, "clicks": {10: 1, 2: 5}})
    assert text == '{"clicks":{"2":5,"10":1},"users":{"0":3}}'


@pytest.mark.parametrize(
    "offsets",
    [{}, {"clicks": {}}, {"clicks": {0: 12, 1: 7}, "users": {3: 0}}, {"t": {0: -2, 1: -1}}],
)
def test_render_and_parse_are_inverse(offsets: dict[str, dict[int, int]]) -> None:
    assert parse_offsets(render_offsets(offsets)) == offsets
    embedded: Any = offsets_json(offsets)
    assert parse_offsets(embedded) == offsets


def test_watermarks_split_into_start_and_end_offsets() -> None:
    start, end = split_watermarks({"clicks": {0: (3, 10), 1: (0, 0)}})
    assert start == {"clicks": {0: 3, 1: 0}}
    assert end == {"clicks": {0: 10, 1: 0}}


def test_history_is_lost_when_a_partition_no_longer_starts_at_0() -> None:
    from distributary.plan.revisions.positions import lost_history

    assert lost_history({"clicks": {0: 0, 1: 0}}, {"clicks": "clicks"}) is None
    message = lost_history({"clicks": {0: 0, 1: 250}}, {"clicks": "clicks"})
    assert message == (
        "input log clicks (topic clicks) has lost its history to retention: "
        "partition 1 starts at offset 250, not 0"
    )


def test_a_consumer_near_the_oldest_retained_record_is_at_risk() -> None:
    from distributary.plan.revisions.positions import data_loss_risk

    # Retention has deleted up to 100 of 1,100: a consumer at 150 is within 10% of the edge.
    risk = data_loss_risk({0: 150}, {0: 100}, {0: 1100})
    assert risk is not None
    assert "position 150 is 50 record(s) from the oldest retained offset 100" in risk
    assert data_loss_risk({0: 900}, {0: 100}, {0: 1100}) is None  # well inside
    assert data_loss_risk({0: 1100}, {0: 1090}, {0: 1100}) is None  # caught up: nothing to lose
    assert data_loss_risk({0: 5}, {0: 0}, {0: 1100}) is None  # nothing deleted yet
    lost = data_loss_risk({0: 40}, {0: 100}, {0: 1100})
    assert lost == "partition 0: records 40 to 99 were deleted before read"


def test_a_rewind_lands_within_what_each_partition_retains() -> None:
    from distributary.plan.revisions.positions import rewind_targets

    starts, ends = {0: 10, 1: 0}, {0: 50, 1: 30}
    assert rewind_targets("earliest", starts, ends) == {0: 10, 1: 0}
    assert rewind_targets("latest", starts, ends) == {0: 50, 1: 30}
    # The first record at or after the time; a partition with none (-1) goes to its end.
    assert rewind_targets("timestamp", starts, ends, by_time={0: 42, 1: -1}) == {0: 42, 1: 30}
    # Explicit offsets, clamped to the retained range; a partition not named starts earliest.
    assert rewind_targets("offsets", starts, ends, explicit={0: 5}) == {0: 10, 1: 0}
    assert rewind_targets("offsets", starts, ends, explicit={0: 20, 1: 99}) == {0: 20, 1: 30}


def test_a_rewinds_moves_list_each_partitions_position_before_and_after() -> None:
    from distributary.plan.revisions.positions import rewind_moves

    marks = {"clicks": {0: (10, 50), 1: (0, 30)}, "users": {0: (0, 5)}}
    committed = {"clicks": {0: 48}, "users": {0: 5}}
    assert rewind_moves("earliest", committed, marks) == [
        {"topic": "clicks", "partition": 0, "fromOffset": 48, "toOffset": 10},
        {"topic": "clicks", "partition": 1, "fromOffset": None, "toOffset": 0},
        {"topic": "users", "partition": 0, "fromOffset": 5, "toOffset": 0},
    ]
    by_time = {"clicks": {0: 42, 1: -1}, "users": {0: 3}}
    moved = rewind_moves("timestamp", committed, marks, by_time=by_time)
    assert [m["toOffset"] for m in moved] == [42, 30, 3]
    explicit = rewind_moves("offsets", committed, {"clicks": marks["clicks"]}, explicit={1: 7})
    assert [m["toOffset"] for m in explicit] == [10, 7]


def test_a_gap_at_the_head_of_a_compacted_partition_is_lost_history() -> None:
    topics = {"users.r1": "users"}
    starts = {"users.r1": {0: 0, 1: 0}}
    whole = {"users.r1": {0: [0, 1, 2, 3], 1: []}}
    assert compacted_history(whole, starts, topics) is None
    gap = {"users.r1": {0: [0, 1, 2, 3], 1: [0, 4, 5, 7]}}
    found = compacted_history(gap, starts, topics)
    assert found is not None
    assert "input log users (topic users.r1) is compacted" in found
    assert "partition 1 has no records at offsets 1 to 3" in found
    head = {"users.r1": {0: [1, 2], 1: []}}  # the very first record is gone
    assert "partition 0 has no records at offset 0," in str(compacted_history(head, starts, topics))
    moved = {"users.r1": {0: 5}}  # read from the first retained offset: no gap there
    assert compacted_history({"users.r1": {0: [5, 6]}}, moved, topics) is None


def test_an_input_rate_is_measured_over_ten_seconds_or_more_never_over_a_moment() -> None:
    from datetime import UTC, datetime, timedelta

    from distributary.plan.revisions.positions import input_rate

    t0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    mark, rate = input_rate(None, None, 1000, t0)
    assert (mark, rate) == ({"at": "2026-11-22T12:00:00.000Z", "records": 1000}, None)
    # Before ten seconds have passed: the last rate (none) and the mark are kept.
    assert input_rate(mark, None, 1020, t0 + timedelta(seconds=0.5)) == (mark, None)
    assert input_rate(mark, None, 1200, t0 + timedelta(seconds=4)) == (mark, None)
    # Ten seconds and a bit: measured from the mark to the millisecond, and the mark moves on.
    moved, rate = input_rate(mark, 50.0, 1612, t0 + timedelta(seconds=10.2))
    assert (moved, rate) == ({"at": "2026-11-22T12:00:10.200Z", "records": 1612}, 60.0)
    # A rate is kept between measures.
    assert input_rate(moved, 60.0, 1700, t0 + timedelta(seconds=12)) == (moved, 60.0)
    # A mark that is not a time is measured afresh; offsets that shrank are no negative rate.
    assert input_rate({"at": "yesterday"}, 7.0, 5, t0)[1] == 7.0
    assert input_rate(mark, None, 10, t0 + timedelta(seconds=11))[1] == 0.0


def test_an_idle_input_keeps_its_mark_so_an_idle_views_status_stays_as_it_is() -> None:
    """The mark moved on at each observation of an idle view: a status write per view per round,
    for nothing. It stays now while nothing grows; growth is then measured from it."""
    from datetime import UTC, datetime, timedelta

    from distributary.plan.revisions.positions import input_rate

    t0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    mark, rate = input_rate(None, None, 1000, t0)
    mark, rate = input_rate(mark, rate, 1000, t0 + timedelta(seconds=30))
    assert (mark["records"], rate) == (1000, 0.0)  # measured once: nothing grew
    for minutes in (1, 10, 60):  # idle: nothing changes, so nothing is written
        assert input_rate(mark, rate, 1000, t0 + timedelta(minutes=minutes)) == (mark, 0.0)
    moved, rate = input_rate(mark, rate, 4600, t0 + timedelta(minutes=60, seconds=30))
    assert moved == {"at": "2026-11-22T13:00:30.000Z", "records": 4600}
    assert rate == 1.0  # 3,600 records over the hour since the mark: lower than now, once
    _, rate = input_rate(moved, rate, 7600, t0 + timedelta(minutes=61))
    assert rate == 100.0


def test_a_rewind_records_where_the_group_stood_when_it_moved() -> None:
    from distributary.plan.revisions.positions import moved_from

    recorded = [
        {"topic": "clicks", "partition": 0, "fromOffset": 40, "toOffset": 10},
        {"topic": "clicks", "partition": 1, "fromOffset": None, "toOffset": 0},
        {"topic": "clicks", "partition": 2, "fromOffset": 7, "toOffset": 3},
    ]
    # The old process read on while it stopped: partition 0 stood at 48 when the group moved;
    # partition 1 has still committed nothing; partition 2 already stands at its target (moved
    # before the operator restarted), so what was recorded stays.
    committed = {"clicks": {0: 48, 2: 3}}
    assert [m["fromOffset"] for m in moved_from(committed, recorded)] == [48, None, 7]
    assert [m["toOffset"] for m in moved_from(committed, recorded)] == [10, 0, 3]
