"""The arguments and options several commands share, declared once so they read the same in
every command's --help.

An option one command alone takes stays with that command; only what two or more commands take
is here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from distributary.local.state import DEFAULT_STATE_DIR

F = TypeVar("F", bound=Callable[..., Any])

PIPELINE_PATHS = click.argument(
    "paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path)
)
"""The pipeline's YAML files or folders (validate, plan, graph, run)."""


def run_state_options(func: F) -> F:
    """--state-dir, --bootstrap-servers and --pipeline: where a command that reads or writes a
    log finds the log, its serving topic and the broker (produce, tail)."""
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
