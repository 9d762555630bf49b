"""The pure parts of bench/cdc: its command line, and the arithmetic that turns the moments it
saw (commits, arrivals in the Log, rows counted in a table, delays measured by PostgreSQL) into
figures. Nothing here starts or reads anything, so it is unit-tested
(tests/unit/test_bench_cdc.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

ROWS, QUICK_ROWS = 50_000, 10_000
SNAPSHOT_ROWS, QUICK_SNAPSHOT_ROWS = 20_000, 5_000
SECONDS, QUICK_SECONDS = 60.0, 20.0
WARMUP, QUICK_WARMUP = 5.0, 3.0
REPEAT, QUICK_REPEAT = 3, 1
# --smoke: the smallest run, to see that it runs; its figures mean nothing
SMOKE = {"rows": 300, "snapshot_rows": 100, "batch": 100, "rate": 50.0, "seconds": 2.0,
         "warmup": 1.0, "repeat": 1}  # fmt: skip
RATE = 1000.0
BATCH = 1000  # rows per transaction of the bulk insert
PAYLOAD_BYTES = 100


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line; --quick picks the small defaults for what was not given."""
    parser = argparse.ArgumentParser(
        prog="bench/cdc",
        description="Change-data-capture benchmark: PostgreSQL to a Log (capture), a commit to "
        "a Sink's table (freshness), and the Sink beside a plain batched upsert (sink).",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small run: 10,000 rows, 20 s of freshness"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the smallest run, to see that it runs (300 rows, 2 s of freshness): its figures "
        "mean nothing",
    )
    parser.add_argument("--rows", type=int, help=f"rows of the bulk insert (default {ROWS:,})")
    parser.add_argument(
        "--snapshot-rows", type=int, help=f"rows there before the Source starts ({SNAPSHOT_ROWS:,})"
    )
    parser.add_argument("--batch", type=int, help=f"rows per bulk transaction ({BATCH})")
    parser.add_argument("--rate", type=float, help=f"freshness: rows committed/s ({RATE:g})")
    parser.add_argument("--seconds", type=float, help="freshness, measured (default 60)")
    parser.add_argument("--warmup", type=float, help="freshness, unmeasured first (default 5)")
    parser.add_argument(
        "--repeat", type=int, help="runs of the Sink and the plain upsert, interleaved (3; quick 1)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="the longest wait, seconds")
    parser.add_argument("--keep-state", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    if args.smoke:
        args.quick = True
        for name, value in SMOKE.items():
            if getattr(args, name) is None:
                setattr(args, name, value)
    args.batch = BATCH if args.batch is None else args.batch
    args.rate = RATE if args.rate is None else args.rate
    if args.rows is None:
        args.rows = QUICK_ROWS if args.quick else ROWS
    if args.snapshot_rows is None:
        args.snapshot_rows = QUICK_SNAPSHOT_ROWS if args.quick else SNAPSHOT_ROWS
    if args.seconds is None:
        args.seconds = QUICK_SECONDS if args.quick else SECONDS
    if args.warmup is None:
        args.warmup = QUICK_WARMUP if args.quick else WARMUP
    if args.repeat is None:
        args.repeat = QUICK_REPEAT if args.quick else REPEAT
    if min(args.rows, args.snapshot_rows, args.batch, args.repeat) < 1:
        parser.error("--rows, --snapshot-rows, --batch and --repeat must be at least 1")
    if args.rate <= 0 or args.seconds <= 0 or args.warmup < 0:
        parser.error("--rate and --seconds must be positive, --warmup not negative")
    return args


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), interpolated linearly between ranks; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def rounded(value: float | None, places: int = 1) -> float | None:
    """A figure rounded for the report (None stays None)."""
    return None if value is None else round(value, places)


def per_second(count: float, seconds: float | None) -> float | None:
    """A rate, or None without a positive duration."""
    return round(count / seconds, 1) if seconds and seconds > 0 else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator to 3 places, or None when either is missing or zero."""
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, 3)


def delays(values_ms: Sequence[float]) -> dict[str, Any]:
    """p50, p99, max and mean of delays in milliseconds."""
    return {
        "count": len(values_ms),
        "p50_ms": rounded(percentile(values_ms, 50)),
        "p99_ms": rounded(percentile(values_ms, 99)),
        "max_ms": rounded(max(values_ms)) if values_ms else None,
        "mean_ms": rounded(sum(values_ms) / len(values_ms)) if values_ms else None,
    }


def span_rate(moments: Sequence[float]) -> dict[str, Any]:
    """The rate of rows arriving at `moments` (one per row, wall clock): the rows after the
    first arrival over the time from it to the last, so a first batch that arrived at once is
    not counted as if it took no time."""
    if not moments:
        return {"rows": 0, "first": None, "last": None, "seconds": None, "rows_per_s": None}
    first, last = min(moments), max(moments)
    at_first = sum(1 for m in moments if m == first)
    return {
        "rows": len(moments),
        "first": first,
        "last": last,
        "seconds": round(last - first, 3),
        "rows_per_s": per_second(len(moments) - at_first, last - first),
    }


def counted_rate(samples: Sequence[tuple[float, int]], total: int) -> dict[str, Any]:
    """From (moment, rows in the table) samples: when the table first held rows and when it
    held `total`; the rate in between is the rows applied after the first sample that saw any
    over the time to the first that saw them all. None where it never got there."""
    seen = [(t, n) for t, n in samples if n > 0]
    done = next((t for t, n in samples if n >= total), None)
    if not seen or done is None:
        return {"first_rows_at": seen[0][0] if seen else None, "done_at": done, "rows_per_s": None}
    first, count = seen[0]
    rate = per_second(total - count, done - first) if done > first else None
    return {"first_rows_at": first, "done_at": done, "rows_per_s": rate}


def capture_section(
    rows: int,
    transactions: int,
    started: float,
    commits: Sequence[float],
    arrivals: Sequence[float],
) -> dict[str, Any]:
    """The bulk insert's figures: `started` when its first transaction began, `commits` when
    each committed, `arrivals` when each of its rows was seen in the Log (committed reader)."""
    first_commit, last_commit = min(commits), max(commits)
    complete = len(arrivals) >= rows
    last_row = max(arrivals) if arrivals else None
    span = last_row - first_commit if complete and last_row is not None else None
    return {
        "rows": rows,
        "transactions": transactions,
        "insert_s": round(last_commit - started, 3),
        "insert_rows_per_s": per_second(rows, last_commit - started),
        "rows_in_log": len(arrivals),
        "first_row_in_log_after_first_commit_s": rounded(
            min(arrivals) - first_commit if arrivals else None, 3
        ),
        "last_row_in_log_after_last_commit_s": rounded(
            last_row - last_commit if complete and last_row is not None else None, 3
        ),
        "first_commit_to_last_row_s": rounded(span, 3),
        "rows_per_s": per_second(rows, span),
        "status": "ok" if complete else "incomplete",
    }


def snapshot_section(rows: int, run_started: float, arrivals: Sequence[float]) -> dict[str, Any]:
    """The snapshot's figures: rows there before the Source started, seen in the Log."""
    span = span_rate(arrivals)
    return {
        "rows": rows,
        "rows_in_log": span["rows"],
        "first_row_after_run_start_s": rounded(
            span["first"] - run_started if span["first"] else None, 3
        ),
        "last_row_after_run_start_s": rounded(
            span["last"] - run_started if span["last"] else None, 3
        ),
        "seconds": span["seconds"],
        "rows_per_s": span["rows_per_s"],
        "status": "ok" if span["rows"] >= rows else "incomplete",
    }


def attempt_section(
    what: str, started: float, samples: Sequence[tuple[float, int]], total: int
) -> dict[str, Any]:
    """One backlog applied into an empty table (the Sink or the plain upsert), from the
    table's row count sampled while it ran; `started` is when its process or thread began."""
    counted = counted_rate(samples, total)
    done, first = counted["done_at"], counted["first_rows_at"]
    return {
        "what": what,
        "rows": total,
        "first_rows_after_start_s": rounded(first - started if first else None, 3),
        "wall_s": rounded(done - started if done else None, 3),
        "rows_per_s": counted["rows_per_s"],
        "wall_rows_per_s": per_second(total, done - started if done else None),
        "status": "ok" if done is not None else "incomplete",
    }


def best(attempts: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The fastest complete attempt (noise only ever slows a run down), with every rate. An
    attempt that applied every row at once (one poll, one commit: a small run) is complete but
    has no rate."""
    done = [a for a in attempts if a.get("status") == "ok"]
    if not done:
        return None
    top = max(done, key=lambda a: a.get("rows_per_s") or 0.0)
    return {**top, "samples_rows_per_s": [a.get("rows_per_s") for a in attempts]}


def sink_section(
    sink_runs: Sequence[dict[str, Any]], plain_runs: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The Sink beside the plain batched upsert: the best of each, and their ratio."""
    sink, plain = best(sink_runs), best(plain_runs)
    return {
        "rows": (sink or plain or {}).get("rows"),
        "sink": sink or {"status": "incomplete", "runs": list(sink_runs)},
        "plain": plain or {"status": "incomplete", "runs": list(plain_runs)},
        "sink/plain": ratio((sink or {}).get("rows_per_s"), (plain or {}).get("rows_per_s")),
        "sink/plain_wall": ratio(
            (sink or {}).get("wall_rows_per_s"), (plain or {}).get("wall_rows_per_s")
        ),
    }


def freshness_section(
    rate: float,
    warmup: float,
    seconds: float,
    inserted: dict[str, Any],
    in_table: Sequence[float],
    in_log: Sequence[float],
    measured: int,
) -> dict[str, Any]:
    """Commit to serving table (`in_table`, from PostgreSQL's clock) and commit to the Log
    (`in_log`), for the `measured` rows inserted after the warm-up."""
    table = delays(in_table)
    return {
        "target_rps": rate,
        "warmup_s": warmup,
        "seconds": seconds,
        **inserted,
        "measured_rows": measured,
        "rows_in_table": len(in_table),
        "p50_ms": table["p50_ms"],
        "p99_ms": table["p99_ms"],
        "max_ms": table["max_ms"],
        "mean_ms": table["mean_ms"],
        "to_log": delays(in_log),
        "status": "ok" if len(in_table) >= measured else "incomplete",
    }
