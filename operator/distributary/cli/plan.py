"""`distributary plan`: what the operator would create for the files, before anything is applied.

The plan is the operator's own (`plan.pipelines.pipeline.plan_pipeline`), so what this prints is
what a cluster gets: the topics with their configs and the Spark applications, as a summary or as
the child manifests. With `--against` or `--against-cluster` it also says how each change would be
carried out (`cli.plan_against`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml

from distributary.cli.errors import UserError
from distributary.cli.options import PIPELINE_PATHS, TOPIC_NAMES
from distributary.cli.pipeline_files import load_checked
from distributary.cli.plan_against import (
    ClusterTarget,
    comparison_options,
    read_cluster,
    render_changes,
    render_cluster,
)
from distributary.graph import Pipeline
from distributary.plan.edits.cluster_changes import cluster_changes
from distributary.plan.edits.file_changes import pipeline_changes
from distributary.plan.pipelines.pipeline import (
    DEFAULT_CHECKPOINT_ROOT,
    DEFAULT_IMAGE,
    PipelinePlan,
    PlannedView,
    PlanSettings,
    plan_pipeline,
)
from distributary.plan.sources.source_plan import connector_name

F = TypeVar("F", bound=Callable[..., Any])
TOPIC_BACKENDS = click.Choice(["strimzi", "direct"])


def _describe_configs(configs: dict[str, str] | Any) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(dict(configs).items())) or "broker defaults"


def _describe_view(planned: PlannedView, pipeline: Pipeline) -> list[str]:
    runner = planned.runner
    view = pipeline.views[planned.view]
    spark = view.spec.spark
    reads = ", ".join(
        f"{i.topic} as {i.alias}"
        + (" (a table: each key's latest row)" if i.read == "table" else " (a stream)")
        + f" from {i.starting_position.kind}"
        + (f", watermark {i.watermark.column} - {i.watermark.delay_ms}ms" if i.watermark else "")
        for i in runner.inputs
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
        f"      writes {writes}; dead letters to {runner.dead_letter_topic} "
        f"(kept {view.spec.dead_letters.retention})",
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
    if pipeline.captures:
        lines.append("")
        lines.append("Change data capture (Debezium on Kafka Connect):")
    for ref, source in sorted(pipeline.captures.items()):
        postgres = source.spec.postgres
        lines.append(
            f"  + {connector_name(source)}  Source {ref.name}: PostgreSQL {postgres.host}:"
            f"{postgres.port}/{postgres.database} as {postgres.user}, slot and publication "
            f"{source.identifier}, snapshot {source.spec.snapshot.mode}"
        )
        for table, log in pipeline.table_logs(source).items():
            columns = log.spec.record_schema or "columns read from the table"
            lines.append(f"      {table} -> {log.topic} (keyed by the primary key; {columns})")
    if pipeline.sinks:
        lines.append("")
        lines.append("Sinks (a process each, exactly once into the store):")
    for ref, sink in sorted(pipeline.sinks.items()):
        target, cache = sink.spec.postgres, sink.spec.redis
        if target is not None:
            lines.append(
                f"  + {ref.name}  reads Log {sink.spec.log}; {target.mode} into {target.table} "
                f"at {target.host}:{target.port}/{target.database} as {target.user}"
            )
        elif cache is not None:
            ttl = f", expiring after {cache.ttl}" if cache.ttl else ""
            lines.append(
                f"  + {ref.name}  reads Log {sink.spec.log}; keys {cache.key_prefix}<key> in "
                f"Redis {cache.host}:{cache.port}/{cache.database}{ttl}"
            )
    return "\n".join(lines)


def plan_options(func: F) -> F:
    """The options of `plan` that say how the pipeline is planned and printed."""
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
            "--topic-backend",
            "topic_backend",
            type=TOPIC_BACKENDS,
            default="strimzi",
            show_default=True,
            help="How topics are made: Strimzi KafkaTopics or the Kafka Admin API.",
        ),
        # The flag's old name, kept for scripts; the first of the two given wins.
        click.option("--backend", "topic_backend", type=TOPIC_BACKENDS, hidden=True),
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
        TOPIC_NAMES,
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.command()
@PIPELINE_PATHS
@plan_options
@comparison_options
def plan(
    paths: tuple[Path, ...],
    output: str,
    topic_backend: str,
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
        backend="strimzi" if topic_backend == "strimzi" else "direct",
        strimzi_cluster=strimzi_cluster,
        image=image,
        checkpoint_root=checkpoint_root,
        bootstrap_servers=bootstrap_servers,
    )
    try:
        planned = plan_pipeline(pipeline, settings)
    except ValueError as exc:  # the planners' own checks raise plain ValueErrors
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
