#!/usr/bin/env python3
"""Change-data-capture benchmark: how fast and how fresh Distributary carries a PostgreSQL
table's changes to a Log, and from the Log into a serving table.

One run on loopback with the real parts the integration tests use: PostgreSQL 15
(`devtools.postgres`, logical decoding), an embedded Kafka broker, and `distributary run` on a
pipeline of one Source (tables `bulk` and `ticks`, Debezium's connector on a Kafka Connect
worker) and one Sink (the Log of `ticks` upserted into a table of a second database). Three
figures:

1. capture: rows already in `bulk` when the run starts (the snapshot), then N rows inserted in
   transactions of 1,000: rows/s from the first commit until every row is in the Log, as a
   committed reader sees it;
2. freshness: rows committed into `ticks` at 1,000 a second, one per transaction; the delay
   from a row's `created_at` (clock_timestamp() in the source) to its `arrived_at` in the
   serving table (clock_timestamp() in a trigger): both from PostgreSQL's one clock;
3. sink: the run stopped, the Log of `bulk` (the snapshot and the N rows) applied into an empty
   table by the Sink's own process, and by a plain consumer upserting with the same driver
   (psycopg 3 executemany, one transaction per poll): the ceiling. Interleaved, best of each.

Why it is shaped this way:
- The run is a process of its own, started as a user starts it, so the Source and the Sink run
  as they do for a user; the benchmark reads the Logs and the tables from outside.
- A Log's arrival times are the benchmark's wall clock when its committed reader got a record;
  commits are the wall clock when the insert returned: one machine, one clock.
- Backlog rates are rows applied after the first commit seen over the time from it to the
  last (the Sink's position read from its offsets table every 20 ms; the plain upsert's own
  commits), so the Sink's start-up, which a long-running Sink pays once, is reported beside
  the rate (wall_s), not in it.
The last stdout line is one JSON object with every figure; progress goes to stderr.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))  # figures.py, parts.py: already there when run as a directory
try:
    import confluent_kafka
    import psycopg

    from distributary.artifacts import DEBEZIUM_VERSION
    from distributary.devtools.postgres import PostgresError, PostgresServer
    from distributary.local.broker import BrokerError, EmbeddedBroker
except ImportError:  # run directly by a Python without Distributary: use the project's venv
    _VENV = ROOT / ".venv"
    if __name__ == "__main__" and (_VENV / "bin" / "python").exists() and sys.prefix != str(_VENV):
        _PYTHON = str(_VENV / "bin" / "python")
        os.execv(_PYTHON, [_PYTHON, str(HERE), *sys.argv[1:]])
    raise

import backlog  # noqa: E402  (found through the path above)
import figures  # noqa: E402
import parts  # noqa: E402
from parts import BULK, TICKS, say  # noqa: E402


def load_dataplane() -> ModuleType:
    """bench/dataplane, for its account of the machine (loading runs nothing)."""
    path = str(ROOT / "bench" / "dataplane")
    loader = importlib.machinery.SourceFileLoader("bench_dataplane", path)
    spec = importlib.util.spec_from_loader("bench_dataplane", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    loader.exec_module(module)
    return module


def wait(what: str, done: Any, timeout: float, show: Any = lambda: "") -> float:
    """Wait until `done()`, saying how long every few seconds; when it was done (wall clock)."""
    started = shown = time.monotonic()
    while not done():
        now = time.monotonic()
        if now - started > timeout:
            raise TimeoutError(f"{what}: not done within {timeout:.0f}s; {show()}")
        if now - shown >= parts.PROGRESS_EVERY:
            shown = now
            say(f"  {what}: {now - started:.0f}s; {show()}")
        time.sleep(0.05)
    return time.time()


def snapshot(run: parts.Run, tail: parts.LogTail, rows: int, timeout: float) -> dict[str, Any]:
    """The rows there before the run started, in the Log."""
    say(f"waiting for the snapshot: {rows:,} rows of {BULK} in Log shop-{BULK}")
    run.until("the snapshot reaching the Log", lambda: tail.count() >= rows, timeout)
    arrivals = [t for t, v in tail.arrivals if v["id"] <= rows]
    section = figures.snapshot_section(rows, run.started, arrivals)
    say(f"  snapshot: {section['rows_per_s']} rows/s over {section['seconds']}s")
    return section


def streaming(
    run: parts.Run, postgres: PostgresServer, ticks: parts.LogTail, timeout: float
) -> None:
    """A canary row (id 0) through the Source and the Sink of `ticks`: both are running."""
    with parts.source(postgres) as db:
        db.execute(f"INSERT INTO {TICKS} (id, payload) VALUES (0, 'canary')")
    run.until("a change reaching the Log", lambda: ticks.count() >= 1, timeout)

    def in_table() -> bool:
        with parts.serving(postgres) as db:
            return db.execute("SELECT count(*) FROM ticks WHERE id = 0").fetchone() == (1,)

    run.until("the Sink applying it", in_table, timeout)


def capture(
    run: parts.Run, postgres: PostgresServer, tail: parts.LogTail, args: Any
) -> dict[str, Any]:
    """N rows inserted as fast as they go, until every one is in the Log."""
    first, rows = args.snapshot_rows + 1, args.rows
    say(f"inserting {rows:,} rows into {BULK} in transactions of {args.batch:,}")
    inserted = parts.bulk_insert(postgres, first, rows, args.batch)
    seconds = inserted["commits"][-1] - inserted["started"]
    say(f"  inserted in {seconds:.2f}s; waiting for every row in Log shop-{BULK}")

    def new(value: dict[str, Any]) -> bool:
        return bool(value["id"] >= first)

    run.until("the rows reaching the Log", lambda: tail.count(new) >= rows, args.timeout)
    arrivals = [t for t, v in tail.arrivals if new(v)]
    section = figures.capture_section(
        rows, len(inserted["commits"]), inserted["started"], inserted["commits"], arrivals
    )
    say(f"  capture: {section['rows_per_s']} rows/s; the last row "
        f"{section['last_row_in_log_after_last_commit_s']}s after the last commit")  # fmt: skip
    return section


def freshness(
    run: parts.Run, postgres: PostgresServer, tail: parts.LogTail, args: Any
) -> dict[str, Any]:
    """Rows committed at a steady rate; each one's delay to the serving table and to the Log."""
    total = args.warmup + args.seconds
    say(f"committing {args.rate:,.0f} rows/s into {TICKS} for {total:.0f}s "
        f"({args.warmup:.0f}s of warm-up, not measured)")  # fmt: skip
    inserter = parts.PacedInserter(postgres, args.rate).start()
    until = time.monotonic() + total
    while time.monotonic() < until:
        if run.process.poll() is not None:
            raise RuntimeError(f"the run exited: {run.text()[-2000:]}")
        time.sleep(min(parts.PROGRESS_EVERY, max(0.0, until - time.monotonic())))
        say(f"  {inserter.rows:,} rows committed, {tail.count() - 1:,} in the Log")
    inserter.stop()
    boundary = inserter.rows_by(inserter.started + args.warmup)
    rows = inserter.rows

    def applied() -> int:
        with parts.serving(postgres) as db:
            row = db.execute("SELECT count(*) FROM ticks WHERE id > 0").fetchone()
            return int(row[0]) if row else 0

    run.until("the Sink applying every row", lambda: applied() >= rows, args.timeout)
    with parts.serving(postgres) as db:
        in_table = [
            float(r[0])
            for r in db.execute(
                "SELECT extract(epoch FROM arrived_at - created_at) * 1000 FROM ticks "
                "WHERE id > %s",
                (boundary,),
            ).fetchall()
        ]
    in_log = [
        (at - datetime.fromisoformat(v["created_at"]).timestamp()) * 1000
        for at, v in list(tail.arrivals)
        if v["id"] > boundary
    ]
    seconds = inserter.ended - inserter.started
    inserted = {
        "rows": rows,
        "transactions": inserter.transactions,
        "achieved_rps": figures.per_second(rows, seconds),
        "rows_per_transaction": round(rows / inserter.transactions, 3),
        "largest_transaction": inserter.largest,
    }
    section = figures.freshness_section(
        args.rate, args.warmup, args.seconds, inserted, in_table, in_log, rows - boundary
    )
    say(f"  freshness: p50 {section['p50_ms']} ms, p99 {section['p99_ms']} ms, "
        f"max {section['max_ms']} ms at {inserted['achieved_rps']} rows/s")  # fmt: skip
    return section


