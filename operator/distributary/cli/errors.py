"""How a command reports a person's mistake: one line on stderr, exit status 1, no traceback.

Every error a person can cause or fix is a `DistributaryError` whose message already says what is
wrong and what to do, so the commands do not catch them one by one: `ReportingGroup`, the class
of the `distributary` group, turns any that escapes a command into a `UserError`, which click
prints as `error: MESSAGE`. Anything else that escapes is a bug in Distributary and keeps its
traceback. A command raises `UserError` itself for a mistake only the command line can see (two
flags that do not go together, a log the pipeline does not have).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import click

from distributary.errors import DistributaryError


class UserError(DistributaryError, click.ClickException):
    """A mistake in the user's input: printed as one line on stderr, exit status 1."""

    def show(self, file: Any = None) -> None:
        """Print `error: MESSAGE` on stderr (click's default adds a usage hint that misleads)."""
        click.echo(f"error: {self.format_message()}", err=True)


SPARK_EXTRA = "pip install 'distributary[spark]'"


def require_pyspark(command: str) -> None:
    """Stop `command`, which runs Spark, with one line naming the `spark` extra when pyspark is
    not installed (the lean install, as in the operator's image), rather than an ImportError."""
    if importlib.util.find_spec("pyspark") is None:
        raise UserError(
            f"distributary {command} needs Spark, and pyspark is not installed here: "
            f"install the spark extra ({SPARK_EXTRA})"
        )


class ReportingGroup(click.Group):
    """A command group whose commands report every DistributaryError as a UserError."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a DistributaryError it raises becomes one line and exit status 1."""
        try:
            return super().invoke(ctx)
        except UserError:
            raise
        except DistributaryError as exc:
            raise UserError(str(exc)) from None
