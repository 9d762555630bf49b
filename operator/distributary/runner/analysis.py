"""Spark's own analyser on every view's query, before anything is deployed (`validate --spark`).

The static checks (`sql.py`, `query_rules.py`) refuse the common mistakes without a JVM; what
only Spark knows (its functions, its type rules, every rule of Structured Streaming) is asked of
Spark itself. Each view is built as the runner builds it, with one difference: its inputs are
empty streams with the columns of Spark's Kafka source instead of Kafka topics. So the query
meets the very frames it meets in a running view (`query.input_rows`: the declared schema, the
parsing, the watermark; then `query.output_frame`: the JSON key and value) under the view's own
SQL settings (`query.revision_session`), and Spark analyses it and runs the check a streaming
query's start runs, for the view's output mode, without starting anything or reaching Kafka.

A view reading another view's output reads it with the schema `graph.py` derived for that log,
as the runner does. Spark's errors become one line each for `spec.sql` (`refusals.py`).

A Source's table Log whose columns the files do not declare has the columns its database gives
it, known only once the database is read (`validate --database`, `run`): a view reading it (or
reading a view that does) is skipped, and said to be, rather than refused for a schema that
will be there.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.errors import PySparkException
from pyspark.logger import PySparkLogger
from pyspark.sql import DataFrame, SparkSession

from distributary.errors import DistributaryError
from distributary.graph import Pipeline, Ref, SpecProblem
from distributary.jvm_operators import operators_jar
from distributary.plan.applications.runner_spec import RunnerInput, RunnerSpec, view_runner_spec
from distributary.runner.query import (
    input_rows,
    output_frame,
    output_mode,
    parse_schema,
    revision_session,
)
from distributary.runner.refusals import refusal, spark_words
from distributary.runner.table_joins import reads_table, table_view

# The columns of Spark's Kafka source (without headers, which the runner does not ask for).
KAFKA_COLUMNS = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "timestamp TIMESTAMP, timestampType INT"
)
SESSION_CONF = {
    "spark.master": "local[1]",
    "spark.app.name": "distributary-validate",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.session.timeZone": "UTC",
    # Nothing here talks to another machine: no need to resolve the host's name.
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}
UNSUPPORTED_CHECK = "spark.sql.streaming.unsupportedOperationCheck"
# pyspark logs every analysis error it raises, plan and stack included, on these loggers.
_QUERY_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


class SparkStartError(DistributaryError, RuntimeError):
    """Local Spark could not start (no Java, most often)."""


@contextmanager
def local_session(folder: Path) -> Iterator[SparkSession]:
    """A small local Spark session, stopped at the end; Spark's own output goes to
    `folder/spark.log`. A session this process already runs is used as it is, and left running."""
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise SparkStartError(
            "Spark needs Java 17 or later, and none was found: install a JDK, or set JAVA_HOME"
        )
    log = folder / "spark.log"
    builder = SparkSession.builder
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    # Spark makes its warehouse folder on start: in `folder`, not where the command runs.
    builder = builder.config("spark.sql.warehouse.dir", str(folder / "warehouse"))
    operators = operators_jar(required=False)  # a view over a table is analysed as it runs
    if operators is not None:
        builder = builder.config("spark.jars", str(operators))
    try:
        with _output_to(log):
            spark = builder.getOrCreate()
    except PySparkException as exc:
        tail = " | ".join(log.read_text(errors="replace").splitlines()[-3:]) if log.exists() else ""
        raise SparkStartError(
            f"local Spark did not start ({spark_words(str(exc)).message}): it needs Java 17 or "
            f"later on PATH or in JAVA_HOME{'; Spark said: ' + tail if tail else ''}"
        ) from None
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


@contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Send this process's stdout and stderr to `path` meanwhile: the JVM that Spark starts
    inherits them, and keeps writing its banner and warnings there instead of on the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with open(path, "ab") as out:
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


@contextmanager
def _quiet_query_loggers() -> Iterator[None]:
    loggers = [PySparkLogger.getLogger(name) for name in _QUERY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def columns_from_database(pipeline: Pipeline, view: Ref) -> str | None:
    """Why the view cannot be analysed before its Sources' databases are read: an input (or an
    input of the views it reads) is a Source's table whose columns the files do not declare;
    None when every input's columns are known."""
    for log in pipeline.inputs(view).values():
        if log.spec.record_schema:
            continue
        writer = pipeline.writer(log)
        if writer in pipeline.captures:
            return (
                f"input log {log.metadata.name} is Source {writer.name}'s table, whose columns "
                "are read from its database: add --database (or declare the table's "
                "spec.tables[].schema) to analyse it"
            )
        if writer in pipeline.views and writer != view:
            upstream = columns_from_database(pipeline, writer)
            if upstream:
                return upstream
    return None


