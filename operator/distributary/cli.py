"""The `distributary` command."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from distributary import __version__
from distributary.api.crd import drift, write_crds


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="distributary")
def main() -> None:
    """Distributary: log-centric data pipelines on Kafka and Spark."""


@main.command()
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
            click.echo("Run 'distributary crds --out crds/' and commit the result.", err=True)
            sys.exit(1)
        click.echo(f"{out_dir}: up to date")
        return
    for path in write_crds(out_dir):
        click.echo(f"wrote {path}")
