"""`distributary produce`: append records to a log, checked against its schema.

Every record of a file is checked before the first is sent, so a file is appended whole or not at
all (unless `--skip-invalid`), and a bad record is reported as FILE:LINE: field: what is wrong.
The log is found as every command finds one (`cli.named_log`); a view's output is refused, since a
log has one writer. `distributary run --produce` appends its files through `append_file`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

import click

from distributary.api.log import Log
from distributary.cli.errors import UserError
from distributary.cli.named_log import (
    find_log,
    missing_topic,
    pipeline_for,
    run_broker,
    serving_topic,
)
from distributary.cli.options import kafka_connection, run_state_options
from distributary.graph import Pipeline, Ref
from distributary.kafka.connection import client_settings
from distributary.kafka.records import MissingTopicError
from distributary.kafka.records import produce as produce_records
from distributary.local.state import find_run_state
from distributary.schema import EncodedRecord, RecordSchema, check_lines, generate_records
from distributary.sql import SqlError

SHOWN_PROBLEMS = 20
PROGRESS_EVERY = 5.0  # seconds between progress lines


def _refuse_derived(pipeline: Pipeline, ref: Ref) -> None:
    writer = pipeline.writer(ref)
    if writer is None or not pipeline.is_derived(ref):
        return
    inputs = ", ".join(i.log for i in pipeline.views[writer].spec.inputs)
    raise UserError(
        f"Log {ref.name!r} is the output of DerivedView {writer.name!r}: only its view writes "
        f"it (a log has one writer); produce to its input instead ({inputs})"
    )


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


def append_file(
    pipeline: Pipeline,
    log: str,
    file: Path,
    servers: str,
    topic: str | None,
    client: Mapping[str, str] | None = None,
) -> str:
    """Check `file` against LOG's schema and append it to the log (`topic`, else the Log's
    own) with the librdkafka settings `client`; the summary line. Used by `distributary run
    --produce`."""
    ref, found = find_log(pipeline, log, None)
    _refuse_derived(pipeline, ref)
    records = _checked_file(file, _schema(ref, found), skip_invalid=False)
    target = topic or found.topic
    sent = produce_records(servers, target, records, progress=_progress(ref.name), client=client)
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
@run_state_options
def produce(
    log: str,
    file: Path | None,
    generate: int | None,
    seed: int | None,
    rate: float | None,
    skip_invalid: bool,
    state_dir: Path,
    bootstrap_servers: str | None,
    kafka_config: Path | None,
    pipeline_paths: tuple[Path, ...],
) -> None:
    """Append records to LOG, checked against its schema: from a file, or made up.

    LOG is a Log's name (NAMESPACE/NAME when two namespaces have one). Every record of --file is
    checked before any is sent; a bad one is reported as FILE:LINE: field: what is wrong.
    """
    if (file is None) == (generate is None):
        raise UserError("give the records: either --file F.jsonl or --generate N")
    state = find_run_state(state_dir)
    pipeline = pipeline_for(pipeline_paths, state)
    ref, found = find_log(pipeline, log, state)
    _refuse_derived(pipeline, ref)
    schema = _schema(ref, found)
    if file is not None:
        records: Iterable[EncodedRecord] = _checked_file(file, schema, skip_invalid)
    else:
        records = _generated(schema, ref.name, generate or 0, seed)
    topic = serving_topic(ref, found, state)
    bootstrap_servers, security = kafka_connection(kafka_config, bootstrap_servers)
    with run_broker(
        bootstrap_servers, state, state_dir, may_start=False, security=security
    ) as servers:
        try:
            sent = produce_records(
                servers,
                topic,
                records,
                rate=rate,
                progress=_progress(ref.name),
                progress_every=PROGRESS_EVERY,
                client=client_settings(security),
            )
        except MissingTopicError as exc:
            raise missing_topic(exc, ref.name, derived=False) from None
    click.echo(
        f"sent {sent.records} record(s) to {ref.name} (topic {sent.topic}) in {sent.seconds:.1f}s"
    )
