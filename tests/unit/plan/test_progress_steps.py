"""From Spark's micro-batch reports to the runner's steps: dead-letter scans, commits, progress."""

from __future__ import annotations

import json
from typing import Any

import pytest

from distributary.plan.revisions.progress import (
    Batch,
    Offsets,
    Step,
    batch_of,
    progress_key,
    progress_record,
    records_behind,
    step,
)


def spark_report(
    *,
    batch_id: int = 3,
    start: dict[str, dict[str, int]] | None = None,
    end: dict[str, dict[str, int]] | None = None,
    latest: dict[str, dict[str, int]] | None = None,
    rows: int = 0,
    corrupt: int | None = None,
) -> dict[str, Any]:
    """A StreamingQueryProgress as Spark 4 writes it (`query.recentProgress[i].json`), with one
    Kafka source; Spark writes a null startOffset for a query's first batch."""
    report: dict[str, Any] = {
        "id": "5f0c4a5e-8d0e-4f5c-9a43-0d6f0b8f1a11",
        "runId": "9b1e3f36-0e2a-4c3b-b8a1-2f7d7a4e2c55",
        "name": "shop.totals.r1",
        "timestamp": "2026-11-22T17:20:44.123Z",
        "batchId": batch_id,
        "batchDuration": 812,
        "numInputRows": rows,
        "inputRowsPerSecond": 40.5,
        "processedRowsPerSecond": 123.25,
        "durationMs": {"addBatch": 640, "latestOffset": 4, "triggerExecution": 812},
        "stateOperators": [],
        "sources": [
            {
                "description": "KafkaV2[Subscribe[orders]]",
                "startOffset": start,
                "endOffset": end,
                "latestOffset": latest if latest is not None else end,
                "numInputRows": rows,
                "metrics": {"maxOffsetsBehindLatest": "0"},
            }
        ],
        "sink": {"description": "KafkaTable", "numOutputRows": rows},
    }
    if corrupt is not None:
        report["observedMetrics"] = {"dead_letters_0_orders": {"dead_letters": corrupt}}
    # What the runner parses is the JSON text, so go through it as the runner does.
    decoded: dict[str, Any] = json.loads(json.dumps(report))
    return decoded


def batch(
    start: Offsets,
    end: Offsets,
    *,
    corrupt: int = 0,
    latest: Offsets | None = None,
    rows: int = 10,
) -> Batch:
    return Batch(
        batch_id=1,
        timestamp="2026-11-22T17:20:44.123Z",
        start=start,
        end=end,
        latest=latest if latest is not None else end,
        rows=rows,
        corrupt=corrupt,
        input_rate=1.0,
        processed_rate=2.0,
        duration_ms=100,
    )


# Parsing Spark's report ------------------------------------------------------------------------


def test_a_report_becomes_a_batch_with_integer_partitions_and_offsets() -> None:
    report = spark_report(
        start={"orders": {"0": 10, "1": 12}},
        end={"orders": {"0": 60, "1": 62}},
        latest={"orders": {"0": 60, "1": 70}},
        rows=100,
        corrupt=2,
    )
    assert batch_of(report) == Batch(
        batch_id=3,
        timestamp="2026-11-22T17:20:44.123Z",
        start={"orders": {0: 10, 1: 12}},
        end={"orders": {0: 60, 1: 62}},
        latest={"orders": {0: 60, 1: 70}},
        rows=100,
        corrupt=2,
        input_rate=40.5,
        processed_rate=123.25,
        duration_ms=812,
        phases_ms={"addBatch": 640, "latestOffset": 4},
    )


def test_a_batchs_phases_and_its_state_stores_commits_are_kept() -> None:
    report = spark_report(end={"orders": {"0": 5}}, rows=5)
    report["stateOperators"] = [{"commitTimeMs": 30}, {"commitTimeMs": 12, "numRowsTotal": 4}]
    phases = batch_of(report).phases_ms
    assert phases == {"addBatch": 640, "latestOffset": 4, "stateCommit": 42}


