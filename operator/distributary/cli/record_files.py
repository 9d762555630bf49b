"""Records for a log, from a JSON Lines file (checked whole against the Log's schema before the
first is sent) or made up from the schema: what `distributary produce` and `distributary run
--produce` append."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

import click

from distributary.api.log import Log
from distributary.cli.errors import UserError
from distributary.cli.named_log import find_log
from distributary.graph import Pipeline, Ref
from distributary.kafka.records import produce as produce_records
from distributary.schema import EncodedRecord, RecordSchema, check_lines, generate_records
from distributary.sql import SqlError

SHOWN_PROBLEMS = 20
PROGRESS_EVERY = 5.0  # seconds between progress lines


def refuse_derived(pipeline: Pipeline, ref: Ref) -> None:
    writer = pipeline.writer(ref)
    if writer is None or not pipeline.is_derived(ref):
        return
    inputs = ", ".join(i.log for i in pipeline.views[writer].spec.inputs)
    raise UserError(
        f"Log {ref.name!r} is the output of DerivedView {writer.name!r}: only its view writes "
        f"it (a log has one writer); produce to its input instead ({inputs})"
    )


def log_schema(ref: Ref, log: Log) -> RecordSchema:
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


def checked_file(file: Path, schema: RecordSchema, skip_invalid: bool) -> Iterator[EncodedRecord]:
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
    refuse_derived(pipeline, ref)
    records = checked_file(file, log_schema(ref, found), skip_invalid=False)
    target = topic or found.topic
    sent = produce_records(
        servers, target, records, progress=progress_lines(ref.name), client=client
    )
    return f"sent {sent.records} record(s) of {file} to {ref.name} (topic {sent.topic})"


def generated(
    schema: RecordSchema, name: str, count: int, seed: int | None
) -> Iterator[EncodedRecord]:
    if not schema.checked:
        raise UserError(
            f"Log {name!r} declares no spec.schema, so records cannot be made up: use --file"
        )
    made = generate_records(schema, count, seed=seed, now=datetime.now(UTC))
    return (schema.encode(record) for record in made)


def progress_lines(name: str) -> Callable[[int, float], None]:
    def show(records: int, seconds: float) -> None:
        speed = records / seconds if seconds else 0.0
        click.echo(f"{name}: {records:,} records sent in {seconds:.0f}s ({speed:,.0f}/s)", err=True)

    return show
