"""`bench/reprocess --live`: the SQL change while records keep arriving, as in production.

A history of N records, then a producer appending at a steady rate from before revision 1
starts until after revision 2 serves. Revision 1 reads the history and keeps up; the SQL
changes; revision 2 reads everything from the start beside it and, once the operator sees it
keeping up (behind by no more than what arrives in the cutover window) for the window, serves.

Why it is shaped this way:
- The producer is a thread of the benchmark that paces itself on a schedule (rate x elapsed):
  when the busy machine holds it back it sends the backlog at once, so its mean rate holds, and it
  reports what it really did (its mean, its slowest second, how far behind schedule it fell).
- The catch-up rate is compared with revision 1's rate and the producer's over the same span,
  in the same run (live_figures.py).
- After the cutover the producer runs on a few seconds, stops, and revision 2 reads the rest:
  its topic must then hold exactly what the new SQL makes of every record appended, compared
  as multisets (a digest per row), so a lost or duplicated record shows.
- A cutover that does not come is a figure too: the report then says what status said.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from types import ModuleType
from typing import Any

import figures
import live_figures
import parts
from confluent_kafka import Consumer, Producer, TopicPartition
from figures import LOG, MAX_DURATION_AFTER, PARTITIONS, SQL_AFTER, SQL_BEFORE, VIEW, Sample
from parts import say

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.cluster import client_config

MARK_EVERY = 0.5  # the producer notes how many records were acknowledged this often (s)
SETTINGS: dict[str, str | int | float | bool] = {"linger.ms": 5, "compression.type": "lz4"}


class Appender:
    """Appends record `value(i)` for i = first, first + 1, ... at `rate` a second on a thread
    (partition i % 4), until stopped; notes (time, records acknowledged) every half second."""

    def __init__(
        self, bootstrap: str, first: int, rate: float, value: Callable[[int], bytes]
    ) -> None:
        self.bootstrap, self.first, self.rate, self.value = bootstrap, first, rate, value
        self.sent = self.acked = self.max_behind = 0
        self.marks: list[tuple[float, int]] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Appender:
        """Start appending."""
        self._thread.start()
        return self

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failures.append(str(err))

    def _run(self) -> None:
        producer = Producer(client_config(self.bootstrap, **SETTINGS))
        started = time.monotonic()
        self.marks.append((time.time(), 0))
        marked = started
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            self.max_behind = max(self.max_behind, due - self.sent)
            while self.sent < due:
                i = self.first + self.sent
                try:
                    producer.produce(LOG, self.value(i), partition=i % PARTITIONS,
                                     on_delivery=self._delivered)  # fmt: skip
                except BufferError:
                    producer.poll(0.01)
                    continue
                self.sent += 1
            producer.poll(0)
            if time.monotonic() - marked >= MARK_EVERY:
                marked = time.monotonic()
                self.marks.append((time.time(), self.acked))
            self._stop.wait(0.005)
        if producer.flush(60):
            self.failures.append("flush timed out")
        self.marks.append((time.time(), self.acked))

    def stop(self) -> int:
        """Stop appending; the records acknowledged. Raises RuntimeError when any failed."""
        self._stop.set()
        self._thread.join(120)
        if self.failures:
            raise RuntimeError(f"appending to {LOG} failed: {self.failures[:3]}")
        return self.acked


class LoadAverage:
    """The machine's one-minute load average, sampled every five seconds on a thread."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.values.append(round(os.getloadavg()[0], 2))
            if self._stop.wait(5.0):
                return

    def start(self) -> LoadAverage:
        """Start sampling."""
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        """Stop; the lowest and highest sampled, and how many samples."""
        self._stop.set()
        self._thread.join()
        return {"min": min(self.values), "max": max(self.values), "samples": len(self.values)}


def attempt(
    bench: parts.Bench, what: str, done: Callable[[], bool], timeout: float
) -> float | None:
    """`parts.wait`, but a wait that runs out is a finding: None, said, not raised."""
    try:
        return parts.wait(what, done, timeout, bench.show)
    except TimeoutError as exc:
        say(f"  {exc}")
        return None


def serve(bench: parts.Bench, history: int) -> dict[str, Any]:
    """The view at the first SQL: revision 1 reads the history, then keeps up for a while."""
    args, window = bench.args, figures.seconds_of(bench.args.cutover_window)
    say(f"applying view {VIEW}: revision 1 reads {history:,} records of history, then keeps up")
    applied = time.time()
    bench.kube.apply(bench.view(SQL_BEFORE))
    read = bench.until("revision 1 reading the history", lambda: bench.read(1) >= history)

    def steady(s: Sample) -> bool:
        return s.serving == 1 and live_figures.keeps_up(s, 1, window)

    def held() -> bool:
        held_s = live_figures.held_for(list(bench.watcher.samples), steady)
        return bool(held_s >= args.keep_up_seconds)

    kept = attempt(
        bench, f"revision 1 keeping up for {args.keep_up_seconds:g}s", held, args.timeout
    )
    return {"applied": applied, "history_read": read, "kept_up": kept}


