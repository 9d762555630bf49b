#!/usr/bin/env python3
"""Tables benchmark: a view over a table that changes, kept exact by the runner, against
recomputing the query over the whole table.

One run on loopback, one embedded broker. A compacted, keyed Log of N rows (id, city, balance;
2 partitions) is loaded; the runner starts on the RunnerSpec the planners make for the view
`SELECT city, count(*) AS accounts, sum(balance) AS balance FROM accounts GROUP BY city` (read
as a table: the Log is compacted; an upsert output, exactly once) and catches up. Then, for
--seconds, a steady share of the rows is changed each second (each change moves a row to a
random city with a new balance), and a marker row moves every 250 ms to a city of its own.
Measured:
- the rate of changes maintained and the view's batches (Spark's own duration of each);
- freshness: the delay from a marker's append to its city's row in the output (both topics
  stamped by the broker, LogAppendTime);
- in the same run, on the same two threads, the cost of recomputing the query over the whole
  table with a plain Spark batch (read the compacted topic, keep each key's latest record,
  aggregate): what a view that recomputed per batch would pay each batch;
- the state the view keeps, per key (its checkpoint's state folder on disk).
Both answers are compared exactly with the table the benchmark wrote. The last stdout line is
one JSON object with every figure; progress goes to stderr.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
try:
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    from distributary.api.log import Log
    from distributary.api.view import DerivedView
    from distributary.artifacts import SPARK_KAFKA_CONNECTOR, jars
    from distributary.backends.local_spark import LocalRuntime
    from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
    from distributary.kafka.cluster import client_config
    from distributary.local.broker import BrokerError, EmbeddedBroker
    from distributary.plan.applications.runner_spec import RunnerSpec, view_runner_spec
    from distributary.plan.kafka_topics.topics import CreateTopic
    from distributary.plan.pipelines.pipeline import revision_topic
    from distributary.plan.revisions.classify import revision_hash, view_definition
    from distributary.plan.revisions.progress import progress_key
except ImportError:  # run directly by a Python without Distributary: use the project's venv
    _VENV = HERE.parent.parent / ".venv"
    if __name__ == "__main__" and (_VENV / "bin" / "python").exists() and sys.prefix != str(_VENV):
        os.execv(
            _VENV / "bin" / "python", [str(_VENV / "bin" / "python"), str(HERE), *sys.argv[1:]]
        )
    raise

import figures  # noqa: E402  (found through the path above)
from figures import ALIAS, MARKER_EVERY, SCHEMA, SQL, Table  # noqa: E402

PARTITIONS, NAMESPACE = 2, "bench"


def say(message: str) -> None:
    print(f"[tables] {message}", file=sys.stderr, flush=True)


def runner_spec(state: Path, bootstrap: str, trigger: str) -> RunnerSpec:
    """The view's runner spec, as the planners and `distributary run`'s local runtime make it."""
    meta = {"namespace": NAMESPACE}
    table = Log.model_validate(
        {
            "metadata": {"name": "bench-accounts", **meta},
            "spec": {"partitions": PARTITIONS, "compaction": True, "key": ["id"], "schema": SCHEMA},
        }
    )
    view = DerivedView.model_validate(
        {
            "metadata": {"name": "bench-cities", **meta},
            "spec": {
                "inputs": [{"log": "bench-accounts", "alias": ALIAS}],
                "sql": SQL,
                "output": {"mode": "upsert", "key": ["city"], "partitions": PARTITIONS},
                "spark": {
                    "trigger": trigger,
                    "sparkConf": {
                        "spark.driver.host": "127.0.0.1",
                        "spark.driver.bindAddress": "127.0.0.1",
                        "spark.ui.enabled": "false",
                    },
                },
            },
        }
    )
    output = Log.model_validate(
        {"metadata": {"name": "bench-cities", **meta}, "spec": {"partitions": PARTITIONS}}
    )
    planned = view_runner_spec(
        view,
        {ALIAS: table},
        output,
        revision=1,
        spec_hash=revision_hash(view_definition(view, {ALIAS: table})),
        output_topic=revision_topic(output, 1),
        checkpoint_root=str(state / "checkpoints"),
        bootstrap_servers=bootstrap,
    )
    return LocalRuntime(state / "local", cores=2).local_spec(planned)


def produce(bootstrap: str, topic: str, rows: list[dict[str, Any]], rate: float | None) -> float:
    """Append each row's record in order (partition id % 2), at `rate` a second if given."""
    failures: list[str] = []
    producer = Producer(client_config(bootstrap, **{"linger.ms": 5, "enable.idempotence": True}))
    started = time.monotonic()
    for n, row in enumerate(rows):
        if rate is not None and (ahead := started + n / rate - time.monotonic()) > 0.001:
            time.sleep(ahead)
        key, value = figures.encode(row)
        while True:
            try:
                producer.produce(
                    topic, value, key, partition=row["id"] % PARTITIONS,
                    on_delivery=lambda err, _m: failures.append(str(err)) if err else None,
                )  # fmt: skip
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) or failures:
        raise RuntimeError(f"appending to {topic} failed: {failures[:3] or 'flush timed out'}")
    return time.monotonic() - started


