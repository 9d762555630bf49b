"""The chaos run's expectations (`tests/integration/kube/chaos_clicks.py`, used by the chaos test
and `bench/chaos`): its page views are a function of the seed alone, the example's SQL is
mirrored faithfully, and a rewind's effect on an append view's output is stated exactly."""

from __future__ import annotations

import json
from collections import Counter

from tests.integration.kube.chaos_clicks import (
    DEAD_LETTER,
    Rewound,
    canonical,
    enriched,
    expected_outputs,
    page_view,
    times_written,
    views_per_country,
    writer_stop,
)


def test_page_views_depend_on_the_seed_and_their_number_only() -> None:
    assert page_view(7, 12) == page_view(7, 12)
    assert page_view(7, 12) != page_view(8, 12)
    views = [page_view(7, n) for n in range(2000)]
    assert len({v.value for v in views}) == 2000  # each names the record it is
    malformed = [v for v in views if v.fields is None]
    assert 5 <= len(malformed) <= 60
    assert any(v.fields and v.fields["user_id"] is None for v in views)
    assert any(v.fields and (v.fields["duration_ms"] or 0) < 0 for v in views)


def test_the_enriched_row_follows_the_examples_sql() -> None:
    fields = {
        "user_id": "u-1",
        "session_id": "s-1",
        "url": "https://shop.example.com/search?q=beans",
        "referrer": "https://shop.example.com/",
        "country": None,
        "ts": "2026-01-01T00:00:01.250Z",
        "duration_ms": 12_000,
    }
    row = enriched(fields, 0)
    assert row is not None
    assert (row["host"], row["path"], row["traffic_source"]) == (
        "shop.example.com",
        "/search",
        "internal",
    )
    assert (row["country"], row["engaged"]) == ("UNKNOWN", True)
    direct = enriched({**fields, "referrer": ""}, 0)
    assert direct is not None
    assert direct["traffic_source"] == "direct"
    assert enriched(fields, 12_001) is None
    assert enriched({**fields, "duration_ms": None}, 0) is None
    assert json.loads(canonical(row))["ts"] == 1767225601250


def test_a_rewind_writes_again_from_its_target_to_where_the_group_stood() -> None:
    assert [times_written(o, [(7, 3)]) for o in range(9)] == [1, 1, 1, 2, 2, 2, 2, 1, 1]
    # A move forward (the target past where the writer stood) skips what lies between.
    assert [times_written(o, [(3, 7)]) for o in range(9)] == [1, 1, 1, 0, 0, 0, 0, 1, 1]
    # Rewinds of one revision add up: back from 7 to 3, then from 8 back to 0.
    assert [times_written(o, [(7, 3), (8, 0)]) for o in range(9)] == [2, 2, 2, 3, 3, 3, 3, 2, 1]
    outputs = {(0, o): f"row{o}" for o in range(6)} | {(0, 6): DEAD_LETTER, (1, 0): "other"}
    rows, letters = expected_outputs(outputs, [Rewound("again", 2, {0: (7, 2)})])
    twice = {f"row{o}": 2 for o in range(2, 6)}
    assert rows == Counter({"row0": 1, "row1": 1, **twice, "other": 1})
    assert letters == Counter({(0, 6): 2})


def test_where_the_writer_stood_is_found_from_the_output() -> None:
    counts = dict.fromkeys(range(10), 1) | dict.fromkeys(range(3, 7), 2)
    assert writer_stop(counts, 3) == 7
    assert writer_stop(counts, 4) is None  # offset 3 twice: no rewind to 4 explains it
    assert writer_stop(dict.fromkeys(range(10), 1) | {6: 0, 7: 0}, 8) == 6


def test_per_country_counts_each_row_as_often_as_the_stream_holds_it() -> None:
    row = {"country": "US", "engaged": True, "traffic_source": "external"}
    other = {"country": "US", "engaged": False, "traffic_source": "direct"}
    table = views_per_country(Counter({canonical(row): 2, canonical(other): 1}))
    assert json.loads(table["US"]) == {
        "country": "US",
        "views": 3,
        "engaged_views": 2,
        "external_views": 2,
    }
