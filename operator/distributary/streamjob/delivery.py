"""A job's exactly-once writes: the runner's transactional sink, one per query of the job.

A view runs one query per revision, and its runner makes the transactional sink before it starts
the query. A job's author starts queries, so `job.write` returns a writer whose `start` does what
the runner does: make the sink (`runner.exactly_once.ExactlyOnceOutput`, which fences every
earlier process of the query), hand it to Spark's `foreachBatch`, start the query and attach it.

`Deliveries` is what one process of the job made: the inputs its `read_json` frames parse (by
observed metric, so a query's transaction can carry the dead letters of exactly the inputs it
reads) and the sinks of its exactly-once queries, whose markers keep their dead-letter counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.connection import client_settings
from distributary.kafka.transactions import TransactionError
from distributary.plan.access.kafka_connection import KafkaSecurity
from distributary.plan.applications.runner_spec import RunnerInput, RunnerSpec
from distributary.runner.exactly_once import ExactlyOnceOutput


@dataclass
class Deliveries:
    """What the job's readers and writers made in this process."""

    bootstrap_servers: str
    kafka_security: KafkaSecurity | None = None
    parsed: dict[str, RunnerInput] = field(default_factory=dict)  # observed metric -> input
    frames: dict[tuple[int, str, str], DataFrame] = field(default_factory=dict)  # read_json's
    outputs: dict[str, ExactlyOnceOutput] = field(default_factory=dict)  # by query id
    groups: dict[str, ExactlyOnceOutput] = field(default_factory=dict)  # by marker group
    writers: dict[str, DataStreamWriter] = field(default_factory=dict)  # `write`'s, by query
    _admin: KafkaAdmin | None = None

    def admin(self) -> KafkaAdmin:
        """The job's Kafka admin client (one per process)."""
        if self._admin is None:
            client = client_settings(self.kafka_security)  # resolved here, in the driver
            self._admin = KafkaAdmin(self.bootstrap_servers, client=client)
        return self._admin

    def dead_letters(self) -> int:
        """Dead letters the exactly-once queries wrote, over the revision's whole run (each
        query's marker has its count)."""
        return sum(output.dead_letters for output in self.groups.values())

    def refresh(self) -> None:
        """Commit each exactly-once query's position again: a group that commits nothing for
        the broker's `offsets.retention.minutes` loses its offsets, and its marker with them."""
        for output in self.groups.values():
            try:
                output.refresh()
            except TransactionError as exc:
                print(f"distributary: position not refreshed: {exc}", flush=True)

    def close(self) -> None:
        """Let go of the sinks' producers."""
        for output in self.groups.values():
            output.close()


class ExactlyOnceWriter(DataStreamWriter):
    """A query's writer whose `start` writes each micro-batch in one Kafka transaction with the
    dead letters of its `read_json` inputs (`metrics` names them, in `spec.inputs`' order)."""

    def __init__(
        self, records: DataFrame, spec: RunnerSpec, metrics: list[str], made: Deliveries
    ) -> None:
        super().__init__(records)
        self.spec, self.metrics, self.made = spec, metrics, made

    def start(
        self,
        path: str | None = None,
        format: str | None = None,
        outputMode: str | None = None,  # noqa: N803 (Spark's name)
        partitionBy: str | list[str] | None = None,  # noqa: N803 (Spark's name)
        queryName: str | None = None,  # noqa: N803 (Spark's name)
        **options: Any,
    ) -> StreamingQuery:
        """Start the query, its batches written by a transactional sink."""
        if path is not None or format is not None:
            raise ValueError(
                f"query {self.spec.consumer_group}: an exactly-once write goes to its Log in "
                "Kafka transactions, not to a path or format; write with "
                "delivery='AtLeastOnce' to use Spark's own sinks"
            )
        output = ExactlyOnceOutput(self.spec, self._spark, self.made.admin(), self.metrics)
        if not has_checkpoints(self._spark, self.spec.checkpoint_location, query=True):
            # A new query (a new revision, a rewind): its first range of dead letters starts
            # where it reads from, not where its group's last run ended.
            output.committed = None
        self.foreachBatch(output)
        try:
            query = super().start(
                outputMode=outputMode, partitionBy=partitionBy, queryName=queryName, **options
            )
        except BaseException:
            output.close()
            raise
        self.made.outputs[str(query.id)] = output
        previous = self.made.groups.get(self.spec.consumer_group)
        if previous is not None and previous is not output:
            previous.close()  # the query was started again: the new sink fenced the old one
        self.made.groups[self.spec.consumer_group] = output
        output.attach(query)
        return query


def observed_metrics(frame: DataFrame) -> set[str]:
    """The names of the observed metrics in `frame`'s plan: one per input `read_json` read."""
    found: set[str] = set()
    pending = [frame._jdf.queryExecution().logical()]
    while pending:
        node = pending.pop()
        if node.getClass().getSimpleName() == "CollectMetrics":
            found.add(str(node.name()))
        children = node.children()
        pending.extend(children.apply(i) for i in range(children.size()))
    return found


def has_checkpoints(spark: SparkSession, root: str, query: bool = False) -> bool:
    """Whether any query has checkpointed offsets under `root` (any Hadoop file system); with
    `query`, whether the query checkpointing at `root` has."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(root)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return False
    folders = [path] if query else [child.getPath() for child in fs.listStatus(path)]
    for folder in folders:
        offsets = jvm.org.apache.hadoop.fs.Path(folder, "offsets")
        if fs.exists(offsets) and len(fs.listStatus(offsets)) > 0:
            return True
    return False