def table_rows(postgres: PostgresServer, table: str) -> int:
    """Rows in a serving table (0 when it does not exist)."""
    with parts.serving(postgres) as db:
        if db.execute("SELECT to_regclass(%s)", (table,)).fetchone() == (None,):
            return 0
        row = db.execute(f"SELECT count(*) FROM {table}").fetchone()
        return int(row[0]) if row else 0


def checked(section: dict[str, Any], postgres: PostgresServer, table: str) -> dict[str, Any]:
    """The attempt's section, `incomplete` unless its table holds every row."""
    rows = table_rows(postgres, table)
    section["rows_in_table"] = rows
    if rows != section["rows"]:
        section["status"] = "incomplete"
    return section


def sink_attempt(
    postgres: PostgresServer, spec: Any, folder: Path, offsets: Any, timeout: float
) -> dict[str, Any]:
    """The Sink's own process applying the Log's backlog into an empty table."""
    total = sum(len(o) for o in offsets.values())
    position = backlog.SinkPosition(postgres, spec.name, offsets).start()
    started = time.time()
    process = backlog.start_sink(spec, folder)
    try:
        wait(
            f"the Sink filling {spec.table}",
            lambda: position.last() >= total or process.poll() is not None,
            timeout,
            lambda: f"{position.last():,} of {total:,} rows",
        )
    finally:
        backlog.stop_process(process)
        position.stop()
    section = figures.attempt_section("sink", started, position.samples, total)
    checked(section, postgres, spec.table)
    say(f"  sink into {spec.table}: {section['rows_per_s']} rows/s (wall {section['wall_s']}s)")
    return section


