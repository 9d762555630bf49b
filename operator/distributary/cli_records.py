"""`distributary produce` and `distributary tail`: append records to a log, read a log's end.

A person names a log, not a topic or a broker: the Log comes from the pipeline files (`--pipeline`,
else the files the running `distributary run` reads), and its serving topic and the broker from
the run-state file that run keeps (`<state dir>/run.json`), because a view's output is served from
a revision's topic only the run knows. Every record of a file is checked before the first is sent,
so a file is appended whole or not at all (unless `--skip-invalid`). `tail` on a stopped run starts
the run's embedded broker just long enough to read.

The commands are standalone click commands that cli.py registers; this module does not import
cli.py (the layers run cli -> cli_records), so it has its own small `UserError`.
"""

from __future__ import annotations

import contextlib
import difflib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from distributary.api.log import Log
from distributary.graph import Pipeline, Ref, load_pipeline
from distributary.kafka.cluster import cluster_ready
from distributary.kafka.records import MissingTopicError, Record, RecordsError, TopicReader
from distributary.kafka.records import produce as produce_records
from distributary.local.broker import BrokerError, EmbeddedBroker
from distributary.local.state import DEFAULT_STATE_DIR, RunState, RunStateError, find_run_state
from distributary.schema import EncodedRecord, RecordSchema, check_lines, generate_records
from distributary.sql import SqlError

F = TypeVar("F", bound=Callable[..., Any])
SHOWN_PROBLEMS = 20
PROGRESS_EVERY = 5.0  # seconds between progress lines


