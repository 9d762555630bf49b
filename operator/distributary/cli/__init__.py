"""The `distributary` command: validate, plan and draw pipelines, run them, and the operator.

Every command reads the same YAML the operator reconciles and lives in a module of its own here;
this module only gathers them into the `main` group (the console script). A user's mistake is
reported on stderr as one line naming the file, the resource, the field and the fix, with exit
status 1 (`cli.errors`); a traceback is kept for Distributary's own bugs. The modules import each
other (`load_checked`, the shared options) but never this one, so any of them can be imported
alone.
"""

from __future__ import annotations

import click

from distributary import __version__
from distributary.cli.crds import crds
from distributary.cli.errors import ReportingGroup
from distributary.cli.graph import graph
from distributary.cli.operator import operator
from distributary.cli.plan import plan
from distributary.cli.produce import produce
from distributary.cli.run import run
from distributary.cli.tail import tail
from distributary.cli.validate import validate
from distributary.cli.wait import wait


@click.group(cls=ReportingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="distributary")
def main() -> None:
    """Distributary: log-centric data pipelines on Kafka and Spark.

    Logs are Kafka topics; derived views are Spark SQL over logs whose output is itself a log;
    stream jobs are your own PySpark applications. Describe them in YAML, then validate, plan,
    draw, or (in a cluster) let the operator reconcile them.
    """


for command in (validate, plan, graph, crds, run, operator, produce, tail, wait):
    main.add_command(command)