def read(bootstrap: str, topic: str, admin: KafkaAdmin) -> list[Any]:
    """Every committed record of `topic` up to its end now."""
    until = admin.end_offsets([topic])[topic]
    settings = {
        "group.id": f"bench-tables-{os.getpid()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
    }
    client = Consumer(client_config(bootstrap, **settings))
    client.assign([TopicPartition(topic, p, -2) for p in until])
    left, records = {p for p, end in until.items() if end > 0}, []
    deadline = time.monotonic() + 300
    try:
        while left and time.monotonic() < deadline:
            for message in client.consume(10_000, 1.0):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    left.discard(message.partition())
                elif error is None:
                    records.append(message)
                    if message.offset() + 1 >= until[message.partition()]:
                        left.discard(message.partition())
    finally:
        client.close()
    return records


class Run:
    """The broker, the runner, and what they did."""

    def __init__(self, args: Any, bootstrap: str, state: Path) -> None:
        self.args, self.bootstrap, self.state = args, bootstrap, state
        self.admin = KafkaAdmin(bootstrap)
        self.spec = runner_spec(state, bootstrap, args.trigger)
        assert self.spec.output is not None
        self.source, self.output = self.spec.inputs[0].topic, self.spec.output.topic
        self.runner: subprocess.Popen[bytes] | None = None

    def create_topics(self) -> None:
        stamped = {"message.timestamp.type": "LogAppendTime"}
        compacted = {**stamped, "cleanup.policy": "compact"}
        for topic, configs in (
            (self.source, compacted),
            (self.output, compacted),
            (self.spec.dead_letter_topic, stamped),
            (self.spec.progress_topic, {"cleanup.policy": "compact"}),
        ):
            if topic:
                self.admin.create_topic(CreateTopic(topic, PARTITIONS, None, configs))

    def start(self) -> None:
        path = self.state / "spec.json"
        path.write_text(self.spec.model_dump_json())
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        with open(self.state / "runner.log", "wb") as log:
            self.runner = subprocess.Popen(
                [sys.executable, "-m", "distributary.runner", "--spec", str(path)],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.state, env=env,
            )  # fmt: skip

    def stop(self) -> None:
        if self.runner is not None and self.runner.poll() is None:
            self.runner.terminate()
            try:
                self.runner.wait(60)
            except subprocess.TimeoutExpired:
                self.runner.kill()
                self.runner.wait(30)

    def caught_up(self, timeout: float) -> float:
        """Wait until the view's group has committed its input's end; the seconds it took."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.runner is not None and self.runner.poll() is not None:
                log = (self.state / "runner.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the runner exited {self.runner.returncode}:\n{log}")
            ends = self.admin.end_offsets([self.source])
            if self.admin.committed(self.spec.consumer_group) == ends:
                return time.monotonic() - started
            time.sleep(0.2)
        raise TimeoutError(f"the view did not catch up within {timeout:.0f}s")

    def batches(self) -> list[dict[str, Any]]:
        """The runner's progress records of this revision, in order."""
        topic = self.spec.progress_topic
        if topic is None:
            return []
        key = progress_key(self.spec.kind, self.spec.namespace, self.spec.name, 1).encode()
        found = [json.loads(m.value()) for m in read(self.bootstrap, topic, self.admin)
                 if m.key() == key and m.value()]  # fmt: skip
        return found

    def recompute(self) -> dict[str, Any]:
        """The query over the whole table, as a plain Spark batch in a JVM of its own."""
        config = self.state / "recompute.json"
        body = {"spec": self.spec.model_dump(mode="json"), "repeat": self.args.repeat}
        config.write_text(json.dumps(body))
        done = subprocess.run(
            [sys.executable, str(HERE), "--child", str(config)],
            capture_output=True, text=True, timeout=1800, cwd=self.state,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"the recomputation failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def recompute_child(config: dict[str, Any]) -> int:
    """The child: read the compacted topic whole, keep each key's latest record, aggregate; the
    time of each run (the first warms the JVM up and is not counted) and the last answer."""
    from pyspark.sql import functions as fn

    from distributary.runner.main import build_session

    spec = RunnerSpec.model_validate(config["spec"])
    spark = build_session([spec])
    runs, answer = [], {}
    for n in range(int(config["repeat"]) + 1):
        started = time.monotonic()
        raw = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", spec.bootstrap_servers)
            .option("subscribe", spec.inputs[0].topic)
            .option("startingOffsets", "earliest")
            .load()
        )
        latest = raw.groupBy("key").agg(fn.max_by("value", "offset").alias("value"))
        rows = latest.where(fn.col("value").isNotNull()).select(
            fn.from_json(fn.col("value").cast("string"), SCHEMA).alias("r")
        )
        result = (
            rows.select("r.*")
            .groupBy("city")
            .agg(fn.count(fn.lit(1)).alias("accounts"), fn.sum("balance").alias("balance"))
        )
        collected = result.collect()
        if n:
            runs.append(round((time.monotonic() - started) * 1000, 1))
        answer = {r["city"]: [int(r["accounts"]), str(r["balance"])] for r in collected}
    print(json.dumps({"runs_ms": runs, "answer": answer}), flush=True)
    return 0