def plain_attempt(
    postgres: PostgresServer, bootstrap: str, topic: str, table: str, total: int, timeout: float
) -> dict[str, Any]:
    """The plain consumer and batched upsert applying the same backlog into an empty table."""
    samples: list[tuple[float, int]] = []
    failure: list[BaseException] = []

    def apply() -> None:
        try:
            backlog.plain_upsert(postgres, bootstrap, topic, table, samples)
        except BaseException as exc:
            failure.append(exc)

    started = time.time()
    worker = threading.Thread(target=apply, daemon=True)
    worker.start()
    worker.join(timeout)
    if failure:
        say(f"  the plain upsert failed: {failure[0]}")
    section = figures.attempt_section("plain", started, list(samples), total)
    checked(section, postgres, table)
    say(f"  plain into {table}: {section['rows_per_s']} rows/s (wall {section['wall_s']}s)")
    return section


def sink(
    postgres: PostgresServer, bootstrap: str, state: Path, ddl: str, args: Any
) -> dict[str, Any]:
    """The Sink beside the plain upsert, interleaved `--repeat` times, on the Log of `bulk`."""
    topic = f"shop-{BULK}"
    offsets, ends = backlog.record_offsets(bootstrap, topic)
    total = sum(len(o) for o in offsets.values())
    columns = backlog.log_columns(ddl)
    password = state / "secrets" / "serving-db" / "password"
    say(f"applying Log {topic}'s {total:,} rows into empty tables: the Sink, then a plain "
        f"batched upsert, {args.repeat} time(s)")  # fmt: skip
    sink_runs, plain_runs = [], []
    for n in range(1, args.repeat + 1):
        spec = backlog.sink_spec(postgres, bootstrap, topic, columns, f"bulk_sink_{n}", password)
        sink_runs.append(sink_attempt(postgres, spec, state / "sinks", offsets, args.timeout))
        table = f"public.bulk_plain_{n}"
        plain_runs.append(plain_attempt(postgres, bootstrap, topic, table, total, args.timeout))
    section = figures.sink_section(sink_runs, plain_runs)
    section["log"] = {
        "topic": topic,
        "columns": ddl,
        "records": total,
        "end_offsets": sum(ends.values()),
        "commit_markers": sum(ends.values()) - total,
    }
    say(f"  sink/plain: {section['sink/plain']}")
    return section