class QueryCheck:
    """Analyses views' queries in `spark`; `folder` is an empty folder, the inputs' stand-in."""

    def __init__(self, spark: SparkSession, folder: Path) -> None:
        self.spark = spark
        self.empty = folder / "empty-input"
        self.empty.mkdir(parents=True, exist_ok=True)
        self.skipped: list[Ref] = []  # views left for --database by the last `problems`

    def problems(
        self, pipeline: Pipeline, progress: Callable[[str], None] | None = None
    ) -> list[SpecProblem]:
        """What Spark refuses in the pipeline's views, in the pipeline's order; `progress` is
        told of each view as it is done."""
        found: list[SpecProblem] = []
        self.skipped = []
        views = [ref for ref in pipeline.order if ref in pipeline.views]
        for number, ref in enumerate(views, start=1):
            waiting = columns_from_database(pipeline, ref)
            if waiting:
                self.skipped.append(ref)
            problems = [] if waiting else self.view_problems(pipeline, ref)
            found.extend(problems)
            if progress is not None:
                verdict = f"refused ({len(problems)} problem(s))" if problems else "ok"
                if waiting:
                    verdict = f"skipped: {waiting}"
                progress(f"[{number}/{len(views)}] {ref}: {verdict}")
        return list(dict.fromkeys(found))

    def view_problems(self, pipeline: Pipeline, ref: Ref) -> list[SpecProblem]:
        """What Spark refuses in one view; none when the view cannot be built (its inputs or
        output are unresolved: the static checks report that)."""
        spec = self._runner_spec(pipeline, ref)
        if spec is None:
            return []
        with _quiet_query_loggers():
            return [
                SpecProblem(str(ref), field, message, pipeline.source(ref))
                for field, message in self._check(spec)
            ]

    def _runner_spec(self, pipeline: Pipeline, ref: Ref) -> RunnerSpec | None:
        view, output = pipeline.views[ref], pipeline.output(ref)
        inputs = pipeline.inputs(ref)
        if output is None or len(inputs) != len(view.spec.inputs):
            return None
        try:
            return view_runner_spec(
                view,
                inputs,
                output,
                revision=1,
                spec_hash="validate",
                output_topic=output.topic,
                checkpoint_root=str(self.empty.parent / "checkpoints"),
            )
        except ValueError:
            return None  # a starting position the static checks refuse

    def _check(self, spec: RunnerSpec) -> Iterator[tuple[str, str]]:
        """(field, message) of what Spark refuses in `spec`, stopping at the first refusal, as
        a start would."""
        assert spec.output is not None
        assert spec.sql is not None
        aliases = [source.alias or source.log for source in spec.inputs]
        mode = spec.output.mode
        try:
            session = revision_session(self.spark, spec)
        except PySparkException as exc:
            said = spark_words(str(exc)).message
            yield "spec.spark.sparkConf", f"Spark refuses a setting: {said}; fix or remove it"
            return
        for index, source in enumerate(spec.inputs):
            problem = self._input_problem(session, source, index, aliases, mode)
            if problem is not None:
                yield problem
                return
        try:
            if reads_table(spec):  # run as the runner runs it: taken apart, over the table
                result = table_view(session, spec, raw=lambda _: self._empty_stream(session))
            else:
                result = session.sql(spec.sql)
        except PySparkException as exc:
            yield "spec.sql", refusal(str(exc), aliases, mode)
            return
        try:
            records = output_frame(result, spec)
        except PySparkException as exc:
            words = spark_words(str(exc))
            if (words.condition or "").startswith("UNRESOLVED_COLUMN") and spec.output.key:
                yield (
                    "spec.output.key",
                    (
                        f"names a column the query does not output (Spark: {words.message}): add "
                        "it to the SELECT list or fix the key"
                    ),
                )
            else:
                yield "spec.sql", refusal(str(exc), aliases, mode, "the query's output")
            return
        refused = self._streaming_problem(session, records, spec)
        if refused is not None:
            yield "spec.sql", refusal(refused, aliases, mode)

    def _input_problem(
        self, session: SparkSession, source: RunnerInput, index: int, aliases: list[str], mode: str
    ) -> tuple[str, str] | None:
        """Register one input under its alias as the runner does; what Spark refuses in it."""
        field = f"spec.inputs[{index}]"
        try:
            parse_schema(source)
        except ValueError as exc:  # no schema at all: the static checks say so first
            return field, str(exc)
        except PySparkException as exc:
            subject = f"the schema of log {source.log} (its spec.schema)"
            return field, refusal(str(exc), aliases, mode, subject)
        try:
            frame = input_rows(self._empty_stream(session), source, index)
        except PySparkException as exc:
            field += ".watermark.column" if source.watermark is not None else ""
            return field, refusal(str(exc), aliases, mode, f"input {aliases[index]} ({source.log})")
        frame.createOrReplaceTempView(aliases[index])
        return None

    def _empty_stream(self, session: SparkSession) -> DataFrame:
        """A stream with the columns of Spark's Kafka source and no rows, ever."""
        return session.readStream.schema(KAFKA_COLUMNS).format("parquet").load(str(self.empty))

    def _streaming_problem(
        self, session: SparkSession, records: DataFrame, spec: RunnerSpec
    ) -> str | None:
        """What Structured Streaming refuses when the query starts (no stream read, or an
        operation its output mode does not run), as Spark says it; None when nothing."""
        enabled = session.conf.get(UNSUPPORTED_CHECK, "true") or "true"
        if records.isStreaming and enabled.lower() != "true":
            return None  # the view's sparkConf turned Spark's check off: so does its start
        jvm = session.sparkContext._jvm
        assert jvm is not None
        mode = jvm.org.apache.spark.sql.catalyst.streaming.InternalOutputModes.apply(
            output_mode(spec)
        )
        checker = jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker
        try:
            checker.checkForStreaming(records._jdf.queryExecution().analyzed(), mode)
        except PySparkException as exc:
            return str(exc)
        return None