class UserError(click.ClickException):
    """A mistake in the user's input: printed as one line on stderr, exit status 1."""

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def _common_options(func: F) -> F:
    options = [
        click.option(
            "--state-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=DEFAULT_STATE_DIR,
            show_default=True,
            help="The state folder of `distributary run` (its run.json and embedded broker).",
        ),
        click.option(
            "--bootstrap-servers",
            default=None,
            metavar="HOST:PORT",
            help="The Kafka cluster; default: the one the running `distributary run` uses.",
        ),
        click.option(
            "--pipeline",
            "pipeline_paths",
            multiple=True,
            type=click.Path(exists=True, path_type=Path),
            help="Pipeline files or folders; default: those the running `distributary run` read.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


# Finding the log, its topic and the broker ----------------------------------------------------


def _run_state(state_dir: Path) -> RunState | None:
    try:
        return find_run_state(state_dir)
    except RunStateError as exc:
        raise UserError(str(exc)) from None


def _pipeline(paths: Sequence[Path], state: RunState | None) -> Pipeline:
    if not paths and (state is None or not state.paths):
        raise UserError(
            "no pipeline to find the log in: pass --pipeline PATH (the pipeline's YAML files or "
            "folder), or start `distributary run PATH` (other commands read its run state)"
        )
    return load_pipeline(paths or (state.paths if state else ()))


def _find_log(pipeline: Pipeline, given: str, state: RunState | None) -> tuple[Ref, Log]:
    namespace, _, name = given.rpartition("/")
    found = [r for r in pipeline.logs if r.name == name and namespace in ("", r.namespace)]
    served = state.logs.get(name) if state else None
    if len(found) > 1 and served is not None:
        found = [r for r in found if r.namespace == served.namespace]
    if len(found) == 1:
        return found[0], pipeline.logs[found[0]]
    if found:
        spaces = ", ".join(sorted(r.namespace for r in found))
        raise UserError(f"Log {name!r} is in namespaces {spaces}: write NAMESPACE/{name}")
    names = sorted({r.name for r in pipeline.logs})
    near = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    problems = (
        f"; the pipeline has {len(pipeline.problems)} problem(s)" if pipeline.problems else ""
    )
    raise UserError(
        f"no Log {given!r} in the pipeline{hint}{problems}: its logs are "
        f"{', '.join(names) or '(none)'}"
    )


def _refuse_derived(pipeline: Pipeline, ref: Ref) -> None:
    writer = pipeline.writer(ref)
    if writer is None or not pipeline.is_derived(ref):
        return
    inputs = ", ".join(i.log for i in pipeline.views[writer].spec.inputs)
    raise UserError(
        f"Log {ref.name!r} is the output of DerivedView {writer.name!r}: only its view writes "
        f"it (a log has one writer); produce to its input instead ({inputs})"
    )


def _serving_topic(ref: Ref, log: Log, state: RunState | None) -> str:
    recorded = state.serving_topic(ref.name, ref.namespace) if state else None
    return recorded or log.topic


def _no_broker(state: RunState | None, state_dir: Path) -> UserError:
    if state is None:
        return UserError(
            f"no Kafka broker to use: no `distributary run` has recorded one in {state_dir}; "
            "start `distributary run PATH`, or pass --bootstrap-servers HOST:PORT"
        )
    return UserError(
        f"the `distributary run` recorded in {state_dir} (pid {state.pid}) has stopped and its "
        f"broker at {state.bootstrap_servers} does not answer: start `distributary run` again, "
        "or pass --bootstrap-servers HOST:PORT"
    )


@contextlib.contextmanager
def run_broker(
    given: str | None, state: RunState | None, state_dir: Path, *, may_start: bool
) -> Iterator[str]:
    """The bootstrap servers to use; with `may_start`, the stopped run's embedded broker."""
    if given:
        yield given
    elif state is not None and (state.alive() or cluster_ready(state.bootstrap_servers)):
        yield state.bootstrap_servers
    elif may_start and (state_dir / "kafka" / "data" / "meta.properties").exists():
        click.echo(
            f"no `distributary run` is running in {state_dir}: starting its embedded broker "
            f"({state_dir / 'kafka'}) to read, and stopping it after",
            err=True,
        )
        try:
            broker = EmbeddedBroker(state_dir / "kafka").start()
        except BrokerError as exc:
            raise UserError(str(exc)) from None
        try:
            yield broker.bootstrap_servers
        finally:
            broker.stop()
    else:
        raise _no_broker(state, state_dir)


def _missing_topic(exc: MissingTopicError, name: str, derived: bool) -> UserError:
    fix = (
        "start `distributary run` so the view runs and the run state names its serving topic"
        if derived
        else "start `distributary run` for the pipeline (it creates the topics)"
    )
    return UserError(f"Log {name!r}: {exc}: {fix}")


# produce ---------------------------------------------------------------------------------------


def _schema(ref: Ref, log: Log) -> RecordSchema:
    try:
        return RecordSchema.of_log(log)
    except SqlError as exc:
        raise UserError(f"Log {ref.name!r} spec.schema {exc}: fix the Log") from None


def _lines(file: Path) -> list[str] | None:
    if str(file) == "-":
        return sys.stdin.read().splitlines()
    return None


def _read(file: Path, buffered: list[str] | None) -> Iterator[str]:
    if buffered is not None:
        yield from buffered
        return
    try:
        with file.open(encoding="utf-8-sig") as lines:
            yield from lines
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{file} cannot be read: {exc}") from None


def _check_file(file: Path, schema: RecordSchema, buffered: list[str] | None) -> tuple[int, int]:
    """Check every line, printing its problems (and progress); return (valid, invalid)."""
    valid = invalid = shown = 0
    last = time.monotonic()
    for checked in check_lines(_read(file, buffered), schema):
        if time.monotonic() - last >= PROGRESS_EVERY:
            click.echo(f"{file}: {checked.line:,} lines checked", err=True)
            last = time.monotonic()
        valid, invalid = valid + bool(checked.record is not None), invalid + bool(checked.problems)
        for problem in checked.problems:
            shown += 1
            if shown <= SHOWN_PROBLEMS:
                click.echo(f"{file}:{checked.line}: {problem}", err=True)
    if shown > SHOWN_PROBLEMS:
        click.echo(f"... and {shown - SHOWN_PROBLEMS} more problem(s)", err=True)
    return valid, invalid


def _checked_file(file: Path, schema: RecordSchema, skip_invalid: bool) -> Iterator[EncodedRecord]:
    """Check the whole file first; then its valid records, encoded (read a second time)."""
    buffered = _lines(file)
    valid, invalid = _check_file(file, schema, buffered)
    if invalid and not skip_invalid:
        raise UserError(
            f"{invalid} of {valid + invalid} records in {file} are invalid, so none was sent: "
            f"fix them, or pass --skip-invalid to send the {valid} valid one(s)"
        )
    if not valid:
        raise UserError(f"{file} holds no valid record: write one JSON object per line")
    if invalid:
        click.echo(f"skipping {invalid} invalid record(s) of {file}", err=True)
    again = check_lines(_read(file, buffered), schema)
    return (schema.encode(c.record) for c in again if c.record is not None)


def append_file(pipeline: Pipeline, log: str, file: Path, servers: str, topic: str | None) -> str:
    """Check `file` against LOG's schema and append it to the log (`topic`, else the Log's
    own); the summary line. Used by `distributary run --produce`."""
    ref, found = _find_log(pipeline, log, None)
    _refuse_derived(pipeline, ref)
    records = _checked_file(file, _schema(ref, found), skip_invalid=False)
    target = topic or found.topic
    try:
        sent = produce_records(servers, target, records, progress=_progress(ref.name))
    except RecordsError as exc:
        raise UserError(str(exc)) from None
    return f"sent {sent.records} record(s) of {file} to {ref.name} (topic {sent.topic})"


def _generated(
    schema: RecordSchema, name: str, count: int, seed: int | None
) -> Iterator[EncodedRecord]:
    if not schema.checked:
        raise UserError(
            f"Log {name!r} declares no spec.schema, so records cannot be made up: use --file"
        )
    made = generate_records(schema, count, seed=seed, now=datetime.now(UTC))
    return (schema.encode(record) for record in made)


def _progress(name: str) -> Callable[[int, float], None]:
    def show(records: int, seconds: float) -> None:
        speed = records / seconds if seconds else 0.0
        click.echo(f"{name}: {records:,} records sent in {seconds:.0f}s ({speed:,.0f}/s)", err=True)

    return show


@click.command()
@click.argument("log")
@click.option(
    "--file",
    "file",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
    help="A JSON Lines file: one JSON object per line ('-': standard input).",
)
@click.option("--generate", type=click.IntRange(min=1), help="Make up N records from the schema.")
@click.option("--seed", type=int, help="With --generate: the same seed makes the same records.")
@click.option(
    "--rate", type=click.FloatRange(min=0, min_open=True), help="At most this many records/s."
)
@click.option("--skip-invalid", is_flag=True, help="Send the valid records of a file, skip others.")
@_common_options
def produce(
    log: str,
    file: Path | None,
    generate: int | None,
    seed: int | None,
    rate: float | None,
    skip_invalid: bool,
    state_dir: Path,
    bootstrap_servers: str | None,
    pipeline_paths: tuple[Path, ...],
) -> None:
    """Append records to LOG, checked against its schema: from a file, or made up.

    LOG is a Log's name (NAMESPACE/NAME when two namespaces have one). Every record of --file is
    checked before any is sent; a bad one is reported as FILE:LINE: field: what is wrong.
    """
    if (file is None) == (generate is None):
        raise UserError("give the records: either --file F.jsonl or --generate N")
    state = _run_state(state_dir)
    pipeline = _pipeline(pipeline_paths, state)
    ref, found = _find_log(pipeline, log, state)
    _refuse_derived(pipeline, ref)
    schema = _schema(ref, found)
    if file is not None:
        records: Iterable[EncodedRecord] = _checked_file(file, schema, skip_invalid)
    else:
        records = _generated(schema, ref.name, generate or 0, seed)
    topic = _serving_topic(ref, found, state)
    with run_broker(bootstrap_servers, state, state_dir, may_start=False) as servers:
        try:
            sent = produce_records(
                servers,
                topic,
                records,
                rate=rate,
                progress=_progress(ref.name),
                progress_every=PROGRESS_EVERY,
            )
        except MissingTopicError as exc:
            raise _missing_topic(exc, ref.name, derived=False) from None
        except RecordsError as exc:
            raise UserError(str(exc)) from None
    click.echo(
        f"sent {sent.records} record(s) to {ref.name} (topic {sent.topic}) in {sent.seconds:.1f}s"
    )


# tail ------------------------------------------------------------------------------------------


def _tail_topic(
    given: str, paths: Sequence[Path], state: RunState | None, pipeline: list[Pipeline]
) -> tuple[str, str, bool]:
    """(log name, serving topic, derived) of a log named on the command line."""
    namespace, _, name = given.rpartition("/")
    served = state.logs.get(name) if state else None
    if served is not None and namespace in ("", served.namespace):
        return name, served.topic, False
    if not pipeline:
        pipeline.append(_pipeline(paths, state))  # loaded once, for every log that needs it
    ref, found = _find_log(pipeline[0], given, state)
    return ref.name, _serving_topic(ref, found, state), pipeline[0].is_derived(ref)


def _line(record: Record, prefix: str) -> str:
    key = record.key.decode("utf-8", "replace") if record.key is not None else "-"
    value = record.value.decode("utf-8", "replace") if record.value is not None else "(deleted)"
    return f"{prefix}{record.partition}/{record.offset} {key} {value}"


def _show_tail(
    reader: TopicReader, targets: Sequence[tuple[str, str, bool]], count: int
) -> dict[str, dict[int, int]]:
    positions: dict[str, dict[int, int]] = {}
    for name, topic, derived in targets:
        try:
            records, ends = reader.last(topic, count)
        except MissingTopicError as exc:
            raise _missing_topic(exc, name, derived) from None
        prefix = f"{name} " if len(targets) > 1 else ""
        for record in records:
            click.echo(_line(record, prefix))
        positions[topic] = ends
    return positions


def _follow(
    reader: TopicReader, targets: Sequence[tuple[str, str, bool]], positions: dict[str, Any]
) -> None:
    names = {topic: name for name, topic, _ in targets}
    shown = ", ".join(f"{name} (topic {topic})" for name, topic, _ in targets)
    click.echo(f"following {shown}; Ctrl-C to stop", err=True)
    with contextlib.suppress(KeyboardInterrupt):
        for record in reader.follow(positions):
            click.echo(_line(record, f"{names[record.topic]} " if len(targets) > 1 else ""))


@click.command()
@click.argument("logs", nargs=-1, required=True)
@click.option(
    "-n",
    "--lines",
    "count",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="How many of the last records to print, per log.",
)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new records until Ctrl-C.")
@_common_options
def tail(
    logs: tuple[str, ...],
    count: int,
    follow: bool,
    state_dir: Path,
    bootstrap_servers: str | None,
    pipeline_paths: tuple[Path, ...],
) -> None:
    """Print the last records of each LOG, one per line: PARTITION/OFFSET KEY VALUE.

    Records are read from the log's serving topic (a view's output: its serving revision's) and
    merged across partitions in timestamp order; a deleted key's tombstone shows as (deleted).
    """
    state = _run_state(state_dir)
    loaded: list[Pipeline] = []
    targets = [_tail_topic(given, pipeline_paths, state, loaded) for given in logs]
    with run_broker(bootstrap_servers, state, state_dir, may_start=True) as servers:
        try:
            with TopicReader(servers) as reader:
                positions = _show_tail(reader, targets, count)
                if follow:
                    _follow(reader, targets, positions)
        except RecordsError as exc:
            raise UserError(str(exc)) from None


COMMANDS = (produce, tail)
