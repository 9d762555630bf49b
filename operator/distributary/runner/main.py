"""The runner's loop: start every revision's query, follow its batches, stop on a signal.

With `--follow` (the local runtime's one process for every view) the loop also reads its specs
file again whenever it changes, and runs what it says then: a revision no longer in it, started
again or with another spec is stopped between batches (its producer closed, so it writes nothing
after), new ones are started, the others run on; then the file's generation is acknowledged
(`plan.applications.runner_spec.applied_file`).

An exactly-once revision (the default) writes each micro-batch, its dead letters and its group's
offsets in one Kafka transaction (`exactly_once.py`); the loop only publishes its progress.

An at-least-once revision writes with Spark's Kafka sink, and each micro-batch report is turned by
`plan.revisions.progress.step` into what to do, in this order: send the range's unparseable records
to the dead-letter topic, commit the batch's end offsets to the revision's consumer group, publish
progress. Because the group is committed last, a crash at any point leaves it at or behind Spark's
checkpoint, and the next run rescans the difference: dead letters are sent at least once and the
group never claims more than was processed.

Either way the revision's dead-letter count rides in the metadata of the group's offsets, so a
restarted runner goes on counting from it.

A revision with no checkpoint yet starts from its group's committed offsets when the group has
some (a rewind, or a fresh checkpoint after a lost one), else from the spec's starting position;
except a query that keeps state, which never resumes on empty state: it reports CheckpointLost
and does not start, and the view rebuilds it as a new revision. So does a query whose checkpoint
Spark cannot read because another version of the view's operators wrote its state
(`unreadable_state`): it would fail at every start.

A query Spark refuses when it starts (an analysis error: a type mismatch, an unknown function, an
operation Structured Streaming does not run) is refused at every start, so the revision reports
QueryRefused with Spark's words on one line (`refusals.refusal`) and is not restarted: the other
revisions run on, and the view is Stalled until an edit fixes the SQL. Every record carries the
hash of the spec it reports on (`reported_hash`), so an edit that keeps the revision and its
checkpoint but changes what runs (the SQL, an input's schema, a setting) is tried again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.kafka.connection import client_settings
from distributary.kafka.progress import ProgressPublisher
from distributary.kafka.transactions import TransactionError
from distributary.plan.access.kafka_connection import KafkaConfigError
from distributary.plan.applications.runner_spec import (
    FOLLOW_ARG,
    RUNNER_GENERATION,
    RUNNER_SPEC_HASH,
    SPEC_FILE_ARG,
    SPEC_JSON_ARG,
    FollowedSpecs,
    RunnerInput,
    RunnerSpec,
    StartingPosition,
    applied_file,
    process_settings,
    reported_hash,
    session_settings,
)
from distributary.plan.applications.spark_state import CHECKPOINT_LOST, QUERY_REFUSED
from distributary.plan.revisions.delivery import Marker, read_marker
from distributary.plan.revisions.positions import Offsets, offsets_json
from distributary.plan.revisions.progress import (
    Batch,
    batch_of,
    progress_key,
    progress_record,
    step,
)
from distributary.runner.dead_letters import send_dead_letters
from distributary.runner.exactly_once import ExactlyOnceOutput
from distributary.runner.query import revision_session, start_query
from distributary.runner.refusals import refusal
from distributary.runner.table_joins import reads_table, table_view

POLL_SECONDS = 0.5
STOP_TIMEOUT = 30.0  # seconds a stop waits for the running micro-batch to finish
DEFAULT_REFRESH_SECONDS = 3600.0  # committed offsets are committed again at least this often
MAX_RESTARTS = 3  # per revision and run; then the revision is Failed


def _log(message: str) -> None:
    print(f"runner: {message}", file=sys.stderr, flush=True)


def replay_report(failure: BaseException) -> bool:
    """Whether a query's failure is Spark 4.1.1's report of a batch replayed after a restart
    (SPARK-55271: the Kafka source's metrics asked for before its latest offsets are known)."""
    trace = getattr(failure, "getStackTrace", None)
    text = f"{failure}\n{trace() if callable(trace) else ''}"
    null = 'the return value of "scala.Option.get()" is null'
    return null in text and ("KafkaMicroBatchStream" in text or "IterableOps.map" in text)


# Spark's refusals of a checkpoint whose state another version of the query's operators wrote
# (a stateful operator renamed, or its state's schema changed): the checkpoint cannot be read.
UNREADABLE_STATE = (
    "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
)


def unreadable_state(failure: BaseException) -> str | None:
    """Why a query's checkpoint cannot be read (None when the failure is another): its state was
    written by operators this version of the runner does not have (e.g. a view over a table whose
    operators moved from Python to the JVM). Resuming would fail at every start, and starting
    without it would begin the state empty, so the view rebuilds it as a new revision."""
    text = str(failure)
    found = next((condition for condition in UNREADABLE_STATE if condition in text), None)
    if found is None:
        return None
    return (
        f"its checkpoint's state was written by another version of the view's operators and "
        f"cannot be read by this one ({found}); the query keeps state, so it does not resume on "
        "empty state: the view rebuilds it as a new revision from the start of its inputs "
        "(CheckpointLost)"
    )


@dataclass
class Revision:
    """One running revision: its query and what the runner has done for its batches."""

    spec: RunnerSpec
    session: SparkSession
    admin: KafkaAdmin
    publisher: ProgressPublisher | None
    query: StreamingQuery | None = None
    committed: Offsets | None = None
    dead_letters: int = 0
    seen: set[tuple[int, str]] = field(default_factory=set)
    last: Batch | None = None
    state: str = "Starting"
    error: str | None = None
    restarts: int = 0
    # Spark's failed report of the batch a restart replayed (SPARK-55271), restarted without
    # counting since the last batch reported: a crash costs one restart, not two.
    replay_forgiven: bool = False
    refresh_seconds: float = DEFAULT_REFRESH_SECONDS
    committed_at: float = field(default_factory=time.monotonic)
    output: ExactlyOnceOutput | None = None  # the transactional sink, when exactly once
    started_from: Offsets | None = None  # the group's offsets a run without checkpoint resumed
    generation: int = 0  # the specs file's generation this revision was (re)started at

    @property
    def label(self) -> str:
        """`namespace/name rN`, for log lines."""
        return f"{self.spec.namespace}/{self.spec.name} r{self.spec.revision}"

    def start(self) -> None:
        """Start the query, from the group's committed offsets when there is no checkpoint; a
        query that keeps state does not start without its checkpoint (see `lost_state`)."""
        if self.exactly_once:
            if self.output is not None:
                self.output.close()
            # Fences every earlier process of this revision before reading its position.
            self.output = ExactlyOnceOutput(self.spec, self.session, self.admin)
            group = self.output.committed or {}
            self.dead_letters = self.output.dead_letters
        else:
            group = self.admin.committed(self.spec.consumer_group)
            # The count rides with the group's offsets, so it outlives this process.
            marker = read_marker(self.admin.committed_metadata(self.spec.consumer_group))
            self.dead_letters = marker.dead_letters
        self.committed = group or None
        checkpointed = has_checkpoint(self.session, self.spec)
        lost = None if checkpointed else lost_state(self.spec, group)
        if lost is not None:
            self.state, self.error = CHECKPOINT_LOST, lost
            _log(f"{self.label}: {lost}")
            self.publish()
            return
        starting = {} if checkpointed else resumed_inputs(self.spec, group)
        # Published, so the operator can check that a rewind's move held until this run began.
        self.started_from = None if checkpointed else dict(group)
        for alias, source in starting.items():
            offsets = source.starting_position.offsets
            _log(f"{self.label}: no checkpoint; {alias} starts at the group's offsets {offsets}")
        table = table_view(self.session, self.spec, starting) if reads_table(self.spec) else None
        self.query = start_query(self.session, self.spec, starting, self.output, table)
        if self.output is not None:
            self.output.attach(self.query)
        self.state = "Running"
        self.publish()
        _log(
            f"{self.label}: started, writing {self.spec.output.topic if self.spec.output else '-'}"
        )

    def refuse(self, exc: AnalysisException) -> None:
        """Record and publish that Spark refused the query at start (`QUERY_REFUSED`): it would
        refuse it again at every start, so the revision does not run until an edit."""
        if self.output is not None:
            self.output.close()
            self.output = None
        aliases = [source.alias or source.log for source in self.spec.inputs]
        mode = self.spec.output.mode if self.spec.output is not None else "append"
        self.state, self.error = QUERY_REFUSED, f"spec.sql: {refusal(str(exc), aliases, mode)}"
        _log(f"{self.label}: {self.error}")
        self.publish()

    @property
    def exactly_once(self) -> bool:
        """Whether the revision's output is written in transactions (`exactly_once.py`)."""
        return self.spec.output is not None and self.spec.output.delivery == "ExactlyOnce"

    def poll(self) -> None:
        """Act on every batch reported since the last poll."""
        if self.query is None:
            return
        # The last report alone first: Spark keeps up to 100 recent ones, each fetched from the
        # JVM and parsed; reading them all twice a second kept an idle runner busy.
        last = self.query.lastProgress
        if last is not None and (last.batchId, str(last.timestamp)) not in self.seen:
            for progress in self.query.recentProgress:
                report: dict[str, Any] = json.loads(progress.json)
                marker = (int(report.get("batchId", -1)), str(report.get("timestamp")))
                if marker in self.seen:
                    continue
                self.seen.add(marker)
                self.replay_forgiven = False
                self.handle(batch_of(report))
        if not self.query.isActive and self.state == "Running":
            self.finish()
        elif self.committed and time.monotonic() - self.committed_at >= self.refresh_seconds:
            self.refresh()

    def refresh(self) -> None:
        """Commit the group's offsets again: a group that commits nothing for the broker's
        `offsets.retention.minutes` (an idle input) loses them, and with them the position a
        view resumes from and the lag it reports."""
        assert self.committed is not None
        try:
            if self.output is not None:
                self.output.refresh()
            else:
                count = Marker(dead_letters=self.dead_letters).text()
                self.admin.commit(self.spec.consumer_group, self.committed, count)
        except (KafkaAdminError, TransactionError) as exc:
            _log(f"{self.label}: could not refresh the group's offsets: {exc}")
        self.committed_at = time.monotonic()

    def handle(self, batch: Batch) -> None:
        """Dead letters, then the group's offsets, then progress: in that order (see above). An
        exactly-once revision did the first two in the batch's transaction."""
        if self.output is not None:
            self.committed = self.output.committed
            self.dead_letters = self.output.dead_letters
            # When its last transaction committed: a progress report of a trigger that found
            # no new records committed nothing, and must not put the refresh off.
            self.committed_at = self.output.committed_at
            self.last = batch if batch.end else self.last
            self.publish(batch)
            return
        plan = step(self.committed, batch)
        if plan.scan_from is not None:
            sent = send_dead_letters(self.session, self.spec, plan.scan_from, plan.end)
            self.dead_letters += sent
            if sent:
                topic = self.spec.dead_letter_topic
                _log(f"{self.label}: {sent} record(s) did not parse; sent to {topic}")
        if plan.commit:
            count = Marker(dead_letters=self.dead_letters).text()
            self.admin.commit(self.spec.consumer_group, plan.end, count)
            self.committed = {**(self.committed or {}), **plan.end}
            self.committed_at = time.monotonic()
        self.last = batch if batch.end else self.last
        self.publish(batch)

    def finish(self) -> None:
        """Record how the query ended."""
        assert self.query is not None
        failure = self.query.exception()
        fenced = self.output.fenced if self.output is not None else None
        if fenced is not None:
            # A newer process writes this revision; starting again would fence it in turn.
            self.state, self.error = "Failed", fenced
            _log(f"{self.label}: {fenced}")
        elif failure is not None and replay_report(failure) and not self.replay_forgiven:
            # The replayed batch committed before its report failed: the next start goes on
            # from it. Not a failure of the view's, so not one of its restarts.
            self.replay_forgiven = True
            _log(
                f"{self.label}: Spark could not report the batch it replayed (SPARK-55271); resumed"
            )
            self.seen.clear()
            self.start()
        elif failure is not None and unreadable_state(failure) is not None:
            self.state, self.error = CHECKPOINT_LOST, unreadable_state(failure)
            _log(f"{self.label}: {self.error}")
        elif failure is not None and self.restarts < MAX_RESTARTS:
            # A query that fails while running (not one whose SQL is wrong: that fails in start)
            # resumes from its checkpoint; some failures pass, e.g. Spark 4.1.1's report of a
            # batch replayed after a crash (SPARK-55271). Each attempt is logged and published.
            self.restarts += 1
            _log(f"{self.label}: failed ({_first_line(str(failure))}); restart {self.restarts}")
            time.sleep(min(2.0**self.restarts, 30.0))
            self.seen.clear()
            self.start()
        elif failure is not None:
            self.state, self.error = "Failed", _first_line(str(failure))
            _log(f"{self.label}: failed after {self.restarts} restart(s): {self.error}")
        else:
            self.state = "Stopped"
            _log(f"{self.label}: stopped")
        self.publish(self.last)

    def stop(self) -> None:
        """Stop the revision for good, between batches (the process runs on without it): once
        this returns, its query writes nothing more and its producer is closed."""
        if self.query is not None and self.query.isActive:
            stop_between_batches(self.query)
        self.poll()
        if self.state == "Running":
            self.state = "Stopped"
            _log(f"{self.label}: stopped")
            self.publish(self.last)
        if self.output is not None:
            self.output.close()
            self.output = None

    def publish(self, batch: Batch | None = None) -> None:
        """Publish this revision's progress record."""
        if self.publisher is None:
            return
        identity = {
            "kind": self.spec.kind,
            "namespace": self.spec.namespace,
            "name": self.spec.name,
            "revision": self.spec.revision,
            "consumerGroup": self.spec.consumer_group,
            "checkpoint": self.spec.checkpoint_location,
            RUNNER_SPEC_HASH: reported_hash(self.spec),  # which spec of the revision
            "restarts": self.restarts,
            "runnerPid": os.getpid(),  # which run of a shared runner process says this
            RUNNER_GENERATION: self.generation,  # ...and which start of the revision in it
            "startedFrom": None if self.started_from is None else offsets_json(self.started_from),
        }
        record = progress_record(
            identity,
            state=self.state,
            batch=batch or self.last,
            position=self.committed,
            dead_letters=self.dead_letters,
            error=self.error,
        )
        key = progress_key(self.spec.kind, self.spec.namespace, self.spec.name, self.spec.revision)
        self.publisher.publish(key, record)


def _first_line(text: str) -> str:
    """The line of a query's failure that says what went wrong. A failure in the exactly-once
    sink (Python, called from Spark) comes wrapped: "An exception was raised by the Python
    Proxy", then a Python traceback whose error line (`module.SomeError: message`) is the one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines and "raised by the Python Proxy" in lines[0]:
        for line in lines[1:]:
            found = re.match(r"(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception)): (.+)", line)
            if found:
                return f"{found.group(1)}: {found.group(2)}"[:500]
    return lines[0][:500] if lines else "unknown error"


def refresh_seconds(admin: KafkaAdmin) -> float:
    """How often an idle revision commits its group's offsets again: a quarter of the broker's
    `offsets.retention.minutes`, at least every 5 seconds and at most every hour."""
    try:
        minutes = admin.broker_config("offsets.retention.minutes")
    except KafkaAdminError:
        minutes = None
    if minutes is None:
        return DEFAULT_REFRESH_SECONDS
    return min(max(float(minutes) * 60.0 / 4.0, 5.0), DEFAULT_REFRESH_SECONDS)


def stop_between_batches(query: StreamingQuery, timeout: float = STOP_TIMEOUT) -> None:
    """Stop `query` once its running micro-batch has finished (at most `timeout` seconds): a
    batch interrupted after it wrote records is written again when the query resumes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and query.isActive:
        if not query.status.get("isTriggerActive", False):
            break
        time.sleep(0.05)
    query.stop()


def has_checkpoint(session: SparkSession, spec: RunnerSpec) -> bool:
    """Whether the revision's checkpoint has offsets (any Hadoop file system: file, s3a, ...)."""
    jvm = session.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(spec.checkpoint_location.rstrip("/") + "/offsets")
    fs = path.getFileSystem(session.sparkContext._jsc.hadoopConfiguration())
    return bool(fs.exists(path) and len(fs.listStatus(path)) > 0)


def lost_state(spec: RunnerSpec, committed: Offsets) -> str | None:
    """Why the revision must not resume without its checkpoint, None when it may: its query
    keeps state (counts, distinct keys, join buffers) that only the checkpoint holds, and its
    group has read records, so resuming from the group would start that state empty and write
    partial results over correct ones."""
    read = sum(sum(parts.values()) for parts in committed.values())
    if not spec.stateful or read == 0:
        return None
    return (
        f"its checkpoint is gone ({spec.checkpoint_location}) but its group "
        f"{spec.consumer_group} has read {read} records; the query keeps state, so it does not "
        "resume on empty state: the view rebuilds it as a new revision from the start of its "
        "inputs (CheckpointLost)"
    )


def resumed_inputs(spec: RunnerSpec, committed: Offsets) -> dict[str, RunnerInput]:
    """Inputs that start from the group's committed offsets instead of their spec position."""
    resumed = {}
    for source in spec.inputs:
        offsets = committed.get(source.topic)
        if offsets:
            start = StartingPosition(kind="offsets", offsets=dict(sorted(offsets.items())))
            resumed[source.alias or source.log] = source.model_copy(
                update={"starting_position": start}
            )
    return resumed


def load_specs(args: argparse.Namespace) -> FollowedSpecs:
    """The specs named on the command line (a file's generation with them)."""
    found = [(0, RunnerSpec.model_validate_json(text)) for text in args.spec_json or []]
    generation = 0
    for path in args.spec or []:
        followed = FollowedSpecs.parse(json.loads(Path(path).read_text()))
        generation = max(generation, followed.generation)
        found.extend(followed.revisions)
    if not found:
        raise SystemExit(
            f"runner: no spec given: pass {SPEC_FILE_ARG} FILE or {SPEC_JSON_ARG} JSON"
        )
    return FollowedSpecs(generation, tuple(found))


def build_session(specs: list[RunnerSpec]) -> SparkSession:
    """The application's Spark session: settings that are not per-session SQL settings come from
    the specs (`session_settings`), e.g. the local runtime's master and jars."""
    builder = SparkSession.builder.appName(
        f"distributary-{specs[0].name}-r{specs[0].revision}" if len(specs) == 1 else "distributary"
    )
    for key, value in session_settings(specs).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


class _Stop:
    requested = False

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if not self.requested:
            _log(f"{signal.Signals(signum).name}: stopping the queries")
        self.requested = True


Key = tuple[str, str, str, int]  # kind, namespace, name, revision


def _key(spec: RunnerSpec) -> Key:
    return (spec.kind, spec.namespace, spec.name, spec.revision)


@dataclass
class _Process:
    """What the revisions of this process share, and the revisions it runs now by key."""

    spark: SparkSession
    admin: KafkaAdmin
    publisher: ProgressPublisher | None
    refresh: float
    settings: dict[str, Any]
    revisions: dict[Key, Revision] = field(default_factory=dict)

    def start(self, spec: RunnerSpec, generation: int) -> None:
        """Start one revision in this process (refused or failed: recorded and published)."""
        revision = Revision(
            spec,
            revision_session(self.spark, spec),
            self.admin,
            self.publisher,
            refresh_seconds=self.refresh,
            generation=generation,
        )
        self.revisions[_key(spec)] = revision
        try:
            revision.start()
        except AnalysisException as exc:
            revision.refuse(exc)
        except (PySparkException, ValueError, TransactionError) as exc:
            revision.state, revision.error = "Failed", _first_line(str(exc))
            _log(f"{revision.label}: could not start: {revision.error}")
            revision.publish()

    def follow(self, followed: FollowedSpecs) -> bool:
        """Run what the specs file says now: revisions no longer in it (or started again, or
        whose spec changed) stopped first, then the new ones started. False when the file asks
        for settings this process cannot take (another Spark session or Kafka): the process
        ends, and its owner starts it again."""
        wanted = {_key(spec): (since, spec) for since, spec in followed.revisions}
        if process_settings([spec for _, spec in wanted.values()]) != self.settings:
            _log("the specs file asks for other process settings: stopping, to start again")
            return False
        for key, revision in list(self.revisions.items()):
            if wanted.get(key) != (revision.generation, revision.spec):
                revision.stop()
                del self.revisions[key]
        for key, (since, spec) in wanted.items():
            if key not in self.revisions:
                self.start(spec, since)
        return True

    def close(self) -> None:
        for revision in self.revisions.values():
            if revision.query is not None and revision.query.isActive:
                stop_between_batches(revision.query)
            revision.poll()
            if revision.state == "Running":
                revision.finish()
        if self.publisher is not None:
            self.publisher.flush()
        for revision in self.revisions.values():
            if revision.output is not None:
                revision.output.close()
        self.spark.stop()


def _acknowledge(spec_file: Path, generation: int) -> None:
    """Say, atomically, which generation of the specs file this process runs."""
    target = applied_file(spec_file)
    temporary = target.with_suffix(".tmp")
    temporary.write_text(json.dumps({"generation": generation, "pid": os.getpid()}))
    temporary.replace(target)


def run(followed: FollowedSpecs, stop: _Stop, follow: Path | None = None) -> int:
    """Run every spec until all queries end or a stop is requested; 1 when any failed. With
    `follow`, the specs file is read again whenever it changes and the process runs what it
    says (`_Process.follow`), until a stop is requested; each generation is acknowledged."""
    specs = [spec for _, spec in followed.revisions]
    bootstrap = next((s.bootstrap_servers for s in specs if s.bootstrap_servers), None)
    if bootstrap is None:
        raise SystemExit("runner: the specs name no bootstrap servers (spec.bootstrap_servers)")
    security = next((s.kafka_security for s in specs if s.kafka_security), None)
    try:
        client = client_settings(security)  # its secrets resolved here, where the runner runs
    except KafkaConfigError as exc:
        raise SystemExit(f"runner: {exc}") from None
    admin = KafkaAdmin(bootstrap, client=client)
    topic = next((s.progress_topic for s in specs if s.progress_topic), None)
    process = _Process(
        build_session(specs),
        admin,
        ProgressPublisher(bootstrap, topic, client) if topic else None,
        refresh_seconds(admin),
        process_settings(specs),
    )
    generation, unreadable = followed.generation, ""
    try:
        for since, spec in followed.revisions:
            process.start(spec, since)
        if follow is not None:
            _acknowledge(follow, generation)
        while not stop.requested and (
            follow is not None or any(r.state == "Running" for r in process.revisions.values())
        ):
            for revision in list(process.revisions.values()):
                revision.poll()
            time.sleep(POLL_SECONDS)
            if follow is None:
                continue
            # Read at every poll, not when the file looks changed: a change made while Spark
            # started, or two within one tick of the file system's clock, is not missed.
            try:
                changed = _newer(follow, generation)
            except (OSError, ValueError) as exc:
                if str(exc) != unreadable:
                    _log(f"could not read {follow}: {exc}; keeping what runs")
                unreadable = str(exc)
                continue
            if changed is None:
                continue
            if not process.follow(changed):
                break
            generation = changed.generation
            _acknowledge(follow, generation)
    finally:
        process.close()
    return 1 if any(r.state == "Failed" for r in process.revisions.values()) else 0


def _newer(path: Path, generation: int) -> FollowedSpecs | None:
    """The specs file when its generation is newer than `generation` (else None; its revisions
    are parsed only then)."""
    decoded = json.loads(path.read_text())
    if isinstance(decoded, dict) and int(decoded.get("generation") or 0) <= generation:
        return None
    changed = FollowedSpecs.parse(decoded)
    return changed if changed.generation > generation else None


def main(argv: list[str]) -> int:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(prog="python -m distributary.runner")
    parser.add_argument(
        SPEC_FILE_ARG,
        dest="spec",
        action="append",
        help="a runner spec file (JSON: one spec or a list)",
    )
    parser.add_argument(
        SPEC_JSON_ARG, dest="spec_json", action="append", help="a runner spec as JSON"
    )
    parser.add_argument(
        FOLLOW_ARG,
        action="store_true",
        help="read the one spec file again whenever it changes, and run what it says then",
    )
    args = parser.parse_args(argv)
    if args.follow and len(args.spec or []) != 1:
        raise SystemExit(f"runner: {FOLLOW_ARG} follows one file: pass {SPEC_FILE_ARG} FILE once")
    followed = load_specs(args)
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return run(followed, stop, Path(args.spec[0]) if args.follow else None)
