"""The pure parts of bench/reprocess: its command line, what it applies, and the arithmetic that
turns what it watched (status and consumer-group samples, the runner's progress records) into
figures. Nothing here starts a process or opens a connection, so all of it is unit-tested.

Every moment is wall-clock seconds (`time.time()`): the benchmark's samples and Spark's batch
timestamps (written by other processes on the same machine) are compared on one clock.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from distributary.api.common import duration_ms

RECORDS, QUICK_RECORDS = 1_000_000, 100_000
SMOKE_RECORDS = 1_000  # --smoke: to see that it runs; its figures mean nothing
RATE = 5000.0  # --live: records a second appended throughout
STEADY_SHARE = 0.3  # of the records, appended while revision 1 serves: its steady-state rate
PARTITIONS = 4
NAMESPACE, LOG, VIEW, ALIAS = "bench-reprocess", "bench-events", "bench-filter", "events"
SCHEMA = (
    "id BIGINT, user_id STRING, session_id STRING, url STRING, country STRING, "
    "duration_ms INT, ts TIMESTAMP, note STRING"
)
# Both keep 80% of bench/dataplane's records (duration_ms is spread evenly over 0..9999), so the
# two revisions write alike and their rates compare.
SQL_BEFORE = f"SELECT id, user_id, url, country, duration_ms FROM {ALIAS} WHERE duration_ms >= 2000"
SQL_AFTER = f"SELECT id, user_id, url, country, duration_ms FROM {ALIAS} WHERE duration_ms < 8000"
GROUP, VERSION = "distributary.dev", "v1alpha1"
MAX_DURATION_AFTER = 8000  # SQL_AFTER keeps duration_ms below this


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line; --quick picks the small defaults for what was not given."""
    parser = argparse.ArgumentParser(
        prog="bench/reprocess",
        description="Kappa reprocessing under the operator: time from a SQL change to cutover, "
        "and the catch-up rate of the new revision against the serving one's steady rate.",
    )
    parser.add_argument("--quick", action="store_true", help="a small run: 100,000 records")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"the smallest run, to see that it runs ({SMOKE_RECORDS:,} records): its figures "
        "mean nothing",
    )
    parser.add_argument(
        "--records",
        type=int,
        help=f"input records at the SQL change; with --live, the history (default {RECORDS:,})",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="records keep arriving at --rate from before revision 1 starts until after the "
        "cutover; --records is the history appended before",
    )
    parser.add_argument(
        "--rate", type=float, default=RATE, help="with --live: records a second (default 5,000)"
    )
    parser.add_argument(
        "--keep-up-seconds",
        type=float,
        default=10.0,
        help="with --live: how long revision 1 must keep up before the edit (default 10)",
    )
    parser.add_argument(
        "--after-cutover",
        type=float,
        default=5.0,
        help="with --live: seconds records keep arriving after the cutover (default 5)",
    )
    parser.add_argument(
        "--steady-records",
        type=int,
        help=f"of those, appended while revision 1 serves (default {STEADY_SHARE:.0%}%)",
    )
    parser.add_argument("--trigger", default="500ms", help="the view's spark.trigger")
    parser.add_argument("--cutover-window", default="2s", help="the view's upgrade.cutoverWindow")
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        help="the view's spark.maxOffsetsPerTrigger (default unset: a backlog in one batch)",
    )
    parser.add_argument(
        "--observe-interval", type=float, default=2.0, help="the operator's --observe-interval"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help="give up on any one wait after this (s; default 600, with --live 1800)",
    )
    parser.add_argument("--keep-state", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    if args.smoke:
        args.quick = True
        args.records = SMOKE_RECORDS if args.records is None else args.records
    if args.records is None:
        args.records = QUICK_RECORDS if args.quick else RECORDS
    if args.timeout is None:
        args.timeout = 1800.0 if args.live else 600.0
    if args.live:
        _check_live(parser, args)
    else:
        if args.steady_records is None:
            args.steady_records = int(args.records * STEADY_SHARE)
        if args.records < 2 or not 0 < args.steady_records < args.records:
            parser.error(
                "--records must be at least 2 and --steady-records between 1 and records-1"
            )
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        parser.error("--max-offsets-per-trigger must be at least 1")
    if args.observe_interval < 1 or args.timeout <= 0:
        parser.error(
            "--observe-interval must be at least 1 (the operator's minimum), --timeout > 0"
        )
    for flag, value in (("--trigger", args.trigger), ("--cutover-window", args.cutover_window)):
        try:
            duration_ms(value)
        except ValueError:
            parser.error(f"{flag} {value!r}: give a duration such as 500ms or 2s")
    return args


def _check_live(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--live's own rules: a history, a rate, and no steady phase of its own."""
    if args.steady_records is not None:
        parser.error("--steady-records has no meaning with --live: records arrive at --rate")
    if args.records < 1 or args.rate <= 0:
        parser.error("--live needs --records (the history) of at least 1 and --rate > 0")
    if args.keep_up_seconds < 0 or args.after_cutover < 0:
        parser.error("--keep-up-seconds and --after-cutover must not be negative")


def log_manifest() -> dict[str, Any]:
    """The input Log."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Log",
        "metadata": {"name": LOG},
        "spec": {"partitions": PARTITIONS, "schema": SCHEMA},
    }


def view_manifest(
    sql: str, trigger: str, cutover_window: str, max_offsets: int | None = None
) -> dict[str, Any]:
    """The view: an append stream of `sql` over the input, cut over after `cutover_window` at
    lag 0; without `max_offsets` a revision reads its whole backlog in one batch, so its
    `recordsRead` in status goes from 0 to all at once."""
    spark: dict[str, Any] = {"trigger": trigger}
    if max_offsets is not None:
        spark["maxOffsetsPerTrigger"] = max_offsets
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DerivedView",
        "metadata": {"name": VIEW},
        "spec": {
            "inputs": [{"log": LOG, "alias": ALIAS}],
            "sql": sql,
            "output": {"mode": "append", "partitions": PARTITIONS, "deletionPolicy": "Delete"},
            "upgrade": {"cutoverWindow": cutover_window, "cutoverMaxLag": 0},
            "spark": spark,
        },
    }


def seconds_of(duration: str) -> float:
    """A duration of the API (500ms, 2s, 1m) in seconds."""
    return duration_ms(duration) / 1000


def revision_topic(revision: int) -> str:
    """The topic revision `revision` of the view writes."""
    return f"{VIEW}.r{revision}"


# ---- What the benchmark watched ----


@dataclass(frozen=True)
class Sample:
    """One look at the view, its output Log and the revisions' consumer groups."""

    at: float  # wall-clock seconds
    serving: int | None = None  # status.servingRevision
    log_topic: str | None = None  # the output Log's status.topicName
    phases: Mapping[int, str] = field(default_factory=dict)  # revision -> phase
    committed: Mapping[int, int] = field(default_factory=dict)  # revision -> records its group read
    records_read: Mapping[int, int] = field(default_factory=dict)  # revision -> status recordsRead
    lag_zero: frozenset[int] = frozenset()  # revisions whose row has caughtUpSince (lag 0 seen)
    lags: Mapping[int, int] = field(default_factory=dict)  # revision -> status row lag
    input_rates: Mapping[int, float] = field(default_factory=dict)  # revision -> row inputRate
    ends: int | None = None  # the input's end offsets, summed: records appended so far


def first_at(
    samples: Iterable[Sample], test: Callable[[Sample], bool], since: float = 0.0
) -> float | None:
    """When a sample taken at or after `since` first passed `test`; None if none did."""
    return next((s.at for s in samples if s.at >= since and test(s)), None)


def read_by(
    samples: Iterable[Sample], revision: int, records: int, since: float = 0.0
) -> float | None:
    """When revision `revision`'s consumer group had first committed `records` records."""
    return first_at(samples, lambda s: s.committed.get(revision, -1) >= records, since)


def epoch_s(value: str | float) -> float:
    """A progress timestamp (epoch milliseconds, or RFC 3339 like Spark's) in epoch seconds."""
    if isinstance(value, int | float):
        return float(value) / 1000
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Batch:
    """One micro-batch with records, as the runner's progress record tells it."""

    start: float  # wall-clock seconds
    seconds: float
    rows: int

    @property
    def end(self) -> float:
        """When it ended."""
        return self.start + self.seconds


def data_batches(progress: Iterable[Mapping[str, Any]]) -> list[Batch]:
    """The batches that read records, in order of start, from progress records (one record
    per batch id kept, the last: the runner may publish a batch twice)."""
    by_id: dict[Any, Batch] = {}
    for record in progress:
        rows, start = record.get("numInputRows"), record.get("timestamp")
        if not rows or start is None:
            continue
        seconds = float(record.get("batchDurationMs") or 0) / 1000
        by_id[record.get("batchId", len(by_id))] = Batch(epoch_s(start), seconds, int(rows))
    return sorted(by_id.values(), key=lambda b: b.start)


def between(batches: Iterable[Batch], since: float, until: float | None = None) -> list[Batch]:
    """The batches that started at or after `since` (and before `until`)."""
    return [b for b in batches if b.start >= since and (until is None or b.start < until)]


def spark_rate(batches: Sequence[Batch]) -> dict[str, Any]:
    """Spark's account of some batches: their rows over the span from the first one's start to
    the last one's end, so gaps between batches count against the rate."""
    if not batches:
        return {"batches": 0, "rows": 0, "query_s": None, "rate_rps": None}
    rows = sum(b.rows for b in batches)
    span = max(b.end for b in batches) - min(b.start for b in batches)
    return {
        "batches": len(batches),
        "rows": rows,
        "query_s": round(span, 3),
        "rate_rps": per_second(rows, span),
    }


def per_second(count: int, seconds: float | None) -> float | None:
    """A rate, or None without a positive duration."""
    return round(count / seconds, 1) if seconds and seconds > 0 else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator rounded to 3 places, or None when either is missing or zero."""
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, 3)


def since(origin: float, moment: float | None) -> float | None:
    """Seconds from `origin` to `moment`, or None when it never came."""
    return round(moment - origin, 3) if moment is not None else None


def cutover_timeline(
    samples: Sequence[Sample], applied: float, records: int, first_batch: float | None
) -> dict[str, float | None]:
    """Seconds from the SQL change (`applied`) to each step of revision 2's life: its row in
    status, its first batch, its group reading every record, the operator recording lag 0
    (`caughtUpSince`), serving, and the Log moving."""
    new = 2
    caught_up = read_by(samples, new, records, applied)
    served = first_at(samples, lambda s: s.serving == new, applied)
    moved = first_at(samples, lambda s: s.log_topic == revision_topic(new), applied)
    return {
        "revision_in_status_s": since(
            applied, first_at(samples, lambda s: new in s.phases, applied)
        ),
        "first_batch_s": since(applied, first_batch),
        "caught_up_s": since(applied, caught_up),
        "lag_zero_in_status_s": since(
            applied, first_at(samples, lambda s: new in s.lag_zero, applied)
        ),
        "serving_s": since(applied, served),
        "log_moved_s": since(applied, moved),
        "cutover_after_caught_up_s": since(caught_up, moved) if caught_up else None,
    }


def _start(batches: Sequence[Batch]) -> float | None:
    return min(b.start for b in batches) if batches else None


def _wall_rate(records: int, start: float | None, end: float | None) -> float | None:
    return per_second(records, end - start) if start is not None and end is not None else None


def catchup_section(phase: Mapping[str, Any], batches: Sequence[Batch]) -> dict[str, Any]:
    """Revision 1's first catch-up: from the view's apply, through its runner's start and first
    batch, to its group reading every record; `batches` are its batches of that time."""
    applied, start = phase["applied"], _start(batches)
    return {
        "revision": phase["revision"],
        "records": phase["records"],
        "produce_s": phase["produce_s"],
        "runner_started_s": since(applied, phase.get("runner_started")),
        "first_batch_s": since(applied, start),
        "caught_up_s": since(applied, phase["caught_up"]),
        "spark": spark_rate(batches),
        "wall_rate_rps": _wall_rate(phase["records"], start, phase["caught_up"]),
    }


def steady_section(phase: Mapping[str, Any], batches: Sequence[Batch]) -> dict[str, Any]:
    """Revision 1 serving while records arrive at full speed: `batches` are its batches from
    the first append on; the wall rate runs from the first append to its group reading all."""
    started = phase["started"]
    return {
        "revision": phase["revision"],
        "records": phase["records"],
        "produce_s": phase["produce_s"],
        "produce_rate_rps": phase["produce_rate_rps"],
        "caught_up_s": since(started, phase["caught_up"]),
        "spark": spark_rate(batches),
        "wall_rate_rps": _wall_rate(phase["records"], started, phase["caught_up"]),
    }


def reprocess_section(
    phase: Mapping[str, Any], samples: Sequence[Sample], batches: Sequence[Batch]
) -> dict[str, Any]:
    """Revision 2, from the SQL change to cutover: the timeline, and its catch-up rate over
    `batches` (all of its batches: nothing is appended meanwhile)."""
    applied, records, start = phase["applied"], phase["records"], _start(batches)
    timeline = cutover_timeline(samples, applied, records, start)
    caught_up = read_by(samples, 2, records, applied)
    return {
        "revision": phase["revision"],
        "records": records,
        "apply_s": phase["apply_s"],
        "timeline": {
            "runner_started_s": since(applied, phase.get("runner_started")),
            **timeline,
        },
        "spark": spark_rate(batches),
        "wall_rate_rps": _wall_rate(records, start, caught_up),
    }


def summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """The headline figures, from the report's sections."""
    steady = report["steady"]["spark"]["rate_rps"]
    catchup = report["reprocess"]["spark"]["rate_rps"]
    return {
        "time_to_cutover_s": report["reprocess"]["timeline"]["log_moved_s"],
        "catchup_rate_rps": catchup,
        "steady_rate_rps": steady,
        "catchup_to_steady": ratio(catchup, steady),
    }


def lower_bound(window_s: float, observe_s: float) -> str:
    """What bounds the time to cutover from below, in words."""
    rounds = max(1, math.ceil(window_s / observe_s))
    low, high = rounds * observe_s, (rounds + 1) * observe_s
    return (
        f"time_to_cutover_s is revision 2's start-up and catch-up, then the cutover: the "
        f"observer sleeps {observe_s:g}s between rounds, so it first records lag 0 up to one "
        f"period after the group reaches the end, and cuts over at its first round at least "
        f"cutoverWindow ({window_s:g}s) later; cutover_after_caught_up_s is therefore at least "
        f"{low:g}s and at most about {high:g}s plus two rounds' own time"
    )
