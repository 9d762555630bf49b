"""`distributary tail`: the last records of a log, and (with -f) the ones that follow.

Records are read from the log's serving topic, found as every command finds it
(`cli.named_log`): a view's output is read where its serving revision writes, and with `--follow`
where it writes after each cutover. On a stopped run, `tail` starts the run's embedded broker just
long enough to read.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from distributary.cli.named_log import (
    find_log,
    missing_topic,
    pipeline_for,
    run_broker,
    serving_topic,
)
from distributary.cli.options import kafka_connection, run_state_options
from distributary.graph import Pipeline
from distributary.kafka.connection import client_settings
from distributary.kafka.records import MissingTopicError, Record, TopicReader
from distributary.local.state import RunState, find_run_state

SWITCH_CHECK_SECONDS = 1.0  # how often a follower looks for a cutover


def _tail_topic(
    given: str, paths: Sequence[Path], state: RunState | None, pipeline: list[Pipeline]
) -> tuple[str, str, bool]:
    """(log name, serving topic, derived) of a log named on the command line."""
    namespace, _, name = given.rpartition("/")
    served = state.logs.get(name) if state else None
    if served is not None and namespace in ("", served.namespace):
        return name, served.topic, False
    if not pipeline:
        pipeline.append(pipeline_for(paths, state))  # loaded once, for every log that needs it
    ref, found = find_log(pipeline[0], given, state)
    return ref.name, serving_topic(ref, found, state), pipeline[0].is_derived(ref)


def _served(state_dir: Path, targets: Sequence[tuple[str, str, bool]]) -> dict[str, str]:
    """The serving topic of each followed log, as the run records it now (a view's output
    moves at each cutover; a log of its own never does)."""
    state = find_run_state(state_dir)
    if state is None:
        return {}
    found = {}
    for name, _, _ in targets:
        served = state.logs.get(name)
        if served is not None:
            found[name] = served.topic
    return found


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
            raise missing_topic(exc, name, derived) from None
        prefix = f"{name} " if len(targets) > 1 else ""
        for record in records:
            click.echo(_line(record, prefix))
        positions[topic] = ends
    return positions


def _past(moment: float) -> bool:
    return time.monotonic() > moment


def _switches(
    targets: list[tuple[str, str, bool]], served: Mapping[str, str]
) -> list[tuple[int, str]]:
    """(index, new topic) of every followed log whose serving topic moved to `served`'s."""
    return [
        (index, served[name])
        for index, (name, topic, _) in enumerate(targets)
        if served.get(name) not in (None, topic)
    ]


def _follow(
    reader: TopicReader,
    targets: list[tuple[str, str, bool]],
    positions: dict[str, Any],
    serving: Callable[[], Mapping[str, str]],
) -> None:
    """Print records as they come. A view's output is followed across cutovers: when
    `serving()` names a new serving topic, the old one is left at the cutover and the new
    revision's topic read from its start, so the output shows each revision whole, never one
    that is still catching up."""
    shown = ", ".join(f"{name} (topic {topic})" for name, topic, _ in targets)
    click.echo(f"following {shown}; Ctrl-C to stop", err=True)
    # Ctrl-C (SIGINT) stops it even when it was started with SIGINT ignored, as a shell script's
    # background job is: Python then leaves SIGINT ignored unless told otherwise.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            names = {topic: name for name, topic, _ in targets}
            stop = functools.partial(_past, time.monotonic() + SWITCH_CHECK_SECONDS)
            for record in reader.follow(positions, stop=stop):
                click.echo(_line(record, f"{names[record.topic]} " if len(targets) > 1 else ""))
                positions.setdefault(record.topic, {})[record.partition] = record.offset + 1
            for index, topic in _switches(targets, serving()):
                name, old, _ = targets[index]
                click.echo(
                    f"{name}: a new revision serves from topic {topic} (was {old}); "
                    "reading it from its start",
                    err=True,
                )
                positions.pop(old, None)
                positions[topic] = {p: low for p, (low, _) in reader.watermarks(topic).items()}
                targets[index] = (name, topic, True)


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
@run_state_options
def tail(
    logs: tuple[str, ...],
    count: int,
    follow: bool,
    state_dir: Path,
    bootstrap_servers: str | None,
    kafka_config: Path | None,
    pipeline_paths: tuple[Path, ...],
) -> None:
    """Print the last records of each LOG, one per line: PARTITION/OFFSET KEY VALUE.

    Records are read from the log's serving topic (a view's output: its serving revision's) and
    merged across partitions in timestamp order; a deleted key's tombstone shows as (deleted).
    With --follow, a view's output is followed across cutovers: when a new revision serves, its
    topic is read from the start (said on stderr), so each revision shows whole.
    """
    state = find_run_state(state_dir)
    loaded: list[Pipeline] = []
    targets = [_tail_topic(given, pipeline_paths, state, loaded) for given in logs]
    bootstrap_servers, security = kafka_connection(kafka_config, bootstrap_servers)
    with (
        run_broker(
            bootstrap_servers, state, state_dir, may_start=True, security=security
        ) as servers,
        TopicReader(servers, client=client_settings(security)) as reader,
    ):
        positions = _show_tail(reader, targets, count)
        if follow:
            _follow(reader, targets, positions, lambda: _served(state_dir, targets))
