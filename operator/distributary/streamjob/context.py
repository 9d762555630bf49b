"""A StreamJob's context: the facts the operator gave the job, and its readers and writers.

See the package's docstring for what a job's author writes, and what each reader and writer
guarantees.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as fn
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from distributary.errors import DistributaryError
from distributary.kafka.connection import spark_options
from distributary.plan.access.kafka_connection import (
    SECURITY_VARIABLE,
    SPARK_REDACTION,
    KafkaSecurity,
)
from distributary.plan.applications.runner_spec import (
    EXACTLY_ONCE_BATCH,
    RunnerInput,
    RunnerOutput,
    RunnerSpec,
    StartingPosition,
    dead_letter_topic,
    starting_options,
)
from distributary.plan.revisions.progress import CORRUPT_METRIC
from distributary.runner.query import CORRUPT_COLUMN, is_corrupt, metric_name, parse_schema, parsed
from distributary.streamjob.delivery import (
    Deliveries,
    ExactlyOnceWriter,
    has_checkpoints,
    observed_metrics,
)
from distributary.streamjob.tracker import track

PREFIX = "DISTRIBUTARY_"
REFRESH_SECONDS = 3600.0  # an idle exactly-once query commits its position again this often
MAX_RESTARTS = 3  # in-process restarts of a failed query, per query and process
Delivery = Literal["ExactlyOnce", "AtLeastOnce"]


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


def _security(env: Mapping[str, str]) -> KafkaSecurity | None:
    """The job's Kafka connection model (DISTRIBUTARY_KAFKA_SECURITY, JSON with references
    to the secrets only), None for plaintext."""
    text = env.get(SECURITY_VARIABLE)
    if not text:
        return None
    try:
        return KafkaSecurity.model_validate_json(text)
    except ValueError as exc:
        raise StreamJobError(
            f"{SECURITY_VARIABLE} is not a Kafka connection model ({exc.__class__.__name__}): "
            "let the operator set it, or unset it for a plaintext Kafka"
        ) from None


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
    dead_letter_topic: str | None = None  # None: the one the operator names for the job
    kafka_security: KafkaSecurity | None = None  # references to secrets; None: plaintext
    deliveries: Deliveries = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        deliveries = Deliveries(self.bootstrap_servers, self.kafka_security)
        object.__setattr__(self, "deliveries", deliveries)

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
            dead_letter_topic=env.get(PREFIX + "DEAD_LETTER_TOPIC") or None,
            kafka_security=_security(env),
        )

    @property
    def dead_letters_to(self) -> str:
        """The job's dead-letter topic."""
        return self.dead_letter_topic or dead_letter_topic(self.namespace, self.name)

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
        session = spark.config("spark.redaction.regex", SPARK_REDACTION).getOrCreate()
        track(session, self)
        return session

    def _starting(self, spark: SparkSession, source: RunnerInput) -> RunnerInput:
        """`source` starting where this run reads it from: the group's committed offsets when
        the job has no checkpoint and the group has some."""
        if not has_checkpoints(spark, self.checkpoint_location):
            offsets = self.deliveries.admin().committed(self.consumer_group).get(source.topic)
            if offsets:
                start = StartingPosition(kind="offsets", offsets=offsets)
                return source.model_copy(update={"starting_position": start})
        return source

    def _load(self, spark: SparkSession, source: RunnerInput, batch: int | None) -> DataFrame:
        options = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "subscribe": source.topic,
            # Only committed records: a view's output is its committed batches.
            "kafka.isolation.level": "read_committed",
            "groupIdPrefix": f"{self.consumer_group}.spark",
            **starting_options(source),
            **spark_options(self.kafka_security),
        }
        if batch is not None:
            options["maxOffsetsPerTrigger"] = str(batch)
        return spark.readStream.format("kafka").options(**options).load()

    def read(
        self,
        spark: SparkSession,
        log: str,
        max_offsets_per_trigger: int | None = EXACTLY_ONCE_BATCH,
    ) -> DataFrame:
        """The input `log` as Spark's Kafka rows (key, value, topic, partition, offset, ...),
        at most `max_offsets_per_trigger` records per micro-batch (None: no bound). An exactly
        once batch passes through the driver, hence the bound by default."""
        track(spark, self)
        return self._load(spark, self._starting(spark, self.input(log)), max_offsets_per_trigger)

    def read_json(
        self,
        spark: SparkSession,
        log: str,
        schema: str | None = None,
        max_offsets_per_trigger: int | None = EXACTLY_ONCE_BATCH,
    ) -> DataFrame:
        """The input `log`'s records parsed as JSON with `schema` (DDL; the Log's by default),
        one column per field; tombstones are skipped. A record that does not parse (not JSON,
        not an object, a field of the wrong type) is no row: it is counted and goes to the job's
        dead-letter topic. Reading one log with one schema again gives the same frame."""
        track(spark, self)
        ddl = schema or self.input(log).schema_ddl
        if not ddl:
            raise StreamJobError(f"log {log!r} declares no schema: pass one to read_json")
        known = self.deliveries.frames.get((id(spark), log, ddl))
        if known is not None:
            return known
        index = self.inputs.index(self.input(log))
        source = self._starting(spark, self.input(log)).model_copy(update={"schema_ddl": ddl})
        name = metric_name(source, index)
        taken = [n for n in self.deliveries.parsed if n == name or n.startswith(f"{name}_")]
        if taken:  # the same log read with another schema: counted apart
            name = f"{name}_{len(taken) + 1}"
        rows = parsed(self._load(spark, source, max_offsets_per_trigger), source)
        counted = rows.observe(
            name, fn.sum(fn.when(is_corrupt(), 1).otherwise(0)).alias(CORRUPT_METRIC)
        )
        columns = [c for c in parse_schema(source).fieldNames() if c != CORRUPT_COLUMN]
        frame = counted.where(~is_corrupt()).select(*(fn.col(f"record.`{c}`") for c in columns))
        self.deliveries.parsed[name] = source
        self.deliveries.frames[(id(spark), log, ddl)] = frame
        return frame

    def write(
        self, frame: DataFrame, log: str, query_name: str, delivery: Delivery = "ExactlyOnce"
    ) -> DataStreamWriter:
        """A writer of `frame` to the output `log` as JSON records (keyed by the Log's key
        columns for a compacted Log), checkpointing under the job's checkpoint as `query_name`;
        call `.start()` on it. Exactly once by default (see `distributary.streamjob`): then set no
        format, path, `foreachBatch` or checkpoint location on it."""
        sink = self.output(log)
        track(frame.sparkSession, self)
        value = fn.to_json(fn.struct(*[fn.col(f"`{c}`") for c in frame.columns]))
        key = (
            fn.to_json(fn.struct(*[fn.col(f"`{c}`") for c in sink.key]))
            if sink.key
            else fn.lit(None).cast("string")
        )
        records = frame.select(key.alias("key"), value.alias("value"))
        checkpoint = f"{self.checkpoint_location.rstrip('/')}/{query_name}"
        if delivery == "ExactlyOnce":
            observed = observed_metrics(records)
            metrics = [n for n in self.deliveries.parsed if n in observed]
            spec = self._query_spec(metrics, sink, query_name, checkpoint)
            writer: DataStreamWriter = ExactlyOnceWriter(records, spec, metrics, self.deliveries)
        else:
            writer = records.writeStream.format("kafka")
            writer = writer.option("kafka.bootstrap.servers", self.bootstrap_servers)
            writer = writer.option("topic", sink.topic)
            for option, setting in spark_options(self.kafka_security).items():
                writer = writer.option(option, setting)
        self.deliveries.writers[query_name] = writer  # to start it again if it fails
        return (
            writer.queryName(query_name)
            .option("checkpointLocation", checkpoint)
            .outputMode("update" if sink.mode == "upsert" else "append")
        )

    def _query_spec(
        self, metrics: list[str], sink: RunnerOutput, query_name: str, checkpoint: str
    ) -> RunnerSpec:
        """A runner spec for one exactly-once query: its inputs are those it reads through
        `read_json` (`metrics` names them; their dead letters go in its transactions), its
        transactional id and marker group its own."""
        return RunnerSpec(
            kind="StreamJob",
            namespace=self.namespace,
            name=self.name,
            revision=self.revision,
            spec_hash="",
            inputs=tuple(self.deliveries.parsed[n] for n in metrics),
            output=sink.model_copy(update={"delivery": "ExactlyOnce"}),
            dead_letter_topic=self.dead_letters_to,
            consumer_group=f"{self.consumer_group}.{query_name}",
            checkpoint_location=checkpoint,
            bootstrap_servers=self.bootstrap_servers,
            kafka_security=self.kafka_security,
            progress_topic=None,
        )

    def run(self, spark: SparkSession | None = None) -> None:
        """Wait while every started query runs; on SIGTERM stop them all (each checkpoints).
        A query written by `write` that fails is started again from its checkpoint, up to
        `MAX_RESTARTS` times per process, as the runner does a view's (some failures pass: Spark
        4.1.1 fails the first batch replayed after a crash in its progress report,
        SPARK-55271). Any other failure fails the job, with its error."""
        session = spark or SparkSession.builder.getOrCreate()
        queries = list(session.streams.active)
        stop = {"requested": False}
        restarts: dict[str, int] = {}

        def requested(_signum: int, _frame: FrameType | None) -> None:
            stop["requested"] = True

        signal.signal(signal.SIGTERM, requested)
        refreshed = time.monotonic()
        try:
            while not stop["requested"] and queries:
                time.sleep(0.5)
                ended = [q for q in queries if not q.isActive]
                again = [self._again(q, restarts) for q in ended]
                if None in again:
                    break
                queries = [q for q in queries if q.isActive] + [q for q in again if q is not None]
                if time.monotonic() - refreshed >= REFRESH_SECONDS:
                    self.deliveries.refresh()
                    refreshed = time.monotonic()
        finally:
            for query in queries:
                if query.isActive:
                    query.stop()
            self.deliveries.close()
        for query in queries:
            failure = query.exception()
            if failure is not None:
                raise StreamJobError(f"query {query.name} failed: {failure}")

    def _again(self, query: StreamingQuery, restarts: dict[str, int]) -> StreamingQuery | None:
        """`query`, which ended, started again when it failed and may be (None: the job ends)."""
        writer = self.deliveries.writers.get(str(query.name))
        failure = query.exception()
        done = restarts.get(str(query.name), 0)
        if failure is None or writer is None or done >= MAX_RESTARTS:
            return None
        restarts[str(query.name)] = done + 1
        first = (str(failure).strip().splitlines() or ["unknown error"])[0][:300]
        print(f"distributary: query {query.name} failed ({first}); restart {done + 1}", flush=True)
        time.sleep(min(2.0 ** (done + 1), 30.0))
        return writer.start()