def pipeline(
    postgres: PostgresServer, bootstrap: str, state: Path, args: Any
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The run's part: snapshot, capture and freshness; the Log columns of `bulk`."""
    folder, secrets = parts.write_pipeline(state, postgres.port)
    bulk = parts.LogTail(bootstrap, f"shop-{BULK}").start()
    ticks = parts.LogTail(bootstrap, f"shop-{TICKS}").start()
    say("starting `distributary run` (a Source with a Kafka Connect worker, a Sink)")
    run = parts.Run(folder, secrets, state / "run", bootstrap)
    try:
        captured = {"snapshot": snapshot(run, bulk, args.snapshot_rows, args.timeout)}
        streaming(run, postgres, ticks, args.timeout)
        captured.update(capture(run, postgres, bulk, args))
        fresh = freshness(run, postgres, ticks, args)
        ddl = run.tables()[f"public.{BULK}"]
    except BaseException:
        say(f"what the run said last:\n{run.text()[-3000:]}")
        raise
    finally:
        say("stopping the run")
        run.stop()
        bulk.stop()
        ticks.stop()
    return captured, fresh, ddl


def machine(postgres: PostgresServer) -> dict[str, Any]:
    """bench/dataplane's account of the machine, with the versions of this benchmark's parts."""
    found: dict[str, Any] = dict(load_dataplane().machine())
    found.pop("pyspark", None)
    version = postgres.execute("SHOW server_version")[0][0]
    found.update(
        postgres=version,
        debezium=DEBEZIUM_VERSION,
        psycopg=psycopg.__version__,
        confluent_kafka=confluent_kafka.version(),
        librdkafka=confluent_kafka.libversion()[0],
    )
    found["load_average"] = found.pop("load_average")  # last, as in the other benchmarks
    return found


def run(args: Any, state: Path) -> dict[str, Any]:
    """Start the parts, measure, stop the parts; the report."""
    postgres = PostgresServer(state / "postgres")
    broker = EmbeddedBroker(state / "kafka")
    try:
        say(f"starting PostgreSQL and the Kafka broker in {state}")
        postgres.start()
        broker.start()
        bootstrap = broker.bootstrap_servers
        parts.prepare_databases(postgres, args.snapshot_rows)
        captured, fresh, ddl = pipeline(postgres, bootstrap, state, args)
        backlog = sink(postgres, bootstrap, state, ddl, args)
        return {
            "benchmark": "cdc",
            "quick": args.quick,
            "rows": args.rows,
            "snapshot_rows": args.snapshot_rows,
            "batch": args.batch,
            "partitions": parts.PARTITIONS,
            "payload_bytes": figures.PAYLOAD_BYTES,
            "capture": captured,
            "freshness": fresh,
            "sink": backlog,
            "machine": machine(postgres),
        }
    finally:
        broker.stop()
        postgres.stop()


def main(argv: list[str]) -> int:
    """Run the benchmark; the exit code."""
    args = figures.parse_args(argv)
    state = Path(tempfile.mkdtemp(prefix="distributary-bench-cdc-"))
    started = time.monotonic()
    try:
        report = run(args, state)
        report["wall_s"] = round(time.monotonic() - started, 1)
        print(json.dumps(report), flush=True)
        return 0
    except (PostgresError, BrokerError, psycopg.Error, RuntimeError, TimeoutError) as exc:
        say(f"failed: {exc}")
        return 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        if args.keep_state:
            say(f"kept {state}")
        else:
            shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
