"""The `distributary` command: validate, plan and draw pipelines, and generate the CRDs.

Every command reads the same YAML the operator reconciles. A user's mistake is reported on stderr,
one line per problem naming the file, the resource, the field and the fix, with exit status 1;
a traceback is kept for Distributary's own bugs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml

from distributary import __version__
from distributary.api.crd import drift, write_crds
from distributary.cli_plan import (
    ClusterTarget,
    comparison_options,
    read_cluster,
    render_changes,
    render_cluster,
)
from distributary.cli_records import UserError, produce, tail
from distributary.cli_run import load_checked, run
from distributary.cli_wait import wait
from distributary.controllers.main import operator
from distributary.diagram import draw
from distributary.graph import Pipeline
from distributary.plan.cluster_changes import cluster_changes
from distributary.plan.file_changes import pipeline_changes
from distributary.plan.pipeline import (
    DEFAULT_CHECKPOINT_ROOT,
    DEFAULT_IMAGE,
    PipelinePlan,
    PlannedView,
    PlanSettings,
    plan_pipeline,
)
from distributary.sql import SqlError

F = TypeVar("F", bound=Callable[..., Any])

PATHS = click.argument(
    "paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path)
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="distributary")
def main() -> None:
    """Distributary: log-centric data pipelines on Kafka and Spark.

    Logs are Kafka topics; derived views are Spark SQL over logs whose output is itself a log;
    stream jobs are your own PySpark applications. Describe them in YAML, then validate, plan,
    draw, or (in a cluster) let the operator reconcile them.
    """


def _summary(pipeline: Pipeline) -> str:
    declared = [r for r in pipeline.logs if not pipeline.is_derived(r)]
    return (
        f"{len(declared)} log{'s' if len(declared) != 1 else ''}, "
        f"{len(pipeline.views)} view{'s' if len(pipeline.views) != 1 else ''}, "
        f"{len(pipeline.jobs)} job{'s' if len(pipeline.jobs) != 1 else ''}"
    )


@main.command()
@PATHS
def validate(paths: tuple[Path, ...]) -> None:
    """Check pipeline files: every resource, reference, SQL query and schema.

    Exits 0 when the pipeline is valid; otherwise prints one line per problem and exits 1.
    """
    pipeline = load_checked(paths)
    skipped = f"; {pipeline.skipped} other document(s) skipped" if pipeline.skipped else ""
    click.echo(f"valid: {_summary(pipeline)}{skipped}")


def _describe_configs(configs: dict[str, str] | Any) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(dict(configs).items())) or "broker defaults"


def _describe_view(planned: PlannedView, pipeline: Pipeline) -> list[str]:
    runner = planned.runner
    view = pipeline.views[planned.view]
    spark = view.spec.spark
    reads = ", ".join(
        f"{i.topic} as {i.alias} from {i.starting_position.kind}" for i in runner.inputs
    )
    output = runner.output
    writes = (
        f"{output.topic} ({output.mode}" + (f" by {', '.join(output.key)})" if output.key else ")")
        if output
        else "-"
    )
    return [
        f"  + {planned.application['metadata']['name']}  DerivedView {planned.view.name}, "
        f"revision {planned.revision} ({planned.spec_hash})",
        f"      reads {reads}",
        f"      writes {writes}; dead letters to {runner.dead_letter_topic}",
        f"      driver {spark.driver.cores} core(s) {spark.driver.memory}; "
        f"{spark.executor.instances} executor(s) of {spark.executor.cores} core(s) "
        f"{spark.executor.memory}; trigger {runner.trigger}; "
        f"shuffle partitions {runner.spark_conf.get('spark.sql.shuffle.partitions')}",
        f"      consumer group {runner.consumer_group}; checkpoint {runner.checkpoint_location}",
    ]


def _render_text(plan: PipelinePlan, pipeline: Pipeline, settings: PlanSettings) -> str:
    backend = (
        f"strimzi, cluster {settings.strimzi_cluster}"
        if settings.backend == "strimzi"
        else "direct"
    )
    lines = [f"Topics ({backend}):"]
    width = max((len(t.topic.name) for t in plan.topics), default=0)
    for planned in plan.topics:
        topic = planned.topic
        replicas = topic.replicas if topic.replicas is not None else "default"
        origin = (
            f"  <- {planned.derived_from.kind} {planned.derived_from.name}, "
            f"revision {planned.revision}"
            if planned.derived_from
            else ""
        )
        lines.append(
            f"  + {topic.name:<{width}}  partitions {topic.partitions}, replicas {replicas}, "
            f"{_describe_configs(topic.configs)}{origin}"
        )
    lines.append("")
    lines.append("Spark applications (spark-operator):")
    for planned_view in plan.views:
        lines.extend(_describe_view(planned_view, pipeline))
    for job in plan.jobs:
        lines.append(
            f"  + {job.application['metadata']['name']}  StreamJob {job.job.name}, "
            f"revision {job.revision} ({job.spec_hash})"
        )
    if not plan.views and not plan.jobs:
        lines.append("  (none)")
    return "\n".join(lines)


def _option_group(func: F) -> F:
    options = [
        click.option(
            "-o",
            "--output",
            "output",
            type=click.Choice(["text", "yaml"]),
            default="text",
            show_default=True,
            help="text: a summary; yaml: the child manifests the operator would apply.",
        ),
        click.option(
            "--backend",
            type=click.Choice(["strimzi", "direct"]),
            default="strimzi",
            show_default=True,
            help="How topics are made: Strimzi KafkaTopics or the Kafka Admin API.",
        ),
        click.option(
            "--strimzi-cluster",
            default="my-cluster",
            show_default=True,
            help="The Kafka cluster's name (the strimzi.io/cluster label).",
        ),
        click.option(
            "--image",
            default=DEFAULT_IMAGE,
            show_default=True,
            help="The job image for views (a spec's spark.image wins).",
        ),
        click.option(
            "--checkpoint-root",
            default=DEFAULT_CHECKPOINT_ROOT,
            show_default=True,
            help="Where revisions checkpoint (shared storage in a cluster).",
        ),
        click.option(
            "--bootstrap-servers",
            default=None,
            help="Kafka bootstrap servers to write into the runner specs.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@main.command()
@PATHS
@_option_group
@comparison_options
def plan(
    paths: tuple[Path, ...],
    output: str,
    backend: str,
    strimzi_cluster: str,
    image: str,
    checkpoint_root: str,
    bootstrap_servers: str | None,
    against: tuple[Path, ...],
    against_cluster: bool,
    kubeconfig: Path | None,
    context: str | None,
    namespace: str | None,
) -> None:
    """Show what the pipeline would create: topics with their configs, Spark applications.

    With --against OLD, or --against-cluster, also how each view's and job's change from there
    is carried out (Ignore, RestartInPlace, Reprocess, Forbidden)."""
    target = ClusterTarget.of(against, against_cluster, kubeconfig, context, namespace, output)
    pipeline = load_checked(paths, "planned")
    cluster = None
    if target is not None:
        pipeline, cluster = read_cluster(target, pipeline, paths)
    settings = PlanSettings(
        backend="strimzi" if backend == "strimzi" else "direct",
        strimzi_cluster=strimzi_cluster,
        image=image,
        checkpoint_root=checkpoint_root,
        bootstrap_servers=bootstrap_servers,
    )
    try:
        planned = plan_pipeline(pipeline, settings)
    except (ValueError, SqlError) as exc:
        raise UserError(str(exc)) from None
    if output == "yaml":
        click.echo(yaml.safe_dump_all(planned.manifests(), sort_keys=False, width=100), nl=False)
        return
    click.echo(_render_text(planned, pipeline, settings))
    if against:
        before = load_checked(against, "compared")
        click.echo(render_changes(pipeline_changes(before, pipeline), against))
    if cluster is not None:
        click.echo(render_cluster(cluster_changes(pipeline, cluster.resources), cluster))


@main.command()
@PATHS
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
            raise UserError("crds/ is stale: run 'distributary crds --out crds/' and commit it")
        click.echo(f"{out_dir}: up to date")
        return
    for path in write_crds(out_dir):
        click.echo(f"wrote {path}")


main.add_command(run)
main.add_command(operator)
main.add_command(produce)
main.add_command(tail)
main.add_command(wait)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
