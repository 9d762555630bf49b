"""The chaos run's page views, appended from a thread, and what the clickstream views must hold
after it (computed without I/O).

Each page view is a function of the seed and its sequence number alone (its own
`random.Random`), so a run's input is the same whatever the timing, and the expected outputs are
computed here from the records, the way the example's SQL computes them:

- `enriched-page-views` (append, stateless): each kept record once, as the SQL shapes it, except
  where rewinds of its serving revision moved its position. A rewind from F to T (its status
  records both, F where the group stood when it moved) makes the writer read the records from T
  up to F again: they are written once more. Where T is past F, the records between are skipped:
  once less. Rewinds of one revision add up. Should the output not be that, `writer_stops` finds
  where the writer would have to have stood for one rewind to explain it.
- `views-per-user` (a table over the raw page views): row by row.
- `views-per-country` (a table over the enriched stream): row by row, over exactly the enriched
  stream expected above, rewound records included, since it reads what the enriched view wrote.

Every record has its own `ts` (a second apart, plus a few milliseconds), so an output row names
the input record it came from.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from confluent_kafka import KafkaError, Message, Producer
from tests.integration.spark_pipelines import read_topic

from distributary.kafka.cluster import client_config

INPUT_TOPIC = "chaos.page-views"  # page-views' topic in the chaos run
BASE = datetime(2026, 1, 1, tzinfo=UTC)
USERS = [f"u-{n:03d}" for n in range(40)]
HOSTS = ["shop.example.com", "blog.example.com", "docs.example.com"]
PATHS = ["/", "/products/espresso-machine", "/cart", "/account", "/search?q=beans"]
COUNTRIES = ["us", "de", "fr", "jp", "br", "gb"]
EXTERNAL = "https://www.search.example.org/results"
KEPT = "duration_ms >= 0"  # the example's filter; an edit replaces its 0
THRESHOLDS = (500, 1000, 2000, 5000, 0)


@dataclass(frozen=True)
class PageView:
    """One record appended to page-views: its bytes, and its fields when it parses."""

    seq: int
    key: bytes | None
    value: bytes
    fields: dict[str, Any] | None  # None: malformed, a dead letter for every view reading it


def page_view(seed: int, seq: int) -> PageView:
    """Record `seq` of the run seeded `seed`: mostly valid page views; some that a view filters
    out (no user, no url, a negative or missing duration, no country); a few malformed."""
    rng = random.Random(f"{seed}:{seq}")
    user = rng.choice(USERS)
    key = json.dumps({"user_id": user}, separators=(",", ":")).encode()
    kind = rng.random()
    if kind < 0.006:  # not JSON at all
        return PageView(
            seq, key, b'{"user_id": "%s", "seq": %d, "url": ' % (user.encode(), seq), None
        )
    if kind < 0.012:  # a field of the wrong type
        value = {"user_id": user, "url": "https://shop.example.com/", "duration_ms": f"{seq}ms"}
        return PageView(seq, key, _json(value), None)
    host = rng.choice(HOSTS)
    url = f"https://{host}{rng.choice(PATHS)}"
    at = BASE + timedelta(seconds=seq, milliseconds=rng.randrange(1000))
    fields: dict[str, Any] = {
        "user_id": user,
        "session_id": f"s-{seq // 5:05d}",
        "url": url,
        "referrer": rng.choice(["", None, f"https://{host}/", EXTERNAL]),
        "country": rng.choice(COUNTRIES),
        "ts": at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z",
        "duration_ms": rng.randrange(0, 20_000),
    }
    odd = rng.random()
    if odd < 0.03:
        fields["user_id"], key = None, None
    elif odd < 0.06:
        fields["url"] = None
    elif odd < 0.10:
        fields["duration_ms"] = -rng.randrange(1, 500)
    elif odd < 0.12:
        fields["duration_ms"] = None
    elif odd < 0.17:
        fields["country"] = None
    shown = {k: v for k, v in fields.items() if v is not None or rng.random() < 0.5}
    return PageView(seq, key, _json(shown), fields)


class Clicks:
    """Appends the run's page views to the input topic from a thread, `rate` a second, in
    order of their sequence numbers, until stopped."""

    def __init__(self, bootstrap: str, seed: int, rate: float) -> None:
        self.seed, self.rate = seed, rate
        settings: dict[str, str | int | float | bool] = {
            "partitioner": "murmur2_random",  # as Java clients and `distributary produce`
            "enable.idempotence": True,
            "linger.ms": 5,
        }
        self.producer = Producer(client_config(bootstrap, **settings))
        self.appended = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-clicks", daemon=True)

    def append(self, count: int) -> None:
        """Append the next `count` page views."""
        for _ in range(count):
            record = page_view(self.seed, self.appended)
            self.producer.produce(
                INPUT_TOPIC, key=record.key, value=record.value, on_delivery=self._delivered
            )
            self.appended += 1
        self.producer.poll(0)

    def _delivered(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self.failures.append(error.str())

    def start(self) -> None:
        """Start appending."""
        self._thread.start()

    def _run(self) -> None:
        tick, started = 0.25, time.monotonic()
        while not self._stop.wait(tick):
            due = math.floor((time.monotonic() - started) * self.rate)
            self.append(max(due - self.appended, 0))

    def halt(self) -> None:
        """Stop appending (at once; what was handed to the producer may still be sent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def stop(self) -> int:
        """Stop appending and wait until Kafka has every record; how many were appended."""
        self.halt()
        left = self.producer.flush(30)
        if left or self.failures:
            raise AssertionError(
                f"{left} page views not delivered; Kafka refused: {self.failures[:3]}"
            )
        return self.appended


def _json(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def millis(text: str) -> int:
    """A timestamp as JSON carries it, in milliseconds since the epoch."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def canonical(row: Mapping[str, Any]) -> str:
    """A row as one comparable string: sorted keys, no null fields (Spark's `to_json` leaves
    them out), timestamps in milliseconds."""
    kept = {
        k: millis(v) if k in ("ts", "last_seen") and isinstance(v, str) else v
        for k, v in row.items()
        if v is not None
    }
    return json.dumps(kept, sort_keys=True)


def _host(url: str | None) -> str | None:
    return urlsplit(url).netloc if url else None


def enriched(fields: Mapping[str, Any], threshold: int) -> dict[str, Any] | None:
    """The enriched view's row for a record, None when its filter drops it."""
    user, url, duration = fields["user_id"], fields["url"], fields["duration_ms"]
    if user is None or url is None or duration is None or duration < threshold:
        return None
    referrer = fields["referrer"]
    if not referrer:
        source = "direct"
    elif _host(referrer) == _host(url):
        source = "internal"
    else:
        source = "external"
    return {
        "user_id": user,
        "session_id": fields["session_id"],
        "url": url,
        "host": (_host(url) or "").lower(),
        "path": urlsplit(url).path,
        "traffic_source": source,
        "country": (fields["country"] or "unknown").upper(),
        "ts": fields["ts"],
        "duration_ms": duration,
        "engaged": duration >= 10_000,
    }


def views_per_user(records: Iterable[PageView]) -> dict[str, str]:
    """The per-user table over every parsed record with a user, keyed by user id."""
    table: dict[str, dict[str, Any]] = {}
    for record in records:
        fields = record.fields
        if fields is None or fields["user_id"] is None:
            continue
        row = table.setdefault(
            fields["user_id"],
            {"user_id": fields["user_id"], "views": 0, "total_duration_ms": None, "last_seen": 0},
        )
        row["views"] += 1
        if fields["duration_ms"] is not None:
            row["total_duration_ms"] = (row["total_duration_ms"] or 0) + fields["duration_ms"]
        row["last_seen"] = max(row["last_seen"], millis(fields["ts"]))
    return {user: canonical(row) for user, row in table.items()}


def views_per_country(rows: Counter[str]) -> dict[str, str]:
    """The per-country table over the enriched stream's rows (`canonical`, with how often the
    stream holds each)."""
    table: dict[str, dict[str, Any]] = {}
    for text, times in rows.items():
        row = json.loads(text)
        found = table.setdefault(
            row["country"],
            {"country": row["country"], "views": 0, "engaged_views": 0, "external_views": 0},
        )
        found["views"] += times
        found["engaged_views"] += times * int(row["engaged"])
        found["external_views"] += times * int(row["traffic_source"] == "external")
    return {country: canonical(row) for country, row in table.items()}


@dataclass(frozen=True)
class Rewound:
    """A rewind as its view's status recorded it once done: the revision, and per partition of
    the input where its group was (from) and where it was moved (to)."""

    request_id: str
    revision: int
    moves: dict[int, tuple[int, int]]  # partition -> (from, to)


def times_written(offset: int, moves: Sequence[tuple[int, int]]) -> int:
    """How often a kept record at `offset` is in the output after rewinds `moves` (from, to)
    of its partition: once, once more for each rewind that went back past it (to <= offset <
    from), once less for each that skipped it (from <= offset < to)."""
    return 1 + sum((to <= offset < start) - (start <= offset < to) for start, to in moves)


def writer_stop(counts: Mapping[int, int], to: int) -> int | None:
    """Where the writer of one partition would have to have stood (the F of the module
    docstring) for one rewind to `to` to explain how often each record that yields output
    (offset -> times found) is in it; None when no position does."""
    doubled = [o for o, n in counts.items() if n == 2]
    missing = [o for o, n in counts.items() if n == 0]
    if doubled:  # it wrote past the rewind's target: [to, stop) twice
        stop = max(doubled) + 1
    elif missing:  # it stopped short of the target: [stop, to) never
        stop = min(missing)
    else:
        stop = to
    if all(n == times_written(o, [(stop, to)]) for o, n in counts.items()):
        return stop
    return None


def input_positions(
    bootstrap: str, records: Sequence[PageView], timeout: float = 60.0
) -> tuple[dict[int, tuple[int, int]], list[str]]:
    """Where each page view landed in `INPUT_TOPIC` (seq -> partition, offset), and what is
    wrong with the topic: a record there twice, or one not appended, or missing."""
    by_value = {r.value: r.seq for r in records}
    positions: dict[int, tuple[int, int]] = {}
    problems = []
    for read in read_topic(bootstrap, INPUT_TOPIC, timeout):
        seq = by_value.get(read.value or b"")
        if seq is None or seq in positions:
            problems.append(f"{INPUT_TOPIC} {read.partition}@{read.offset}: not appended once")
            continue
        positions[seq] = (read.partition, read.offset)
    if len(positions) != len(records):
        problems.append(f"{len(records) - len(positions)} page views missing from {INPUT_TOPIC}")
    return positions, problems[:5]


def output_offsets(
    records: Sequence[PageView], positions: Mapping[int, tuple[int, int]], threshold: int
) -> dict[tuple[int, int], str]:
    """Input (partition, offset) -> what the enriched view writes for it: its row (`canonical`),
    or `DEAD_LETTER` for a malformed record; records its filter drops are left out."""
    found: dict[tuple[int, int], str] = {}
    for record in records:
        if record.fields is None:
            found[positions[record.seq]] = DEAD_LETTER
            continue
        row = enriched(record.fields, threshold)
        if row is not None:
            found[positions[record.seq]] = canonical(row)
    return found


DEAD_LETTER = "(dead letter)"


def writer_stops(
    outputs: Mapping[tuple[int, int], str],
    rows: Counter[str],
    letters: Counter[tuple[int, int]],
    rewind: Rewound,
) -> tuple[dict[int, int], list[str]]:
    """Per partition `rewind` moved, where its writer would have to have stood to explain at
    once how often each row is in the output (`rows`) and each dead letter in the revision's
    dead letters (`letters`, by input position); and what no position explains. For a failure's
    message: the expected output is stated from the recorded positions."""
    stops: dict[int, int] = {}
    problems: list[str] = []
    for partition, (start, to) in sorted(rewind.moves.items()):
        counts = {
            offset: letters[(p, offset)] if out == DEAD_LETTER else rows[out]
            for (p, offset), out in outputs.items()
            if p == partition
        }
        stop = writer_stop(counts, to)
        if stop is None:
            problems.append(
                f"rewind {rewind.request_id} of partition {partition} (from {start} to {to}): "
                "no position where the writer stood explains how often each record is there"
            )
        stops[partition] = start if stop is None else stop
    return stops, problems


def expected_outputs(
    outputs: Mapping[tuple[int, int], str], rewinds: Sequence[Rewound]
) -> tuple[Counter[str], Counter[tuple[int, int]]]:
    """The enriched serving topic's rows and its revision's dead letters (by input position),
    each as often as it must be there after the revision's `rewinds` (`times_written`)."""
    rows: Counter[str] = Counter()
    letters: Counter[tuple[int, int]] = Counter()
    for (partition, offset), out in outputs.items():
        moves = [r.moves[partition] for r in rewinds if partition in r.moves]
        times = times_written(offset, moves)
        if out == DEAD_LETTER:
            letters[(partition, offset)] += times
        else:
            rows[out] += times
    return +rows, +letters


def difference(expected: Counter[str], found: Counter[str], what: str) -> str | None:
    """What differs between two multisets of rows, for people; None when equal."""
    missing, extra = expected - found, found - expected
    if not missing and not extra:
        return None
    return (
        f"{what}: {sum(missing.values())} row(s) missing, e.g. {list(missing)[:2]}; "
        f"{sum(extra.values())} row(s) too many, e.g. {list(extra)[:2]}"
    )


def table_difference(
    expected: Mapping[str, str], found: Mapping[str, str], what: str
) -> str | None:
    """What differs between two tables (key -> canonical row), for people; None when equal."""
    wrong = {k: (expected.get(k), found.get(k)) for k in {*expected, *found}}
    wrong = {k: v for k, v in wrong.items() if v[0] != v[1]}
    if not wrong:
        return None
    shown = "; ".join(f"{k}: expected {e}, found {f}" for k, (e, f) in sorted(wrong.items())[:3])
    return f"{what}: {len(wrong)} of {len(expected)} row(s) differ: {shown}"
