"""The `distributary` command: validate, plan and draw pipelines, run them, and the operator.

Every command reads the same YAML the operator reconciles and lives in a module of its own here;
this module only gathers them into the `main` group (the console script). A user's mistake is
reported on stderr as one line naming the file, the resource, the field and the fix, with exit
status 1 (`cli.errors`); a traceback is kept for Distributary's own bugs. The modules import each
other (`load_checked`, the shared options) but never this one, so any of them can be imported
alone.
"""

from __future__ import annotations

import importlib

import click

from distributary import __version__
from distributary.cli.errors import ReportingGroup

# Each command's module, imported when the command runs (or help lists it): `distributary run`
# need not load the operator's Kubernetes clients, nor `tail` Spark's planner. Every process of
# a local pipeline starts with this, so its start costs what its own command needs (about half
# a second less CPU each).
COMMANDS = {
    name: f"distributary.cli.{name}"
    for name in ("validate", "plan", "graph", "crds", "run", "operator", "produce", "tail", "wait")
}


class CommandGroup(ReportingGroup):
    """The `distributary` group: each command imported from its module when it is needed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is None:
            return None
        command = getattr(importlib.import_module(module), cmd_name)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="distributary")
def main() -> None:
    """Distributary: log-centric data pipelines on Kafka and Spark.

    Logs are Kafka topics; derived views are Spark SQL over logs whose output is itself a log;
    stream jobs are your own PySpark applications. Describe them in YAML, then validate, plan,
    draw, or (in a cluster) let the operator reconcile them.
    """
