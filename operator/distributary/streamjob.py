"""What a StreamJob's own PySpark code uses to read, write and report its position.

The operator runs a job with its facts in the environment (`DISTRIBUTARY_*`: topics, bootstrap
servers, checkpoint, consumer group, revision). This module turns them into Spark readers and
writers, and reports the job's position like a view's: after every micro-batch of every query, the
batch's end offsets of the job's inputs are committed to the revision's consumer group (so status,
`kafka-consumer-groups` and the lag metrics show where the job is) and its progress is published.
The commit follows Spark's own checkpoint, so the group never claims more than was processed.

    from distributary.streamjob import StreamJobContext

    job = StreamJobContext.from_environment()
    spark = job.session("my-job")
    events = job.read_json(spark, "page-views", "user STRING, url STRING")
    query = job.write(events.groupBy("user").count(), "views-per-user", "counts").start()
    job.run()

A job that starts on a fresh checkpoint (a new revision, a rewind) starts from its consumer group's
committed offsets where the group has some, else from each input's starting position.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as fn
from pyspark.sql.streaming.listener import StreamingQueryListener
from pyspark.sql.streaming.readwriter import DataStreamWriter

from distributary.errors import DistributaryError
from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.kafka.progress import ProgressPublisher
from distributary.plan.positions import Offsets
from distributary.plan.progress import batch_of, progress_key, progress_record
from distributary.plan.runner_spec import (
    RunnerInput,
    RunnerOutput,
    StartingPosition,
    starting_options,
)

PREFIX = "DISTRIBUTARY_"


class StreamJobError(DistributaryError, RuntimeError):
    """The job's environment or a log name is not what the operator provides."""


def _need(env: Mapping[str, str], name: str) -> str:
    value = env.get(PREFIX + name)
    if not value:
        raise StreamJobError(
            f"{PREFIX}{name} is not set: run this job as a StreamJob (the operator sets it), "
            "or set it yourself to run the job by hand"
        )
    return value


@dataclass(frozen=True)
class StreamJobContext:
    """The facts the operator gave the job, and the readers and writers made from them."""

    namespace: str
    name: str
    revision: int
    bootstrap_servers: str
    checkpoint_location: str
    consumer_group: str
    inputs: tuple[RunnerInput, ...]
    outputs: tuple[RunnerOutput, ...]
    progress_topic: str | None = None

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> StreamJobContext:
        """The context from `DISTRIBUTARY_*` variables (`os.environ` by default)."""
        env = os.environ if env is None else env
        return cls(
            namespace=_need(env, "NAMESPACE"),
            name=_need(env, "NAME"),
            revision=int(_need(env, "REVISION")),
            bootstrap_servers=_need(env, "BOOTSTRAP_SERVERS"),
            checkpoint_location=_need(env, "CHECKPOINT_LOCATION"),
            consumer_group=_need(env, "CONSUMER_GROUP"),
            inputs=tuple(
                RunnerInput.model_validate(i) for i in json.loads(env.get(PREFIX + "INPUTS", "[]"))
            ),
            outputs=tuple(
                RunnerOutput.model_validate(o)
                for o in json.loads(env.get(PREFIX + "OUTPUTS", "[]"))
            ),
            progress_topic=env.get(PREFIX + "PROGRESS_TOPIC") or None,
        )

    def input(self, log: str) -> RunnerInput:
        """The input named `log`."""
        for source in self.inputs:
            if source.log == log:
                return source
        names = ", ".join(s.log for s in self.inputs) or "none"
        raise StreamJobError(f"log {log!r} is not an input of this job (inputs: {names})")

    def output(self, log: str) -> RunnerOutput:
        """The output named `log`."""
        for sink in self.outputs:
            if sink.log == log:
                return sink
        names = ", ".join(s.log for s in self.outputs) or "none"
        raise StreamJobError(f"log {log!r} is not an output of this job (outputs: {names})")

    def session(self, app_name: str | None = None) -> SparkSession:
        """The Spark session, with the position tracker installed."""
        spark = SparkSession.builder.appName(app_name or f"{self.name}-r{self.revision}")
        session = spark.getOrCreate()
        track(session, self)
        return session

    def _starting(self, spark: SparkSession, source: RunnerInput) -> dict[str, str]:
        if not _has_checkpoints(spark, self.checkpoint_location):
            committed = KafkaAdmin(self.bootstrap_servers).committed(self.consumer_group)
            offsets = committed.get(source.topic)
            if offsets:
                source = source.model_copy(
                    update={"starting_position": StartingPosition(kind="offsets", offsets=offsets)}
                )
        return starting_options(source)

    def read(self, spark: SparkSession, log: str) -> DataFrame:
        """The input `log` as Spark's Kafka rows (key, value, topic, partition, offset, ...)."""
        source = self.input(log)
        reader = spark.readStream.format("kafka")
        options = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "subscribe": source.topic,
            "groupIdPrefix": f"{self.consumer_group}.spark",
            **self._starting(spark, source),
        }
        return reader.options(**options).load()

    def read_json(self, spark: SparkSession, log: str, schema: str | None = None) -> DataFrame:
        """The input `log`'s records parsed as JSON with `schema` (DDL; the Log's by default),
        one column per field; tombstones are skipped."""
        ddl = schema or self.input(log).schema_ddl
        if not ddl:
            raise StreamJobError(f"log {log!r} declares no schema: pass one to read_json")
        raw = self.read(spark, log).where(fn.col("value").isNotNull())
        return raw.select(fn.from_json(fn.col("value").cast("string"), ddl).alias("r")).select(
            "r.*"
        )

    def write(self, frame: DataFrame, log: str, query_name: str) -> DataStreamWriter:
        """A writer of `frame` to the output `log` as JSON records (keyed by the Log's key
        columns for a compacted Log), checkpointing under the job's checkpoint as `query_name`;
        call `.start()` on it."""
        sink = self.output(log)
        value = fn.to_json(fn.struct(*[fn.col(c) for c in frame.columns]))
        columns: list[Column] = [value.alias("value")]
        if sink.key:
            key = fn.to_json(fn.struct(*[fn.col(c) for c in sink.key]))
            columns.insert(0, key.alias("key"))
        writer = frame.select(*columns).writeStream.format("kafka")
        return (
            writer.queryName(query_name)
            .option("kafka.bootstrap.servers", self.bootstrap_servers)
            .option("topic", sink.topic)
            .option("checkpointLocation", f"{self.checkpoint_location.rstrip('/')}/{query_name}")
            .outputMode("update" if sink.mode == "upsert" else "append")
        )

    def run(self, spark: SparkSession | None = None) -> None:
        """Wait while every started query runs; on SIGTERM stop them all (each checkpoints).
        A query that failed fails the job, with its error."""
        session = spark or SparkSession.builder.getOrCreate()
        queries = list(session.streams.active)
        stop = {"requested": False}

        def requested(_signum: int, _frame: FrameType | None) -> None:
            stop["requested"] = True

        signal.signal(signal.SIGTERM, requested)
        try:
            while not stop["requested"] and queries and all(q.isActive for q in queries):
                time.sleep(0.5)
        finally:
            for query in queries:
                if query.isActive:
                    query.stop()
        for query in queries:
            failure = query.exception()
            if failure is not None:
                raise StreamJobError(f"query {query.name} failed: {failure}")


