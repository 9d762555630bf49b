"""Exactly-once output: each micro-batch of a revision written in one Kafka transaction.

Spark's own Kafka sink writes at least once: a process killed after it wrote a batch and before
its checkpoint recorded the batch writes the batch again when it restarts. This sink is Spark's
`foreachBatch`: the driver collects the batch's rows (as Arrow), and one transaction, under the
revision's own transactional id, writes

- the output records,
- the dead letters of the batch's input range (only when the batch's observed count says there
  are some, or the count is unknown),
- the batch's end offsets, committed to the revision's consumer group, with a `Marker` naming
  the query and the batch in each partition's metadata.

A replayed batch (same query, batch id at most the marker's) is skipped. Readers that read
committed records (every one Distributary runs: Spark sources, `tail`, `wait`, lag) see each
batch whole, once, or not at all. A process that starts the revision fences every earlier one,
so a lingering driver cannot write or move the group after it.

The batch passes through the driver, so its size is bounded
(`plan.applications.runner_spec.EXACTLY_ONCE_BATCH` records per trigger unless the spec sets
`maxOffsetsPerTrigger`).

Fault injection: with `DISTRIBUTARY_CRASH_AFTER_TRANSACTIONS=N` in its environment the runner
kills itself (SIGKILL, with its JVM) right after its N-th committed transaction, before Spark
records the batch: the one moment a crash must not duplicate, made certain for tests and drills.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as fn
from pyspark.sql.streaming.query import StreamingQuery

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.transactions import FencedError, Record, TransactionalWriter
from distributary.plan.applications.runner_spec import RunnerSpec
from distributary.plan.revisions.delivery import Marker, batch_end, read_marker
from distributary.plan.revisions.positions import Offsets
from distributary.plan.revisions.progress import CORRUPT_METRIC, merge
from distributary.runner.dead_letters import dead_letter_frames
from distributary.runner.query import metric_name

CRASH_AFTER = "DISTRIBUTARY_CRASH_AFTER_TRANSACTIONS"
_transactions = 0  # committed by this process, for `CRASH_AFTER`


def _log(message: str) -> None:
    print(f"runner: {message}", file=sys.stderr, flush=True)


def _crash_point() -> None:
    """Kill the process (and its JVM, when it leads its process group) after the transaction
    `CRASH_AFTER` names."""
    global _transactions
    _transactions += 1
    wanted = os.environ.get(CRASH_AFTER, "")
    if wanted.isdigit() and _transactions == int(wanted):
        _log(f"{CRASH_AFTER}={wanted}: killing the runner after transaction {_transactions}")
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def read_text(session: SparkSession, path: str) -> str:
    """A small file's text, on any Hadoop file system the checkpoint may be on."""
    jvm = session.sparkContext._jvm
    assert jvm is not None
    location = jvm.org.apache.hadoop.fs.Path(path)
    fs = location.getFileSystem(session.sparkContext._jsc.hadoopConfiguration())
    stream = fs.open(location)
    try:
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


