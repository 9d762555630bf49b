"""`distributary crds`: the CRDs generated from the API models, written or checked for drift.

The CRD files are committed; `--check` (run by the tests and CI) fails when they no longer match
the models, so a change to `api/` cannot ship with stale CRDs.
"""

from __future__ import annotations

from pathlib import Path

import click

from distributary.api.crd import drift, write_crds
from distributary.cli.errors import UserError


@click.command()
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("crds"),
    show_default=True,
    help="Where the CRD files are.",
)
@click.option("--check", is_flag=True, help="Exit 1 when the files differ from the models.")
def crds(out_dir: Path, check: bool) -> None:
    """Write the CRDs generated from the API models, or check that they are current."""
    if check:
        problems = drift(out_dir)
        for line in problems:
            click.echo(line, err=True)
        if problems:
            raise UserError("crds/ is stale: run 'distributary crds --out crds/' and commit it")
        click.echo(f"{out_dir}: up to date")
        return
    for path in write_crds(out_dir):
        click.echo(f"wrote {path}")
