"""`distributary produce`: append records to a log, checked against its schema.

Every record of a file is checked before the first is sent, so a file is appended whole or not at
all (unless `--skip-invalid`), and a bad record is reported as FILE:LINE: field: what is wrong.
The log is found as every command finds one (`cli.named_log`); a view's output is refused, since a
log has one writer. The checks and the appending live in `cli.record_files`, which `distributary run
--produce` uses too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import click

from distributary.cli.errors import UserError
from distributary.cli.named_log import (
    find_log,
    missing_topic,
    pipeline_for,
    run_broker,
    serving_topic,
)
from distributary.cli.options import kafka_connection, run_state_options
from distributary.cli.record_files import (
    PROGRESS_EVERY,
    checked_file,
    generated,
    log_schema,
    progress_lines,
    refuse_derived,
)
from distributary.kafka.connection import client_settings
from distributary.kafka.records import MissingTopicError
from distributary.kafka.records import produce as produce_records
from distributary.local.state import find_run_state
from distributary.schema import EncodedRecord


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
    refuse_derived(pipeline, ref)
    schema = log_schema(ref, found)
    if file is not None:
        records: Iterable[EncodedRecord] = checked_file(file, schema, skip_invalid)
    else:
        records = generated(schema, ref.name, generate or 0, seed)
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
                progress=progress_lines(ref.name),
                progress_every=PROGRESS_EVERY,
                client=client_settings(security),
            )
        except MissingTopicError as exc:
            raise missing_topic(exc, ref.name, derived=False) from None
    click.echo(
        f"sent {sent.records} record(s) to {ref.name} (topic {sent.topic}) in {sent.seconds:.1f}s"
    )