class ExactlyOnceOutput:
    """The transactional sink of one revision, and what it has written: the group's position,
    the marker, the dead letters. Called by Spark on the query's thread; `refresh` may be called
    from the runner's loop, so both hold the lock."""

    def __init__(
        self,
        spec: RunnerSpec,
        session: SparkSession,
        admin: KafkaAdmin,
        metrics: Sequence[str] | None = None,
    ) -> None:
        assert spec.output is not None
        assert spec.bootstrap_servers
        self.spec, self.session = spec, session
        # The observed metric counting each input's unparseable records (a view's are named by
        # `metric_name`; a StreamJob's query names its own).
        self.metrics = (
            tuple(metrics)
            if metrics is not None
            else tuple(metric_name(source, index) for index, source in enumerate(spec.inputs))
        )
        assert len(self.metrics) == len(spec.inputs)
        group = spec.consumer_group
        # Starting the writer fences earlier processes first; what they committed is then final.
        self.writer = TransactionalWriter(spec.bootstrap_servers, group, group, client=admin.client)
        self.marker: Marker = read_marker(admin.committed_metadata(group))
        self.committed: Offsets | None = admin.committed(group) or None
        # When the group's offsets were last committed (monotonic): an idle revision commits
        # them again before the broker's offset retention deletes them (`main.Revision`).
        self.committed_at = time.monotonic()
        self.fenced: str | None = None
        self.skipped = 0
        self._lock = threading.Lock()
        self._query: StreamingQuery | None = None
        self._started = threading.Event()

    @property
    def dead_letters(self) -> int:
        """Dead letters the revision has written, in every run (kept in the marker)."""
        return self.marker.dead_letters

    def attach(self, query: StreamingQuery) -> None:
        """The query this sink writes for; batches wait for it."""
        self._query = query
        self._started.set()

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        self._started.wait()
        assert self._query is not None
        query_id = str(self._query.id)
        with self._lock:
            if self.marker.written(query_id, batch_id):
                # Written before a crash that came ahead of Spark's own commit of the batch.
                self.skipped += 1
                _log(f"{self.label}: batch {batch_id} was written before the restart; skipped")
                return
            end = batch_end(
                read_text(self.session, f"{self.spec.checkpoint_location}/offsets/{batch_id}")
            )
            # Bytes, as Kafka takes them: no text decoded in Python only to be encoded again.
            rows = frame.select(
                fn.col("key").cast("binary").alias("key"),
                fn.col("value").cast("binary").alias("value"),
            ).toArrow()
            letters = self._dead_letters(end)
            marker = self.marker.after(query_id, batch_id, len(letters))
            records = _chain(self._output(rows), letters)
            try:
                self.writer.write(records, end, marker.text())
            except FencedError as exc:
                self.fenced = str(exc)
                raise
            _crash_point()
            self.marker = marker
            self.committed = merge(self.committed or {}, end)
            self.committed_at = time.monotonic()
            if letters:
                topic = self.spec.dead_letter_topic
                _log(f"{self.label}: {len(letters)} record(s) did not parse; sent to {topic}")

    def refresh(self) -> None:
        """Commit the position again, unchanged, in a transaction (so it too is fenced)."""
        with self._lock:
            if self.committed:
                self.writer.write([], self.committed, self.marker.text())
                self.committed_at = time.monotonic()

    def close(self) -> None:
        """Let go of the producer, once a batch being written has finished with it."""
        with self._lock:
            self.writer.close()

    @property
    def label(self) -> str:
        return f"{self.spec.namespace}/{self.spec.name} r{self.spec.revision}"

    def _output(self, rows: Any) -> Iterator[Record]:
        assert self.spec.output is not None
        topic = self.spec.output.topic
        keys, values = rows.column("key").to_pylist(), rows.column("value").to_pylist()
        for key, value in zip(keys, values, strict=True):
            yield topic, key, value, None

    def _corrupt(self) -> int | None:
        """The batch's unparseable records from the query's observed metrics, None when they
        cannot be read (then the range is scanned)."""
        assert self._query is not None
        try:
            execution = self._query._jsq.streamingQuery().lastExecution()
            observed = execution.observedMetrics()
            found: dict[str, Any] = {}
            entries = observed.iterator()
            while entries.hasNext():
                entry = entries.next()
                found[str(entry._1())] = entry._2()
        except Exception:
            return None
        total = 0
        for name in self.metrics:
            row = found.get(name)
            if row is None:
                return None
            count = row.getAs(CORRUPT_METRIC)
            total += int(count) if count is not None else 0
        return total

    def _dead_letters(self, end: Offsets) -> list[Record]:
        corrupt = self._corrupt()
        if corrupt == 0:
            return []
        letters: list[Record] = []
        for frame in dead_letter_frames(self.session, self.spec, self.committed or {}, end):
            table = frame.toArrow()
            for key, value, headers in zip(
                table.column("key").to_pylist(),
                table.column("value").to_pylist(),
                table.column("headers").to_pylist(),
                strict=True,
            ):
                pairs = [(h["key"], h["value"]) for h in headers or []]
                letters.append((self.spec.dead_letter_topic, key, value, pairs))
        return letters


def _chain(output: Iterator[Record], letters: list[Record]) -> Iterator[Record]:
    yield from output
    yield from letters