def measure(run: Run) -> dict[str, Any]:
    args = run.args
    table = Table(args.groups)
    run.create_topics()
    rows = [table.row(i) for i in range(1, args.rows + 1)]
    say(f"loading {args.rows:,} rows into {run.source} (compacted, keyed by id)")
    produce(run.bootstrap, run.source, rows, None)
    say("starting the runner on the view; it reads the table from its start")
    run.start()
    load = run.caught_up(timeout=600 + args.rows / 200)
    say(f"caught up with {args.rows:,} rows in {load:.1f}s (Spark's start included)")
    rate = args.share * args.rows
    changes = [
        table.row(table.random.randint(1, args.rows)) for _ in range(int(rate * args.seconds))
    ]
    markers = int(args.seconds / MARKER_EVERY)
    every = max(1, len(changes) // max(1, markers))
    steady: list[dict[str, Any]] = []
    for n, change in enumerate(changes):
        if n % every == 0:
            steady.append(table.marker(n // every))
        steady.append(change)
    say(f"changing {rate:,.0f} rows a second for {args.seconds:g}s, a marker every {MARKER_EVERY}s")
    before = max((int(b.get("batchId", -1)) for b in run.batches()), default=-1)
    started = time.monotonic()
    produce(run.bootstrap, run.source, steady, rate=len(steady) / args.seconds)
    produced = time.monotonic() - started
    behind = run.caught_up(timeout=300)
    run.stop()
    steady_batches = {
        int(b["batchId"]): b
        for b in run.batches()
        if int(b.get("batchId", -1)) > before and b.get("numInputRows")
    }
    batches = list(steady_batches.values())
    durations = [float(b.get("batchDurationMs") or 0) for b in batches]
    per_batch = [float(b["numInputRows"]) for b in batches]
    inputs = read(run.bootstrap, run.source, run.admin)
    outputs = read(run.bootstrap, run.output, run.admin)
    sent = {json.loads(m.value())["city"]: m.timestamp()[1] for m in inputs
            if m.value() and json.loads(m.value())["id"] <= 0}  # fmt: skip
    seen: dict[str, int] = {}
    for m in outputs:
        city = json.loads(m.key()).get("city")
        if m.value() is not None and city in sent:
            seen.setdefault(city, m.timestamp()[1])
    delays = [float(seen[c] - sent[c]) for c in sent if c in seen]
    expected = table.expected()
    maintained = figures.output_table((m.key(), m.value()) for m in outputs)
    say("recomputing the query over the whole table with a Spark batch, for comparison")
    recomputed = run.recompute()
    answer = {c: (n, figures.Decimal(b)) for c, (n, b) in recomputed["answer"].items()}
    state_bytes = sum(
        f.stat().st_size for f in run.state.glob("checkpoints/**/state/**/*") if f.is_file()
    )
    batch_p50 = figures.percentile(durations, 50)
    recompute_ms = figures.percentile(recomputed["runs_ms"], 50)
    return {
        "benchmark": "tables",
        "quick": args.quick,
        "smoke": args.smoke,
        "rows": args.rows,
        "groups": args.groups,
        "sql": SQL,
        "trigger": args.trigger,
        "initial_load": {"seconds": round(load, 1), "rows_per_s": round(args.rows / load)},
        "maintained": {
            "changes": len(steady),
            "changes_per_s_offered": round(len(steady) / args.seconds),
            "changes_per_s": round(len(steady) / (produced + behind)),
            "caught_up_s_after_last_change": round(behind, 2),
            "batches": len(batches),
            "changes_per_batch_p50": figures.percentile(per_batch, 50),
            "batch_ms_p50": batch_p50,
            "batch_ms_p99": figures.percentile(durations, 99),
            "batch_phases_ms_p50": figures.phases_p50(batches),
            "exact": maintained == expected,
            "groups_wrong": sum(
                1
                for c in expected.keys() | maintained.keys()
                if expected.get(c) != maintained.get(c)
            ),
        },
        "freshness": {
            "markers": len(sent),
            "matched": len(delays),
            "p50_ms": figures.percentile(delays, 50),
            "p99_ms": figures.percentile(delays, 99),
        },
        "recompute": {
            "runs_ms": recomputed["runs_ms"],
            "median_ms": recompute_ms,
            "exact": answer == expected,
        },
        "ratios": {"recompute / maintained batch (p50)": figures.ratio(recompute_ms, batch_p50)},
        "targets": {"recompute_over_batch_at_least": figures.TARGET_RATIO},
        "state": {
            "checkpoint_state_bytes": state_bytes,
            "keys": args.rows + figures.MARKERS,
            "bytes_per_key": round(state_bytes / (args.rows + figures.MARKERS), 1),
            "measures": "the checkpoint's state folder on disk (every retained version) / rows",
        },
        "machine": {
            "cores": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
    }


def main(argv: list[str]) -> int:
    args = figures.parse_args(argv)
    if args.child:
        return recompute_child(json.loads(Path(args.child).read_text()))
    state = Path(tempfile.mkdtemp(prefix="distributary-bench-tables-"))
    try:
        say(f"starting the embedded Kafka broker in {state}")
        with EmbeddedBroker(state / "kafka") as broker:
            jars(SPARK_KAFKA_CONNECTOR)
            run = Run(args, broker.bootstrap_servers, state)
            try:
                report = measure(run)
            finally:
                run.stop()
        print(json.dumps(report), flush=True)
        return 0 if report["maintained"]["exact"] and report["recompute"]["exact"] else 1
    except (BrokerError, KafkaAdminError, RuntimeError, TimeoutError) as exc:
        say(f"failed: {exc}")
        return 1
    finally:
        if args.keep_state:
            say(f"kept {state}")
        else:
            shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