def cut_over(bench: parts.Bench) -> dict[str, Any]:
    """The SQL change: wait until the output Log reads revision 2's topic (or give up)."""
    say("changing the SQL: revision 2 reads everything from the start beside revision 1")
    applied = time.time()
    bench.kube.apply(bench.view(SQL_AFTER))
    moved = figures.revision_topic(2)
    done = attempt(
        bench,
        "revision 2 catching up, then cutover, records arriving",
        lambda: bench.watcher.last().log_topic == moved,
        bench.args.timeout,
    )
    if done is not None:
        say(f"  cut over: the Log {VIEW} reads {moved}")
    return {"applied": applied, "moved": done, "runner_started": bench.runner_started(2)}


def topic_rows(bootstrap: str, topic: str) -> Counter[bytes]:
    """Every record of `topic`, as row digests (live_figures.row_key)."""
    ends = KafkaAdmin(bootstrap).end_offsets([topic])[topic]
    settings: dict[str, str | int | float | bool] = {
        "group.id": f"bench-reprocess-check-{os.getpid()}",
        "enable.auto.commit": False,
    }
    consumer = Consumer(client_config(bootstrap, **settings))
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    left, rows = {p for p, end in ends.items() if end > 0}, Counter[bytes]()
    deadline = time.monotonic() + 300
    try:
        while left and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 1.0):
                if message.error() is not None:
                    continue
                rows[live_figures.row_key(json.loads(message.value() or b"{}"))] += 1
                if (message.offset() or 0) + 1 >= ends[message.partition() or 0]:
                    left.discard(message.partition() or 0)
    finally:
        consumer.close()
    return rows


def expected_rows(records: int, dataplane: ModuleType) -> Counter[bytes]:
    """What the new SQL makes of records 0 .. records - 1, as row digests."""
    return Counter(
        live_figures.row_key(json.loads(dataplane.record_value(i)))
        for i in range(records)
        if dataplane.duration_ms(i) < MAX_DURATION_AFTER
    )


def check_output(
    bench: parts.Bench, history: int, appended: int, dataplane: ModuleType
) -> dict[str, Any]:
    """After the producer stopped: wait until revision 2 has read every record, then compare
    its topic with what the new SQL makes of them."""
    total = history + appended
    ends = sum(KafkaAdmin(bench.bootstrap).end_offsets([LOG])[LOG].values())
    stopped = time.time()
    drained = attempt(bench, "revision 2 reading the rest", lambda: bench.read(2) >= ends, 300)
    say(f"comparing {figures.revision_topic(2)} with what the new SQL makes of {total:,} records")
    written = topic_rows(bench.bootstrap, figures.revision_topic(2))
    found = live_figures.compare(expected_rows(total, dataplane), written)
    return {
        "appended": total,
        "input_records": ends,
        "drained_s": figures.since(stopped, drained),
        **found,
        "exact": found["exact"] and ends == total,
    }


def status_now(view: dict[str, Any]) -> dict[str, Any]:
    """What the view's status says (serving, each revision's row, the conditions), for a
    cutover that did not come."""
    status = view.get("status") or {}
    keep = (
        "revision",
        "phase",
        "lag",
        "inputRate",
        "caughtUpSince",
        "recordsRead",
        "progressMessage",
    )
    return {
        "servingRevision": status.get("servingRevision"),
        "lag": status.get("lag"),
        "revisions": [{k: r[k] for k in keep if k in r} for r in status.get("revisions") or []],
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message")}
            for c in status.get("conditions") or []
        ],
    }


