"""`distributary run`: the command around `local.run`, with the live table and the summary.

The table goes to stderr (refreshed in place on a terminal, a status line every few seconds
otherwise) so that stdout carries only what a script wants: with `--until-caught-up`, one JSON
object summarising every log and view as the last line. Ctrl-C and SIGTERM stop the runner
gracefully (its queries checkpoint) and then the broker; a second run resumes from there. The
state folder is read before the broker starts, so a corrupt file in it is reported at once.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import click
from rich.console import Console
from rich.live import Live

from distributary.cli.errors import UserError, require_pyspark
from distributary.cli.options import KAFKA_CONFIG, PIPELINE_PATHS, RESTART_POLICY, kafka_connection
from distributary.cli.pipeline_files import load_checked
from distributary.cli.record_files import append_file
from distributary.graph import Pipeline
from distributary.local.run import LocalRun, failed_views, watch
from distributary.local.sources import resolve_sources
from distributary.local.state import DEFAULT_STATE_DIR
from distributary.local.status import Snapshot, one_line, render
from distributary.plan.applications.restarts import RestartPolicy

STATUS_EVERY = 5.0  # seconds between status lines when stderr is not a terminal


def _produce_pairs(values: Sequence[str]) -> list[tuple[str, Path]]:
    pairs = []
    for value in values:
        log, sep, file = value.partition("=")
        if not sep or not log or not file:
            raise UserError(f"--produce {value!r}: write LOG=FILE, e.g. page-views=data.jsonl")
        if not Path(file).is_file():
            raise UserError(f"--produce {value!r}: {file} is not a file")
        pairs.append((log, Path(file)))
    return pairs


class _Signals:
    """Turns Ctrl-C and SIGTERM into a request to stop, checked by the watch loop."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        self.requested = True

    @contextmanager
    def installed(self) -> Iterator[None]:
        previous = {s: signal.signal(s, self) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _display(console: Console) -> tuple[Callable[[Snapshot], None], Live | None]:
    if console.is_terminal:
        live = Live(console=console, refresh_per_second=2, transient=False)
        return lambda snapshot: live.update(render(snapshot)), live
    shown: dict[str, float] = {}

    def show(snapshot: Snapshot) -> None:
        line = one_line(snapshot)
        if time.monotonic() - shown.get(line, 0.0) >= STATUS_EVERY:
            console.print(line, soft_wrap=True)
            shown.clear()
            shown[line] = time.monotonic()

    return show, None


# Once its children are stopped the run has nothing left to wait for, yet leaving can block: a
# Kafka client's teardown against the broker just stopped, a thread that never ends. If the process
# has not left EXIT_GRACE seconds after its children stopped, every thread's stack goes to stderr
# (what a bug report needs) and it exits 1, rather than hanging on a machine with nothing running.
EXIT_GRACE = 60.0


def leave_within(seconds: float) -> None:
    """From now on, exit within `seconds`: past them, dump every thread's stack and exit 1.
    Not when stderr is no file (the command run inside another program, as by click's test
    runner): there is nowhere to write the stacks, and the other program must not be ended."""
    try:
        stderr = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return
    faulthandler.dump_traceback_later(seconds, exit=True, file=stderr)


def _run(run: LocalRun, produce: list[tuple[str, Path]], until_caught_up: bool) -> Snapshot:
    bootstrap = run.start_kafka()
    run.prepare(bootstrap)
    for log, file in produce:
        topic = (
            next((t.topic.name for t in run.plan.topics if t.log.name == log), None)
            if run.plan
            else None
        )
        client = run.services.admin.client if run.services is not None else None
        click.echo(append_file(run.pipeline, log, file, bootstrap, topic, client), err=True)
    run.start_runner()
    signals = _Signals()
    console = Console(stderr=True)
    show, live = _display(console)
    with signals.installed():
        if live is not None:
            with live:
                return watch(run, bootstrap, show, until_caught_up, lambda: signals.requested)
        return watch(run, bootstrap, show, until_caught_up, lambda: signals.requested)


def with_databases(pipeline: Pipeline, secrets_dir: Path | None) -> Pipeline:
    """The pipeline with each Source's tables as its database has them, or a UserError after
    printing every problem (nothing was run)."""
    if not pipeline.captures:
        return pipeline
    resolved, problems = resolve_sources(pipeline, secrets_dir)
    for problem in problems:
        click.echo(problem, err=True)
    if problems:
        count = len(problems)
        raise UserError(f"{count} problem{'s' if count != 1 else ''} found; nothing was run")
    return resolved


@click.command()
@PIPELINE_PATHS
@click.option("--bootstrap-servers", help="Use this Kafka instead of starting the embedded one.")
@KAFKA_CONFIG
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="Where the broker's data, checkpoints and logs live; a second run resumes from it.",
)
@click.option("--until-caught-up", is_flag=True, help="Exit once every view has caught up.")
@click.option(
    "--secrets",
    "secrets_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Secrets the resources name, as Kubernetes mounts them: DIR/<secret>/<key> (e.g. a "
    "Source's database password).",
)
@click.option(
    "--produce",
    "produce",
    multiple=True,
    metavar="LOG=FILE",
    help="Append a JSON Lines file to a log once its topic exists (repeatable).",
)
@click.option(
    "--cores",
    type=click.IntRange(1, 64),
    default=min(os.cpu_count() or 2, 4),
    show_default=True,
    help="Spark's local threads.",
)
@RESTART_POLICY
def run(
    paths: tuple[Path, ...],
    bootstrap_servers: str | None,
    kafka_config: Path | None,
    state_dir: Path,
    until_caught_up: bool,
    secrets_dir: Path | None,
    produce: tuple[str, ...],
    cores: int,
    restart_policy: RestartPolicy,
) -> None:
    """Run a pipeline on this machine: Kafka (embedded unless given), topics, every view on
    local Spark, and a live table of positions and lag. Ctrl-C stops it; running again resumes."""
    require_pyspark("run")
    pipeline = with_databases(load_checked(paths, "run"), secrets_dir)
    pairs = _produce_pairs(produce)
    bootstrap_servers, security = kafka_connection(kafka_config, bootstrap_servers)
    if security is not None and not bootstrap_servers:
        raise UserError(
            f"--kafka-config {kafka_config} is for a Kafka of your own: give its "
            "--bootstrap-servers (or bootstrap.servers in the file); the embedded broker is "
            "plaintext"
        )
    state_dir.mkdir(parents=True, exist_ok=True)
    local = LocalRun(
        pipeline,
        tuple(p.resolve() for p in paths),
        state_dir,
        bootstrap_servers=bootstrap_servers,
        kafka_security=security,
        cores=cores,
        restart_policy=restart_policy,
        say=lambda text: click.echo(text, err=True),
        secrets_dir=secrets_dir.resolve() if secrets_dir else None,
    )
    try:
        snapshot = _run(local, pairs, until_caught_up)
    finally:
        local.stop()
        leave_within(EXIT_GRACE)
    if until_caught_up:
        summary = snapshot.to_json()
        if local.sources is not None and local.sources.statuses:
            summary["sources"] = {k: v["status"] for k, v in local.sources.statuses.items()}
        if local.sinks is not None and local.sinks.statuses:
            summary["sinks"] = local.sinks.statuses
        click.echo(json.dumps(summary, separators=(",", ":")))
    else:
        click.echo("stopped; run again to resume", err=True)
    sys.stdout.flush()
    failed = failed_views(snapshot)
    if failed:  # the others ran on; the run says which did not
        raise UserError(f"view(s) {', '.join(failed)} failed: see {local.runner_log}")
    failing = local.keep_failing() if local.revisions is not None else []
    if failing:  # retried only at the longest back-off: `--until-caught-up` does not wait
        raise UserError("; ".join(failing))
    refused = local.revisions.query_refused() if local.revisions is not None else {}
    if refused:  # they do not run until an edit fixes spec.sql
        raise UserError("; ".join(f"view {key}: {said}" for key, said in sorted(refused.items())))
