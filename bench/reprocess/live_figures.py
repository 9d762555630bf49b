"""The pure figures of `bench/reprocess --live`: a SQL change while records keep arriving.

On live input no reader is ever at lag 0, so two words take the meanings the operator gives them:

- revision 2 has *caught up* when its consumer group has read as far as the serving revision's,
  both sampled in the same look;
- a revision *keeps up* when its lag in status is at most `cutoverMaxLag` plus what its inputs
  receive in the cutover window at the input rate status records
  (`plan.revisions.lifecycle.keeping_up`, the operator's own test, so the benchmark waits for what
  the operator waits for).

The catch-up rate and the rates it is compared with are taken over one span of time, the
catch-up's, so the ratios compare two readers and the producer on the same machine at the same
moment. Like figures.py, nothing here starts a process or opens a connection.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from typing import Any

from figures import (
    Batch,
    Sample,
    between,
    first_at,
    per_second,
    ratio,
    revision_topic,
    since,
    spark_rate,
)

from distributary.plan.revisions.lifecycle import keeping_up

COLUMNS = ("id", "user_id", "url", "country", "duration_ms")  # what both SQLs select
Appended = Sequence[tuple[float, int]]  # (wall-clock seconds, records acknowledged by then)


def keeps_up(sample: Sample, revision: int, window_s: float, max_lag: int = 0) -> bool:
    """Whether status shows `revision` keeping up in `sample` (an input rate measured, and a lag
    within what arrives in the window at that rate, plus `max_lag`)."""
    rate = sample.input_rates.get(revision)
    return bool(rate) and keeping_up(sample.lags.get(revision), rate, window_s, max_lag)


def held_for(samples: Sequence[Sample], test: Callable[[Sample], bool]) -> float:
    """How long the latest samples have passed `test` without a break: seconds from the first
    of that unbroken run to the last sample; 0 when the last one fails or there is none."""
    if not samples or not test(samples[-1]):
        return 0.0
    first = samples[-1]
    for sample in reversed(samples):
        if not test(sample):
            break
        first = sample
    return samples[-1].at - first.at


def caught_up_with_serving(
    samples: Sequence[Sample], origin: float, new: int = 2, old: int = 1
) -> float | None:
    """When revision `new`'s group had first read as far as revision `old`'s (same sample)."""

    def level(s: Sample) -> bool:
        return new in s.committed and old in s.committed and s.committed[new] >= s.committed[old]

    return first_at(samples, level, origin)


def committed_at(samples: Sequence[Sample], revision: int, moment: float | None) -> int | None:
    """Records revision `revision`'s group had committed in the sample taken at `moment`."""
    if moment is None:
        return None
    return next((s.committed.get(revision) for s in samples if s.at >= moment), None)


def appended_at(appended: Appended, moment: float) -> float | None:
    """Records acknowledged by `moment`, interpolated between the producer's own marks; None
    outside the span they cover."""
    for (t0, n0), (t1, n1) in pairwise(appended):
        if t0 <= moment <= t1:
            return n0 if t1 == t0 else n0 + (n1 - n0) * (moment - t0) / (t1 - t0)
    return None


def arrival_rate(appended: Appended, start: float | None, end: float | None) -> float | None:
    """Records a second acknowledged between `start` and `end`."""
    if start is None or end is None:
        return None
    first, last = appended_at(appended, start), appended_at(appended, end)
    if first is None or last is None:
        return None
    return per_second(round(last - first), end - start)


def produce_section(appended: Appended, target: float, max_behind: int) -> dict[str, Any]:
    """What the producer really did: its records and mean rate from the first mark to the last,
    its slowest second, and how far behind its schedule it ever was."""
    if len(appended) < 2:
        return {"target_rps": target, "records": 0, "seconds": None, "achieved_rps": None}
    (start, first), (end, last) = appended[0], appended[-1]
    slowest: float | None = None
    j = 0
    for i, (t0, n0) in enumerate(appended):
        j = max(j, i + 1)
        while j < len(appended) and appended[j][0] - t0 < 1.0:
            j += 1
        if j == len(appended):
            break
        t1, n1 = appended[j]
        rate = (n1 - n0) / (t1 - t0)
        slowest = rate if slowest is None else min(slowest, rate)
    return {
        "target_rps": target,
        "records": last - first,
        "seconds": round(end - start, 3),
        "achieved_rps": per_second(last - first, end - start),
        "slowest_second_rps": round(slowest, 1) if slowest is not None else None,
        "max_behind_schedule_records": max_behind,
    }


def lag_account(
    samples: Sequence[Sample], revision: int, window_s: float, start: float, end: float | None
) -> dict[str, Any]:
    """Revision `revision`'s lag between `start` and `end`: as status recorded it (and the
    input rate and keep-up threshold beside it), and as the benchmark saw its group against
    the input's end offsets."""
    seen = [s for s in samples if s.at >= start and (end is None or s.at <= end)]
    status = [s for s in seen if revision in s.lags]
    rates = [s.input_rates[revision] for s in status if revision in s.input_rates]
    group = [
        s.ends - s.committed[revision]
        for s in seen
        if s.ends is not None and revision in s.committed
    ]
    rate = statistics.median(rates) if rates else None
    return {
        "samples": len(seen),
        "status_lag_median": _median(s.lags[revision] for s in status),
        "status_lag_max": max((s.lags[revision] for s in status), default=None),
        "input_rate_median": round(rate, 1) if rate is not None else None,
        "threshold_median": round(rate * window_s) if rate is not None else None,
        "keeping_up_share": (
            round(sum(keeps_up(s, revision, window_s) for s in status) / len(status), 3)
            if status
            else None
        ),
        "longest_keeping_up_s": round(
            longest(status, lambda s: keeps_up(s, revision, window_s)), 3
        ),
        "group_lag_median": _median(group),
        "group_lag_max": max(group, default=None),
        "input_growth_rps": growth(seen),
    }


