"""bench/tables' arguments, workload and figures: everything but the parts it runs."""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

ROWS, QUICK_ROWS, SMOKE_ROWS = 200_000, 50_000, 2_000
GROUPS, SMOKE_GROUPS = 1_000, 20
SHARE = 0.01  # of the rows changed each second (a 1 s trigger: 1% of the table per batch)
SECONDS, QUICK_SECONDS, SMOKE_SECONDS = 60.0, 30.0, 4.0
MARKER_EVERY = 0.25  # seconds between two moves of a marker row (freshness samples)
MARKERS = 8  # marker rows, ids 0, -1, ..., -7 (the table's rows are 1..rows), moved in turn:
# each moves every 2 s, so each move outlives the batch that reads it (1 s trigger) and shows
ALIAS = "accounts"
SCHEMA = "id BIGINT, city STRING, balance DECIMAL(12,2)"
SQL = f"SELECT city, count(*) AS accounts, sum(balance) AS balance FROM {ALIAS} GROUP BY city"
TARGET_RATIO = 10.0  # recomputing the whole table per batch costs at least this many batches


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line; --quick and --smoke pick smaller defaults for what was not given."""
    parser = argparse.ArgumentParser(
        prog="bench/tables",
        description="A view over a table that changes: maintained vs recomputed.",
    )
    parser.add_argument("--quick", action="store_true", help="50,000 rows, 30 s of changes")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="2,000 rows, 4 s: to see it runs (figures mean nothing)",
    )
    parser.add_argument("--rows", type=int, help=f"rows of the table (default {ROWS:,})")
    parser.add_argument("--groups", type=int, help=f"cities the rows are grouped by ({GROUPS:,})")
    parser.add_argument("--share", type=float, default=SHARE, help="of the rows changed a second")
    parser.add_argument("--seconds", type=float, help=f"of steady changes ({SECONDS:g})")
    parser.add_argument("--trigger", default="1s", help="the view's trigger (1s)")
    parser.add_argument("--repeat", type=int, default=3, help="recomputations timed (after one)")
    parser.add_argument("--keep-state", action="store_true", help="keep the temporary folder")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the recomputation, in its own JVM
    args = parser.parse_args(argv)
    small = SMOKE_ROWS if args.smoke else QUICK_ROWS if args.quick else ROWS
    args.rows = args.rows or small
    args.groups = args.groups or (SMOKE_GROUPS if args.smoke else GROUPS)
    args.seconds = args.seconds or (
        SMOKE_SECONDS if args.smoke else QUICK_SECONDS if args.quick else SECONDS
    )
    if args.smoke and args.share == SHARE:
        args.share = 0.05  # enough changes per batch to see every step at 2,000 rows
    if args.rows < 10 or args.groups < 1 or not 0 < args.share <= 1 or args.seconds <= 0:
        parser.error("--rows >= 10, --groups >= 1, 0 < --share <= 1, --seconds > 0")
    return args


class Table:
    """The rows as the benchmark writes them: what each id holds now (what the view must say)."""

    def __init__(self, groups: int, seed: int = 11) -> None:
        self.groups, self.random = groups, random.Random(seed)
        self.rows: dict[int, tuple[str, Decimal]] = {}

    def row(self, i: int) -> dict[str, Any]:
        """A new version of row `i` (every version moves it to a random city, a new balance)."""
        city = f"c{self.random.randrange(self.groups):05d}"
        balance = Decimal(self.random.randrange(-50_000, 1_000_000)) / 100
        self.rows[i] = (city, balance)
        return {"id": i, "city": city, "balance": str(balance)}

    def marker(self, n: int) -> dict[str, Any]:
        """Move `n`: a marker row moved to a city of its own, `~marker-<n>` (its output's key)."""
        row = -(n % MARKERS)
        self.rows[row] = (f"~marker-{n}", Decimal(0))
        return {"id": row, "city": f"~marker-{n}", "balance": "0"}

    def expected(self) -> dict[str, tuple[int, Decimal]]:
        """The view's table: per city, rows and balance, from the rows as they are now."""
        found: dict[str, tuple[int, Decimal]] = {}
        for city, balance in self.rows.values():
            count, total = found.get(city, (0, Decimal(0)))
            found[city] = (count + 1, total + balance)
        return found


def encode(row: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """A row as its record: the key `{"id":...}` and the row as JSON."""
    return json.dumps({"id": row["id"]}, separators=(",", ":")).encode(), json.dumps(row).encode()


def output_table(
    records: Iterable[tuple[bytes | None, bytes | None]],
) -> dict[str, tuple[int, Decimal]]:
    """The view's output read as a table: city -> (accounts, balance), tombstones applied."""
    table: dict[str, tuple[int, Decimal]] = {}
    for key, value in records:
        city = json.loads(key or b"{}").get("city")
        if value is None:
            table.pop(city, None)
        else:
            row = json.loads(value, parse_float=Decimal)
            table[city] = (int(row["accounts"]), Decimal(str(row["balance"])))
    return table


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (nearest rank), None when there are no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return round(ordered[rank], 1)


def phases_p50(batches: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Each phase's median over `batches` (the runner's `batchPhasesMs`), largest first: where
    a batch's time goes."""
    names = {name for b in batches for name in b.get("batchPhasesMs") or {}}
    medians = {
        name: percentile([float((b.get("batchPhasesMs") or {}).get(name, 0)) for b in batches], 50)
        for name in names
    }
    return dict(sorted(medians.items(), key=lambda item: -(item[1] or 0)))


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator rounded, or None when either is unknown or zero."""
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, 2)
