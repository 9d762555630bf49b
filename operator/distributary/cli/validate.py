"""`distributary validate`: check pipeline files, and the check every other command starts with.

The files are read as kubectl and the API server read them (each document placed by its apiVersion
and kind and checked against the CRDs' own schema, repeated YAML keys refused: `api.admission`),
then as the operator reads them; every problem is printed on stderr, one line each naming the file,
the resource, the field and the fix, before anything is planned or run. The
commands that read pipeline files (plan, graph, run, wait) call `load_checked` so a person meets
the same report whichever command they ran (`cli.pipeline_files`).

`--spark` then asks Spark itself (`runner.analysis`): a local JVM takes seconds to start, so it is
a flag, and it runs only on a pipeline the fast checks passed.

`--database` asks each Source's PostgreSQL, with the password from `--secrets` as `run` reads it:
the same `local.sources.resolve_sources` that `run` starts with, so the two commands refuse the
same tables and rights in the same words (the server's `wal_level`, the user's REPLICATION and
its right to make the publication). It needs the databases reachable from this
machine, so it is a flag too; with --spark, Spark then analyses the views over the tables'
columns as the databases have them.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click

from distributary.api.source import Source
from distributary.cli.errors import UserError, require_pyspark
from distributary.cli.options import PIPELINE_PATHS, TOPIC_NAMES
from distributary.cli.pipeline_files import load_checked
from distributary.graph import Pipeline
from distributary.local.sources import resolve_sources
from distributary.plan.sources.source_plan import database_address


def _summary(pipeline: Pipeline) -> str:
    declared = [
        r for r in pipeline.logs if not pipeline.is_derived(r) and not pipeline.is_captured(r)
    ]
    sources, sinks = len(pipeline.captures), len(pipeline.sinks)
    return (
        f"{len(declared)} log{'s' if len(declared) != 1 else ''}, "
        f"{len(pipeline.views)} view{'s' if len(pipeline.views) != 1 else ''}, "
        f"{len(pipeline.jobs)} job{'s' if len(pipeline.jobs) != 1 else ''}"
        + (f", {sources} source{'s' if sources != 1 else ''}" if sources else "")
        + (f", {sinks} sink{'s' if sinks != 1 else ''}" if sinks else "")
    )


@click.command()
@PIPELINE_PATHS
@TOPIC_NAMES
@click.option(
    "--spark",
    is_flag=True,
    help="Then have Spark analyse each view's query as the runner builds it (needs Java; "
    "starts a local Spark session, 10-20 s).",
)
@click.option(
    "--database",
    is_flag=True,
    help="Then read each Source's tables from its PostgreSQL as `distributary run` does, and "
    "check that the server and user allow capture (wal_level logical, REPLICATION).",
)
@click.option(
    "--secrets",
    "secrets_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="With --database: the Sources' passwords, as Kubernetes mounts Secrets: "
    "DIR/<secret>/<key>, as for `distributary run`.",
)
def validate(
    paths: tuple[Path, ...], spark: bool, database: bool, secrets_dir: Path | None
) -> None:
    """Check pipeline files: every resource, reference, SQL query and schema.

    At least as strict as the API server: each document is checked against the CRDs' schema (types
    without coercion, formats, patterns, lengths, ranges), and a document that cannot be placed (a
    missing or misspelt apiVersion or kind) or a repeated YAML key is refused. Documents of other
    APIs are skipped and counted. With --database, each Source's tables are read from its
    PostgreSQL as `distributary run` reads them (missing tables, tables without a primary key,
    column types that cannot be carried, a key that is not the primary key are refused), and the
    server's wal_level and the user's REPLICATION are checked. With --spark, each view's query is
    then analysed by Spark itself, over empty streams with its inputs' schemas and in its output
    mode: unknown functions, type errors and every operation Structured Streaming refuses. Exits
    0 when the pipeline is valid; otherwise prints one line per problem and exits 1.
    """
    if secrets_dir is not None and not database:
        raise UserError("--secrets is read only with --database: add --database")
    pipeline = load_checked(paths)
    if database:
        pipeline = check_with_databases(pipeline, secrets_dir)
    unread = check_with_spark(pipeline) if spark else 0
    skipped = f"; {pipeline.skipped} other document(s) skipped" if pipeline.skipped else ""
    analysed = "; Spark accepts every query" if spark and pipeline.views else ""
    if unread:
        analysed = (
            f"; Spark accepts every query it analysed ({unread} left for --database: they "
            "read a Source's table whose columns only its database has)"
        )
    click.echo(f"valid: {_summary(pipeline)}{skipped}{analysed}")


def check_with_databases(pipeline: Pipeline, secrets_dir: Path | None) -> Pipeline:
    """The pipeline with each Source's tables as its database has them, after printing what was
    checked of each; a UserError after printing every problem on stderr."""
    if not pipeline.captures:
        click.echo("database: no Source to check")
        return pipeline
    resolved, problems = resolve_sources(
        pipeline,
        secrets_dir,
        say=lambda text: click.echo(f"database: {text}", err=True),
    )
    for problem in problems:
        click.echo(problem, err=True)
    if problems:
        count = len(problems)
        raise UserError(
            f"{count} problem{'s' if count != 1 else ''} found in the Sources' databases"
        )
    for ref, source in sorted(pipeline.captures.items()):
        click.echo(source_checked(ref.name, source))
    return resolved


def source_checked(name: str, source: Source) -> str:
    """What `--database` found of a Source that passed: its tables, where, and that it may
    capture."""
    count = len(source.spec.tables)
    return (
        f"Source {name}: {count} table{'s' if count != 1 else ''} found in "
        f"{database_address(source)}, wal_level logical, user {source.spec.postgres.user!r} "
        "may replicate"
    )


def check_with_spark(pipeline: Pipeline) -> int:
    """Have Spark analyse every view of `pipeline` (which passed the static checks), printing
    progress and then each problem on stderr; a UserError when Spark refuses any. The number
    of views skipped because they read a Source's table whose columns only its database has."""
    if not pipeline.views:
        return 0
    require_pyspark("validate --spark")
    # Imported here: pyspark takes a second to import, and only --spark needs it.
    from distributary.runner.analysis import QueryCheck, SparkStartError, local_session

    def say(text: str) -> None:
        click.echo(f"spark: {text}", err=True)

    count = len(pipeline.views)
    say(f"starting local Spark to analyse {count} view{'s' if count != 1 else ''}...")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="distributary-validate-") as folder:
        try:
            with local_session(Path(folder)) as session:
                say(f"started in {time.monotonic() - started:.0f}s")
                check = QueryCheck(session, Path(folder))
                problems = check.problems(pipeline, progress=say)
        except SparkStartError as exc:
            raise UserError(f"--spark: {exc}") from None
    for problem in problems:
        click.echo(str(problem), err=True)
    if problems:
        total = len(problems)
        raise UserError(f"{total} problem{'s' if total != 1 else ''} found by Spark")
    return len(check.skipped)
