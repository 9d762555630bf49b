"""Pipelines on the real broker and real local Spark, for the runner's integration tests.

A test writes a pipeline as YAML and runs it the way `distributary run` does, through `LocalRun`:
the same planners, the topics made by the direct backend, the local Spark settings, and the runner
as a subprocess of its own (`python -m distributary.runner --spec FILE`), so a test can kill it.
Outcomes are read back the way any Kafka user would read them: whole topics, consumer groups
through the Admin API and through Kafka's own consumer-group command, the progress topic.

Every wait is bounded and fails with what was expected, what was seen and the end of the runner's
log, so a slow or broken run says why.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as Partition

from distributary.artifacts import KAFKA_BROKER, jars
from distributary.graph import Ref, load_pipeline
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.cluster import client_config
from distributary.kafka.records import produce as append
from distributary.local.broker import java_binary
from distributary.local.run import LocalRun
from distributary.plan.applications.runner_spec import RunnerSpec
from distributary.plan.pipelines.pipeline import PipelinePlan
from distributary.plan.revisions.positions import Offsets
from distributary.plan.revisions.progress import PROGRESS_TOPIC, progress_key
from distributary.schema import RecordSchema

# Kafka 4.x moved the command behind kafka-consumer-groups.sh from kafka.admin to kafka-tools.
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"

# No Spark UI (port hunting next to other Spark applications), no per-stage console bars.
TEST_SPARK_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}


class RunnerExitedError(AssertionError):
    """The runner exited while a test waited for it; the message has the end of its log."""


@dataclass(frozen=True)
class Read:
    """One record read back from a topic, with its headers decoded."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, str]

    def json(self) -> Any:
        """The value decoded as JSON (None for a tombstone)."""
        return None if self.value is None else json.loads(self.value)


