"""Pipeline files as every command that reads them loads them: checked first, each problem on
stderr, one line naming the file, the resource, the field and the fix, before anything is planned
or run (validate, plan, graph, run, wait)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import click

from distributary.cli.errors import UserError
from distributary.graph import Pipeline, load_pipeline
from distributary.sql import ALLOW_FUNCTIONS_ENV, allowed_functions


def load_checked(paths: Sequence[Path], doing: str | None = None) -> Pipeline:
    """The pipeline in `paths`, or a UserError after printing every problem on stderr (and, as
    `doing` says, that nothing was planned or run). The unsafe SQL functions that
    `DISTRIBUTARY_ALLOW_SQL_FUNCTIONS` names are allowed, as the operator allows them under the
    same setting."""
    try:
        allowed = allowed_functions(os.environ.get(ALLOW_FUNCTIONS_ENV, ""))
    except ValueError as exc:
        raise UserError(f"{ALLOW_FUNCTIONS_ENV}: {exc}") from None
    pipeline = load_pipeline(paths, allowed_functions=allowed)
    for problem in pipeline.problems:
        click.echo(str(problem), err=True)
    if not pipeline.ok:
        count = len(pipeline.problems)
        nothing = f"; nothing was {doing}" if doing else ""
        raise UserError(f"{count} problem{'s' if count != 1 else ''} found{nothing}")
    if not pipeline.order:
        raise UserError(f"no Distributary resources found in {', '.join(map(str, paths))}")
    return pipeline