def _has_checkpoints(spark: SparkSession, root: str) -> bool:
    """Whether any query has checkpointed offsets under `root` (any Hadoop file system)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(root)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return False
    for child in fs.listStatus(path):
        offsets = jvm.org.apache.hadoop.fs.Path(child.getPath(), "offsets")
        if fs.exists(offsets) and len(fs.listStatus(offsets)) > 0:
            return True
    return False


class _Tracker(StreamingQueryListener):
    """Commits each batch's end offsets of the job's inputs to its group; publishes progress."""

    def __init__(self, job: StreamJobContext) -> None:
        self.job = job
        self.topics = {s.topic for s in job.inputs}
        self.admin = KafkaAdmin(job.bootstrap_servers)
        self.publisher = (
            ProgressPublisher(job.bootstrap_servers, job.progress_topic)
            if job.progress_topic
            else None
        )
        self.position: Offsets = {}

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Nothing to do: the first batch reports the position."""

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Nothing to do: an idle query has not moved."""

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Nothing to do: the last batch was committed when it ended."""

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Commit the batch's end offsets of the job's inputs, then publish progress."""
        batch = batch_of(json.loads(event.progress.json))
        ends = {t: p for t, p in batch.end.items() if t in self.topics}
        if ends:
            try:
                self.admin.commit(self.job.consumer_group, ends)
            except KafkaAdminError as exc:
                print(f"distributary: position not committed: {exc}", flush=True)
                return
            self.position = {**self.position, **ends}
        if self.publisher is not None:
            identity = {
                "kind": "StreamJob",
                "namespace": self.job.namespace,
                "name": self.job.name,
                "revision": self.job.revision,
                "consumerGroup": self.job.consumer_group,
            }
            record = progress_record(identity, state="Running", batch=batch, position=self.position)
            key = progress_key("StreamJob", self.job.namespace, self.job.name, self.job.revision)
            self.publisher.publish(key, record)


def track(spark: SparkSession, job: StreamJobContext) -> None:
    """Report the position of every query of `spark` for `job` (once per session)."""
    if getattr(spark, "_distributary_tracked", False):
        return
    spark.streams.addListener(_Tracker(job))
    spark._distributary_tracked = True  # type: ignore[attr-defined]