class PipelineRun:
    """A pipeline in `folder`, its topics made, and its views' runner started and stopped."""

    def __init__(self, folder: Path, pipeline_yaml: str, bootstrap: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "pipeline.yaml").write_text(pipeline_yaml)
        pipeline = load_pipeline([folder / "pipeline.yaml"])
        assert pipeline.ok, "\n".join(map(str, pipeline.problems))
        self.bootstrap = bootstrap
        self.admin = KafkaAdmin(bootstrap)
        self.local = LocalRun(
            pipeline,
            [folder],
            folder / "state",
            bootstrap_servers=bootstrap,
            say=lambda _text: None,
            spark_conf=TEST_SPARK_CONF,
        )
        self.local.state_dir.mkdir(parents=True, exist_ok=True)
        self.local.prepare(bootstrap)
        self.topics = {t.log.name: t.topic.name for t in self.plan.topics}

    @property
    def plan(self) -> PipelinePlan:
        """The pipeline's plan, as `distributary run` made it."""
        assert self.local.plan is not None
        return self.local.plan

    def view(self, name: str) -> RunnerSpec:
        """The runner spec of the view called `name`."""
        return next(s for s in self.local.specs if s.name == name)

    def schema(self, log: str) -> RecordSchema:
        """The record format of the declared Log `log`."""
        return RecordSchema.of_log(self.local.pipeline.logs[Ref.log(log)])

    def start(self) -> None:
        """Start the runner on every view (a fresh process; checkpoints are kept)."""
        self.local.start_runner()

    def kill(self) -> None:
        """SIGKILL the runner, its JVM and its Python workers (one process group): a crash."""
        process, self.local.runner = self.local.runner, None
        assert process is not None, "the runner was not started"
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)

    def stop(self) -> int | None:
        """Stop the runner with SIGTERM (killed after 60 s) and return its exit code."""
        process = self.local.runner
        self.local.stop()
        return None if process is None else process.returncode

    def log_tail(self, lines: int = 30) -> str:
        """The end of the runner's log, for failure messages."""
        if not self.local.runner_log.exists():
            return "(no runner log)"
        text = self.local.runner_log.read_text(errors="replace").splitlines()
        return "\n".join(f"  | {line}" for line in text[-lines:])

    def failure(self, message: str) -> str:
        """`message` with the end of the runner's log."""
        return f"{message}\nend of the runner log ({self.local.runner_log}):\n{self.log_tail()}"

    def rounds(
        self,
        what: str,
        probe: Callable[[], Any],
        timeout: float,
        show: Callable[[], Any] = lambda: None,
    ) -> None:
        """Rounds of the run as `distributary run` makes them (a reconcile, then the runner's
        start when what it runs changed) until `probe()` holds; fail after `timeout` seconds
        with what `show()` gives and the end of the runner's log."""
        deadline = time.monotonic() + timeout
        while not probe():
            if time.monotonic() > deadline:
                pytest.fail(self.failure(f"not {what} after {timeout:.0f}s: {json.dumps(show())}"))
            self.local.reconcile()
            self.start()
            time.sleep(0.5)

    def edit(self, folder: Path, text: str) -> None:
        """The pipeline's file in `folder` now says `text`; the run's next reconcile reads it."""
        (folder / "pipeline.yaml").write_text(text)
        found = load_pipeline([folder / "pipeline.yaml"])
        assert found.ok, found.problems
        assert self.local.files is not None
        self.local.pipeline = found
        self.local.files.graph = found

    def positions(self, names: Sequence[str]) -> dict[str, tuple[Offsets, Offsets]]:
        """For each view: its group's committed offsets and its inputs' end offsets, now."""
        seen = {}
        for name in names:
            spec = self.view(name)
            ends = self.admin.end_offsets(i.topic for i in spec.inputs)
            seen[name] = (self.admin.committed(spec.consumer_group), ends)
        return seen

    def wait_until(self, condition: Any, what: str, names: Sequence[str], timeout: float) -> None:
        """Poll until `condition(committed, ends)` holds for every view in `names`, in order (an
        upstream view first), or fail saying what was awaited and where each view stood;
        `RunnerExitedError` when the runner exits meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.positions(names)
            if all(condition(*seen[name]) for name in names):
                return
            crashed = self.local.runner_failed()
            if crashed is not None:
                raise RunnerExitedError(f"the runner exited while waiting until {what}: {crashed}")
            if time.monotonic() > deadline:
                state = "\n".join(
                    f"  {n}: committed {c}, input ends {e}" for n, (c, e) in seen.items()
                )
                pytest.fail(self.failure(f"not {what} after {timeout:.0f}s:\n{state}"))
            time.sleep(0.5)

    def wait_caught_up(self, names: Sequence[str], timeout: float = 150.0) -> None:
        """Wait until each view's committed offsets equal its inputs' end offsets."""
        self.wait_until(lambda c, e: c == e, "caught up", names, timeout)


def committed_total(committed: Offsets) -> int:
    """Records before the committed offsets, over every partition."""
    return sum(sum(partitions.values()) for partitions in committed.values())


def produce(
    bootstrap: str, topic: str, records: Iterable[tuple[int, bytes | None, bytes | None]]
) -> list[tuple[int, int]]:
    """Append (partition, key, value) records in order and return each one's (partition, offset)."""
    producer = Producer(client_config(bootstrap, **{"enable.idempotence": True, "linger.ms": 5}))
    placed: dict[int, tuple[int, int]] = {}
    failures: list[str] = []

    def delivered(index: int) -> Any:
        def report(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                failures.append(error.str())
            else:
                placed[index] = (message.partition() or 0, message.offset() or 0)

        return report

    count = 0
    for index, (partition, key, value) in enumerate(records):
        producer.produce(
            topic, key=key, value=value, partition=partition, on_delivery=delivered(index)
        )
        producer.poll(0)
        count = index + 1
    assert producer.flush(30) == 0, f"records to {topic} were not delivered within 30 s"
    assert not failures, f"Kafka refused records to {topic}: {failures[:3]}"
    return [placed[i] for i in range(count)]


def read_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Read]:
    """Every record of `topic` up to its end offsets now, in partition and offset order."""
    ends = KafkaAdmin(bootstrap).end_offsets([topic])[topic]
    pending = {p for p, end in ends.items() if end > 0}
    # Committed records only, as every reader Distributary runs; a transaction's commit marker
    # takes an offset but is no record, so a partition is read when its end is reported.
    settings = {
        "group.id": "distributary-tests",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
    }
    consumer = Consumer(client_config(bootstrap, **settings))
    consumer.assign([Partition(topic, p, OFFSET_BEGINNING) for p in sorted(pending)])
    records: list[Read] = []
    deadline = time.monotonic() + timeout
    try:
        while pending:
            assert time.monotonic() < deadline, f"{topic}: partitions {pending} not read in time"
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(message.partition() or 0)
                    continue
                assert error is None, f"reading {topic}: {error}"
                partition, offset = message.partition() or 0, message.offset() or 0
                if offset < ends[partition]:
                    headers = {k: (v or b"").decode() for k, v in message.headers() or []}
                    records.append(Read(partition, offset, message.key(), message.value(), headers))
                if offset >= ends[partition] - 1:
                    pending.discard(partition)
    finally:
        consumer.close()
    return sorted(records, key=lambda r: (r.partition, r.offset))


def values(records: Iterable[Read]) -> Counter[str]:
    """The records' JSON values as a multiset (each value re-encoded with sorted keys)."""
    return Counter(json.dumps(r.json(), sort_keys=True) for r in records)


