"""`distributary graph`: the pipeline drawn, for a README (Mermaid) or Graphviz (dot).

The drawing itself is `diagram.draw`; this module only checks the files and picks the format.
"""

from __future__ import annotations

from pathlib import Path

import click

from distributary.cli.options import PIPELINE_PATHS
from distributary.cli.pipeline_files import load_checked
from distributary.diagram import draw


@click.command()
@PIPELINE_PATHS
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mermaid", "dot"]),
    default="mermaid",
    show_default=True,
    help="mermaid (for Markdown) or dot (for Graphviz).",
)
def graph(paths: tuple[Path, ...], fmt: str) -> None:
    """Draw the pipeline: logs, the views and jobs that read and write them."""
    pipeline = load_checked(paths, "planned")
    click.echo(draw(pipeline, "dot" if fmt == "dot" else "mermaid"), nl=False)