def longest(samples: Sequence[Sample], test: Callable[[Sample], bool]) -> float:
    """The longest unbroken run of samples passing `test`: seconds from its first to its last."""
    best, first = 0.0, None
    for sample in samples:
        if not test(sample):
            first = None
            continue
        first = sample if first is None else first
        best = max(best, sample.at - first.at)
    return best


def growth(samples: Sequence[Sample]) -> float | None:
    """How fast the input grew over `samples` (its end offsets), records a second."""
    ends = [(s.at, s.ends) for s in samples if s.ends is not None]
    if len(ends) < 2:
        return None
    return per_second(ends[-1][1] - ends[0][1], ends[-1][0] - ends[0][0])


def _median(values: Any) -> int | None:
    found = list(values)
    return round(statistics.median(found)) if found else None


def live_timeline(
    samples: Sequence[Sample], applied: float, runner_started: float | None, first: float | None
) -> dict[str, float | None]:
    """Seconds from the SQL change to each step of revision 2's life on live input: its runner
    and its row in status, its first batch, its group level with the serving one's, the
    operator recording it keeping up (`caughtUpSince`), serving, and the Log moving."""
    new = 2
    caught_up = caught_up_with_serving(samples, applied)
    moved = first_at(samples, lambda s: s.log_topic == revision_topic(new), applied)
    return {
        "runner_started_s": since(applied, runner_started),
        "revision_in_status_s": since(
            applied, first_at(samples, lambda s: new in s.phases, applied)
        ),
        "first_batch_s": since(applied, first),
        "caught_up_s": since(applied, caught_up),
        "keeping_up_in_status_s": since(
            applied, first_at(samples, lambda s: new in s.lag_zero, applied)
        ),
        "serving_s": since(applied, first_at(samples, lambda s: s.serving == new, applied)),
        "log_moved_s": since(applied, moved),
        "cutover_after_caught_up_s": since(caught_up, moved) if caught_up else None,
    }


def catchup_section(
    applied: float,
    samples: Sequence[Sample],
    serving: Sequence[Batch],
    new: Sequence[Batch],
    appended: Appended,
) -> dict[str, Any]:
    """Revision 2's catch-up (its batches that started before it was level with revision 1),
    and over the same span revision 1's batches and the producer's appends."""
    batches = between(new, applied)
    caught_up = caught_up_with_serving(samples, applied)
    catching = [b for b in batches if caught_up is None or b.start < caught_up]
    start = catching[0].start if catching else None
    end = max(b.end for b in catching) if catching else None
    side = between(serving, start, end) if start is not None and end is not None else []
    read = committed_at(samples, 2, caught_up)
    spark, beside = spark_rate(catching), spark_rate(side)
    arrival = arrival_rate(appended, start, end)
    return {
        "spark": spark,
        "records_read": read,
        "wall_rate_rps": per_second(read, caught_up - start)
        if read and start and caught_up
        else None,
        "serving_spark": beside,
        "arrival_rate_rps": arrival,
        "catchup_to_serving": ratio(spark["rate_rps"], beside["rate_rps"]),
        "catchup_to_arrival": ratio(spark["rate_rps"], arrival),
    }


def row_key(row: Mapping[str, Any]) -> bytes:
    """A digest of one output row (its columns, in a canonical order), to count rows cheaply."""
    text = json.dumps({c: row.get(c) for c in COLUMNS}, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=12).digest()


def compare(expected: Counter[bytes], written: Counter[bytes]) -> dict[str, Any]:
    """Revision 2's topic against what the new SQL makes of every record appended, as
    multisets: `missing` rows expected but not written, `unexpected` written beyond those
    (duplicates among them)."""
    return {
        "exact": expected == written,
        "output_records": written.total(),
        "expected_output_records": expected.total(),
        "missing": (expected - written).total(),
        "unexpected": (written - expected).total(),
    }


def summary(serving: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The headline figures: time to cutover, and the catch-up rate against the serving
    revision's rate and the producer's over the same span."""
    catchup = new["catchup"]
    return {
        "time_to_cutover_s": new["timeline"]["log_moved_s"],
        "catchup_rate_rps": catchup["spark"]["rate_rps"],
        "steady_rate_rps": catchup["serving_spark"]["rate_rps"],
        "catchup_to_steady": catchup["catchup_to_serving"],
        "arrival_rate_rps": catchup["arrival_rate_rps"],
        "catchup_to_arrival": catchup["catchup_to_arrival"],
        "serving_alone_rate_rps": serving["spark"]["rate_rps"],
    }