def as_multiset(rows: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """Expected rows in the form `values` gives."""
    return Counter(json.dumps(dict(row), sort_keys=True) for row in rows)


def latest_table(records: Iterable[Read]) -> dict[str, Any]:
    """An upsert topic read as a table: the latest value per key, tombstoned keys removed."""
    table: dict[str, Any] = {}
    for record in records:
        assert record.key is not None, f"a record without a key at offset {record.offset}"
        key = record.key.decode()
        if record.value is None:
            table.pop(key, None)
        else:
            table[key] = record.json()
    return table


def latest_progress(bootstrap: str) -> dict[str, dict[str, Any]]:
    """The latest record per key of the progress topic."""
    latest = {}
    for record in read_topic(bootstrap, PROGRESS_TOPIC):
        if record.key is not None and record.value is not None:
            latest[record.key.decode()] = record.json()
    return latest


def progress_of(bootstrap: str, spec: RunnerSpec) -> dict[str, Any]:
    """The latest progress record of a view revision."""
    key = progress_key(spec.kind, spec.namespace, spec.name, spec.revision)
    latest = latest_progress(bootstrap)
    assert key in latest, f"no progress record {key!r}; records: {sorted(latest)}"
    return latest[key]


def describe_groups(bootstrap: str, groups: Sequence[str]) -> dict[str, Offsets]:
    """Each group's committed offsets as Kafka's own `kafka-consumer-groups.sh --describe` shows
    them (the CURRENT-OFFSET column), run from the cached broker jars."""
    command = [java_binary(), "-Xmx256m", "-cp", os.pathsep.join(map(str, jars(KAFKA_BROKER)))]
    command += [CONSUMER_GROUP_COMMAND, "--bootstrap-server", bootstrap, "--describe"]
    for group in groups:
        command += ["--group", group]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}"
    return parse_group_table(result.stdout)


def parse_group_table(text: str) -> dict[str, Offsets]:
    """GROUP / TOPIC / PARTITION / CURRENT-OFFSET rows of the consumer-group command's output."""
    groups: dict[str, Offsets] = {}
    header: list[str] | None = None
    for line in text.splitlines():
        words = line.split()
        if "CURRENT-OFFSET" in words:
            header = words
        elif header is not None and len(words) == len(header):
            row = dict(zip(header, words, strict=True))
            offset = row["CURRENT-OFFSET"]
            topics = groups.setdefault(row["GROUP"], {})
            topics.setdefault(row["TOPIC"], {})[int(row["PARTITION"])] = (
                int(offset) if offset != "-" else -1
            )
        elif not words:
            header = None
    return groups


class SteadyProducer:
    """Appends records `{id, user, amount}` to `topic` at `rate` a second on a thread, from id
    `first` on, until stopped: the live input of tests that edit, rewind or cut over while
    records keep arriving. Remembers every record it appended."""

    SCHEMA = "id INT, user STRING, amount INT"
    RATE = 40  # records per second, unless told

    def __init__(self, bootstrap: str, topic: str, rate: int = RATE, first: int = 0) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.rate = rate
        self.next = first
        self.schema = RecordSchema.parse(self.SCHEMA, [])
        self.sent: list[dict[str, Any]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def record(i: int) -> dict[str, Any]:
        """The record with id `i`."""
        return {"id": i, "user": f"u{i % 5}", "amount": i % 20}

    def start(self) -> SteadyProducer:
        """Start appending."""
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stopping.is_set():
            batch = [self.record(i) for i in range(self.next, self.next + 4)]
            append(self.bootstrap, self.topic, [self.schema.encode(r) for r in batch])
            self.sent.extend(batch)
            self.next += 4
            time.sleep(4 / self.rate)

    def stop(self) -> list[dict[str, Any]]:
        """Stop appending; every record appended. Waits for the batch being appended: one
        appended after this returned would be in the topic and not in the list."""
        self.stopping.set()
        if self.thread.ident is None:  # never started
            return list(self.sent)
        self.thread.join(120)
        assert not self.thread.is_alive(), f"the producer to {self.topic} did not stop in 120 s"
        return list(self.sent)


def wait_for_run(
    what: str,
    probe: Callable[[], bool],
    run: subprocess.Popen[bytes],
    said: Path,
    timeout: float,
    *,
    where: Callable[[], str] = lambda: "",
    give_up: Callable[[], str | None] = lambda: None,
) -> None:
    """Poll `probe` until it holds while a background `distributary run` (stderr in `said`)
    goes on; fail with what the run said when it exits, when `give_up()` names a reason, or
    after `timeout` seconds. `where()` adds what the test saw to each failure."""
    deadline = time.monotonic() + timeout
    seen = lambda: f" ({where()})" if where() else ""  # noqa: E731
    while time.monotonic() < deadline:
        if probe():
            return
        if run.poll() is not None:
            pytest.fail(
                f"the run exited while waiting until {what}{seen()}: {said.read_text()[-3000:]}"
            )
        reason = give_up()
        if reason is not None:
            pytest.fail(f"{reason} while waiting until {what}")
        time.sleep(0.5)
    pytest.fail(f"not {what} after {timeout:.0f}s{seen()}: {said.read_text()[-3000:]}")