def test_a_first_batch_has_no_start() -> None:
    parsed = batch_of(spark_report(batch_id=0, start=None, end={"orders": {"0": 5}}, rows=5))
    assert parsed.batch_id == 0
    assert parsed.start == {}
    assert parsed.end == {"orders": {0: 5}}


def test_the_sources_of_several_inputs_merge_into_one_set_of_offsets() -> None:
    report = spark_report(start={"orders": {"0": 1}}, end={"orders": {"0": 4}})
    report["sources"].append(
        {
            "description": "KafkaV2[Subscribe[customers]]",
            "startOffset": {"customers": {"0": 7, "1": 0}},
            "endOffset": {"customers": {"0": 9, "1": 3}},
            "latestOffset": {"customers": {"0": 9, "1": 3}},
        }
    )
    parsed = batch_of(report)
    assert parsed.start == {"orders": {0: 1}, "customers": {0: 7, 1: 0}}
    assert parsed.end == {"orders": {0: 4}, "customers": {0: 9, 1: 3}}


def test_corrupt_rows_are_summed_over_inputs_and_other_metrics_are_ignored() -> None:
    report = spark_report(end={"orders": {"0": 4}})
    report["observedMetrics"] = {
        "dead_letters_0_orders": {"dead_letters": 2},
        "dead_letters_1_customers": {"dead_letters": 3},
        "user_metric": {"dead_letters": 100},
    }
    assert batch_of(report).corrupt == 5


def test_an_empty_batch_counts_no_corrupt_rows() -> None:
    # sum() over no rows is null in Spark, and an idle batch may carry no metrics at all.
    assert batch_of(spark_report(end={"orders": {"0": 4}}, corrupt=None)).corrupt == 0
    report = spark_report(end={"orders": {"0": 4}})
    report["observedMetrics"] = {"dead_letters_0_orders": {"dead_letters": None}}
    assert batch_of(report).corrupt == 0


def test_rates_spark_leaves_out_or_cannot_compute_are_zero() -> None:
    report = spark_report(end={"orders": {"0": 4}})
    del report["inputRowsPerSecond"]
    report["processedRowsPerSecond"] = "NaN"
    report["durationMs"] = {}
    parsed = batch_of(report)
    assert (parsed.input_rate, parsed.processed_rate, parsed.duration_ms) == (0.0, 0.0, 0)


# What to do for each batch ---------------------------------------------------------------------


def test_a_fresh_group_commits_the_first_batch_without_a_scan() -> None:
    first = batch({}, {"orders": {0: 5, 1: 7}})
    assert step(None, first) == Step(scan_from=None, end={"orders": {0: 5, 1: 7}}, commit=True)
    assert step({}, first) == step(None, first)


def test_a_first_batch_with_corrupt_rows_is_scanned_from_the_starting_position() -> None:
    first = batch({}, {"orders": {0: 5}}, corrupt=1)
    assert step(None, first) == Step(scan_from={}, end={"orders": {0: 5}}, commit=True)


def test_a_batch_that_joins_the_committed_position_commits_without_a_scan() -> None:
    committed = {"orders": {0: 10, 1: 12}}
    joined = batch({"orders": {0: 10, 1: 12}}, {"orders": {0: 60, 1: 62}})
    assert step(committed, joined) == Step(
        scan_from=None, end={"orders": {0: 60, 1: 62}}, commit=True
    )


def test_a_batch_with_corrupt_rows_scans_its_own_range() -> None:
    committed = {"orders": {0: 10, 1: 12}}
    bad = batch({"orders": {0: 10, 1: 12}}, {"orders": {0: 60, 1: 62}}, corrupt=3)
    assert step(committed, bad) == Step(
        scan_from={"orders": {0: 10, 1: 12}}, end={"orders": {0: 60, 1: 62}}, commit=True
    )