def sections(
    bench: parts.Bench, first: dict[str, Any], new: dict[str, Any] | None, appender: Appender
) -> dict[str, Any]:
    """The report's serving and reprocess sections, from the phases, the samples and the
    runners' progress records."""
    args, samples = bench.args, list(bench.watcher.samples)
    window = figures.seconds_of(args.cutover_window)
    r1 = figures.data_batches(parts.progress_records(bench.bootstrap, 1))
    held = first["kept_up"] - args.keep_up_seconds if first["kept_up"] else first["history_read"]
    edit = new["applied"] if new else None
    serving = {
        "revision": 1,
        "history_read_s": figures.since(first["applied"], first["history_read"]),
        "kept_up_s": figures.since(first["applied"], first["kept_up"]),
        "spark": figures.spark_rate(figures.between(r1, held, edit)),
        "lag": live_figures.lag_account(samples, 1, window, held, edit),
    }
    if new is None:
        return {"serving": serving, "reprocess": None}
    r2 = figures.data_batches(parts.progress_records(bench.bootstrap, 2))
    applied, later = new["applied"], figures.between(r2, new["applied"])
    timeline = live_figures.live_timeline(
        samples, applied, new["runner_started"], later[0].start if later else None
    )
    caught = live_figures.caught_up_with_serving(samples, applied)
    moved = new["moved"] or new.get("moved_after_producer_stopped")
    reprocess = {
        "revision": 2,
        "timeline": timeline,
        "catchup": live_figures.catchup_section(applied, samples, r1, r2, appender.marks),
        "lag_until_cutover": live_figures.lag_account(samples, 2, window, caught or applied, moved),
        "serving_lag_meanwhile": live_figures.lag_account(samples, 1, window, applied, moved),
    }
    if new["moved"] is None:
        last = samples[-1].at if samples else applied
        reprocess["status_when_producer_stopped"] = new["status"]
        reprocess["lag_last_30s"] = {
            n: live_figures.lag_account(samples, n, window, last - 30, None) for n in (1, 2)
        }
        reprocess["moved_after_producer_stopped_s"] = figures.since(
            applied, new.get("moved_after_producer_stopped")
        )
    return {"serving": serving, "reprocess": reprocess}


def outcome(first: dict[str, Any], new: dict[str, Any] | None) -> str:
    """How the run ended, in a word."""
    if new is None or first["kept_up"] is None:
        return "serving_not_keeping_up"
    if new["moved"] is not None:
        return "cut_over"
    if new.get("moved_after_producer_stopped") is not None:
        return "cut_over_only_after_producer_stopped"
    return "no_cutover"


def measure(bench: parts.Bench, dataplane: ModuleType) -> dict[str, Any]:
    """The live run, then its report."""
    args = bench.args
    bench.kube.apply(figures.log_manifest())
    bench.until(f"Log {LOG} Ready", lambda: parts.is_true(bench.kube.get("logs", LOG), "Ready"))
    bench.watcher.start()
    load = LoadAverage().start()
    say(f"appending {args.records:,} records of history (~200 bytes) to {LOG}")
    produced = parts.produce(bench.bootstrap, range(args.records), dataplane.record_value)
    say(
        f"appending {args.rate:,.0f} records/s from now until {args.after_cutover:g}s after cutover"
    )
    appender = Appender(bench.bootstrap, args.records, args.rate, dataplane.record_value).start()
    new: dict[str, Any] | None = None
    try:
        first = serve(bench, args.records)
        if first["kept_up"] is not None:
            new = cut_over(bench)
            if new["moved"] is not None:
                time.sleep(args.after_cutover)
    finally:
        appended = appender.stop()
    say(f"producer stopped: {appended:,} records appended live")
    output = None
    if new is not None and new["moved"] is None:
        new["status"] = status_now(bench.watcher.view)
        new["moved_after_producer_stopped"] = attempt(
            bench,
            "cutover once nothing arrives",
            lambda: bench.watcher.last().log_topic == figures.revision_topic(2),
            args.timeout,
        )
    if new is not None and (new["moved"] or new.get("moved_after_producer_stopped")):
        output = check_output(bench, args.records, appended, dataplane)
    bench.watcher.stop()
    parts_of = sections(bench, first, new, appender)
    window = figures.seconds_of(args.cutover_window)
    report: dict[str, Any] = {
        "benchmark": "reprocess",
        "variant": "live",
        "quick": args.quick,
        "history_records": args.records,
        "rate_rps": args.rate,
        "partitions": PARTITIONS,
        "sql_before": SQL_BEFORE,
        "sql_after": SQL_AFTER,
        "trigger": args.trigger,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "cutover_window_s": window,
        "cutover_max_lag": 0,
        "keep_up_threshold_records": round(args.rate * window),
        "observe_interval_s": args.observe_interval,
        "outcome": outcome(first, new),
    }
    if parts_of["reprocess"] is not None:
        report.update(live_figures.summary(parts_of["serving"], parts_of["reprocess"]))
    report["exact"] = output["exact"] if output else None
    report["produce"] = live_figures.produce_section(appender.marks, args.rate, appender.max_behind)
    report["history"] = {"records": args.records, "produce_s": round(produced, 3)}
    report.update(parts_of)
    report["output"] = output
    report["load_average_during"] = load.stop()
    report["machine"] = dataplane.machine()
    return report
