"""Exactly-once markers: which batch a revision wrote last, read back from committed metadata."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.plan.edits.write_ahead import checked_rewind
from distributary.plan.revisions.delivery import Marker, batch_end, carried, read_marker

OFFSET_LOG = """v1
{"batchWatermarkMs":0,"batchTimestampMs":1795504989101,"conf":{"spark.sql.shuffle.partitions":"2"}}
{"events":{"0":40,"1":38}}
-
{"users":{"0":7}}
"""


def test_a_marker_round_trips_through_committed_metadata() -> None:
    marker = Marker("q-1", 7, 3)
    assert read_marker(["", marker.text(), marker.text()]) == marker


def test_a_replayed_batch_of_the_same_query_counts_as_written() -> None:
    marker = Marker("q-1", 7, 0)
    assert marker.written("q-1", 7)
    assert marker.written("q-1", 3)
    assert not marker.written("q-1", 8)


def test_a_new_checkpoint_writes_every_batch_whatever_the_old_marker_says() -> None:
    # A checkpoint made again (lost, or a rewind) starts a new query at batch 0.
    assert not Marker("q-1", 7, 0).written("q-2", 0)
    assert not Marker().written("q-1", 0)


def test_after_adds_the_batch_dead_letters_to_the_revision_total() -> None:
    assert Marker("q-1", 7, 3).after("q-2", 0, 2) == Marker("q-2", 0, 5)


def test_metadata_that_is_not_a_marker_carries_nothing() -> None:
    assert read_marker(["", "{not json", '{"other": 1}', "[1, 2]"]) == Marker()


def test_the_newest_marker_wins_when_partitions_differ() -> None:
    old, new = Marker("q-1", 3, 1).text(), Marker("q-1", 9, 4).text()
    assert read_marker([old, new, old]) == Marker("q-1", 9, 4)


def test_a_rewind_keeps_the_dead_letter_count_but_no_batch() -> None:
    assert carried(Marker("q-1", 9, 4)) == Marker(None, -1, 4)


def test_batch_end_merges_every_source_line_of_the_offset_log() -> None:
    assert batch_end(OFFSET_LOG) == {"events": {0: 40, 1: 38}, "users": {0: 7}}


@pytest.mark.parametrize("text", ["", "garbage", "v1\n{}\n[1, 2]\n"])
def test_batch_end_refuses_what_is_not_an_offset_log_entry(text: str) -> None:
    with pytest.raises(ValueError, match="offset log"):
        batch_end(text)


# --- a rewind's move, checked once the next run has started -------------------------------------

DONE = {
    "requestId": "replay-1",
    "revision": 2,
    "phase": "Done",
    "offsets": [
        {"topic": "clicks", "partition": 0, "fromOffset": 40, "toOffset": 12},
        {"topic": "clicks", "partition": 1, "fromOffset": 9, "toOffset": 0},
    ],
}


def started(offsets: dict[str, dict[str, int]], folder: str = "rewind-replay-1") -> dict[str, Any]:
    return {"revision": 2, "checkpoint": f"/ck/ns/v/r2/{folder}", "startedFrom": offsets}


def test_a_rewind_held_when_the_next_run_started_from_the_moved_offsets() -> None:
    checked = checked_rewind(DONE, started({"clicks": {"0": 12, "1": 0}}))
    assert checked == {**DONE, "verified": "Held"}


def test_a_rewind_was_undone_when_the_next_run_started_elsewhere() -> None:
    checked = checked_rewind(DONE, started({"clicks": {"0": 40, "1": 0}}))
    assert checked == {**DONE, "verified": "Undone"}


@pytest.mark.parametrize(
    ("last", "progress"),
    [
        ({**DONE, "phase": "Pending"}, started({"clicks": {"0": 12, "1": 0}})),
        ({**DONE, "verified": "Held"}, started({"clicks": {"0": 40, "1": 0}})),
        (DONE, None),
        (DONE, started({"clicks": {"0": 40}}, folder="rewind-other")),  # an earlier run
        (DONE, {**started({}), "startedFrom": None}),  # resumed from a checkpoint
        (DONE, {**started({"clicks": {"0": 12, "1": 0}}), "revision": 3}),
    ],
)
def test_nothing_is_said_before_the_rewound_run_reports_where_it_started(
    last: dict[str, Any], progress: dict[str, Any] | None
) -> None:
    assert checked_rewind(last, progress) is None