def test_a_gap_after_a_crash_is_scanned_from_the_committed_position() -> None:
    # The crashed run's Spark checkpoint reached 30, but the group was last committed at 10: the
    # records in between were processed and never checked for dead letters.
    committed = {"orders": {0: 10, 1: 12}}
    after_gap = batch({"orders": {0: 30, 1: 12}}, {"orders": {0: 45, 1: 20}})
    assert step(committed, after_gap) == Step(
        scan_from={"orders": {0: 10, 1: 12}}, end={"orders": {0: 45, 1: 20}}, commit=True
    )


def test_the_first_batch_of_a_fresh_checkpoint_started_at_the_group_is_not_scanned() -> None:
    # A fresh checkpoint starts from the group's offsets, and Spark reports its first batch
    # without a start: there is nothing before it that went unchecked.
    fresh = batch({}, {"orders": {0: 45}})
    assert step({"orders": {0: 30}}, fresh) == Step(None, {"orders": {0: 45}}, commit=True)


def test_an_idle_batch_commits_nothing() -> None:
    committed = {"orders": {0: 60, 1: 62}}
    idle = batch({"orders": {0: 60, 1: 62}}, {"orders": {0: 60, 1: 62}}, rows=0)
    assert step(committed, idle) == Step(
        scan_from=None, end={"orders": {0: 60, 1: 62}}, commit=False
    )


def test_a_report_without_offsets_does_nothing() -> None:
    assert step({"orders": {0: 3}}, batch({}, {})) == Step(scan_from=None, end={}, commit=False)


def test_a_second_input_that_starts_at_zero_joins_a_group_that_has_not_committed_it() -> None:
    committed = {"orders": {0: 10}}
    both = batch({"orders": {0: 10}, "customers": {0: 0}}, {"orders": {0: 20}, "customers": {0: 4}})
    assert step(committed, both).scan_from is None
    assert step(committed, both).commit


# Progress records and lag ----------------------------------------------------------------------


def test_lag_counts_records_between_the_position_and_the_latest_offsets() -> None:
    assert records_behind({"orders": {0: 50, 1: 62}}, {"orders": {0: 60, 1: 70}}) == 18
    assert records_behind({"orders": {0: 60}}, {"orders": {0: 60, 1: 5}}) == 5
    assert records_behind({"orders": {0: 70}}, {"orders": {0: 60}}) == 0


def test_a_progress_record_says_where_the_revision_is_and_how_far_behind() -> None:
    identity = {"kind": "DerivedView", "namespace": "shop", "name": "totals", "revision": 1}
    last = batch(
        {"orders": {0: 10, 1: 12}},
        {"orders": {0: 50, 1: 62}},
        latest={"orders": {0: 60, 1: 70}},
        rows=90,
    )
    record = progress_record(
        identity,
        state="Running",
        batch=last,
        position={"orders": {1: 62, 0: 50}},
        dead_letters=4,
    )
    assert record == {
        **identity,
        "state": "Running",
        "error": None,
        "deadLetters": 4,
        "position": {"orders": {"0": 50, "1": 62}},
        "batchId": 1,
        "timestamp": "2026-11-22T17:20:44.123Z",
        "numInputRows": 90,
        "inputRowsPerSecond": 1.0,
        "processedRowsPerSecond": 2.0,
        "batchDurationMs": 100,
        "batchPhasesMs": {},
        "latest": {"orders": {"0": 60, "1": 70}},
        "lag": 18,
    }


def test_without_a_committed_position_lag_is_measured_from_the_batch_end() -> None:
    last = batch({}, {"orders": {0: 50}}, latest={"orders": {0: 65}})
    assert progress_record({}, state="Running", batch=last)["lag"] == 15


@pytest.mark.parametrize(
    ("state", "error"), [("Starting", None), ("Stopped", None), ("Failed", "the topic is gone")]
)
def test_a_record_before_any_batch_has_only_identity_and_state(
    state: str, error: str | None
) -> None:
    record = progress_record({"name": "totals"}, state=state, error=error)
    assert record == {"name": "totals", "state": state, "error": error, "deadLetters": 0}


def test_a_revision_is_keyed_by_kind_namespace_name_and_revision() -> None:
    assert progress_key("DerivedView", "shop", "totals", 2) == "DerivedView/shop/totals/r2"
