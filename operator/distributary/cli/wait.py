"""`distributary wait`: read-your-writes for scripts and CI.

A producer that appended a record knows its log, partition and offset; `wait VIEW --covers
LOG:PARTITION:OFFSET` returns once the view's serving revision has read past it, so what the view
derives from that record is in its output. `--caught-up` waits until the view keeps up with its
inputs, as its `CaughtUp` condition says: it has read everything they hold, or, while records keep
arriving, it is behind by no more than what they receive in its cutover window. Against a
cluster the view's status says where it is (the operator writes its consumer group's positions
there, as `kubectl wait --for=condition=CaughtUp` reads them); for a `distributary run` on this
machine (`--state-dir`) the view's consumer group says it, read from Kafka as any Kafka tool
would, with the run's status for keeping up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from distributary.cli.errors import UserError
from distributary.cli.named_log import run_broker
from distributary.cli.options import KAFKA_CONFIG, kafka_connection
from distributary.cli.pipeline_files import load_checked
from distributary.graph import Ref
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.connection import client_settings
from distributary.local.revisions import LocalRevisions
from distributary.local.state import RunState, read_run_state
from distributary.plan.access.kafka_connection import KafkaSecurity
from distributary.plan.pipelines.pipeline import PlanSettings, plan_pipeline
from distributary.plan.revisions.positions import parse_cover, uncovered
from distributary.plan.sinks.sink_plan import SinkRun
from distributary.plan.status.conditions import suspension

if TYPE_CHECKING:
    from distributary.kube.resources import Kube

API = "distributary.dev/v1alpha1"
Positions = dict[str, dict[int, int]]
Probe = Callable[[], tuple[Positions, bool, str]]  # positions by log, caught up, detail


def _cluster_probe(kube: Kube, namespace: str, name: str) -> Probe:
    def probe() -> tuple[Positions, bool, str]:
        view = kube.get(API, "DerivedView", namespace, name)
        if view is None:
            raise UserError(f"DerivedView {namespace}/{name} does not exist")
        status = view.get("status") or {}
        positions = positions_of(status)
        generation = (view.get("metadata") or {}).get("generation")
        if status.get("observedGeneration") == generation:
            refuse_suspended(f"DerivedView {namespace}/{name}", status)
        caught_up = status.get("observedGeneration") == generation and any(
            c.get("type") == "CaughtUp" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        detail = f"revision {status.get('servingRevision', '-')}, lag {status.get('lag', '-')}"
        return positions, caught_up, detail

    return probe


def _local_probe(
    state: RunState,
    state_dir: Path,
    servers: str,
    name: str,
    namespace: str,
    client: Mapping[str, str] | None = None,
) -> Probe:
    pipeline = load_checked([Path(p) for p in state.paths])
    sink = pipeline.sinks.get(Ref("Sink", namespace, name))
    if sink is not None:
        return _sink_probe(state_dir, sink.spec.log, name, namespace, servers, client)
    plan = plan_pipeline(pipeline, PlanSettings(backend="direct"))
    planned = next(
        (v for v in plan.views if (v.view.name, v.view.namespace) == (name, namespace)), None
    )
    if planned is None:
        names = ", ".join(sorted(v.view.name for v in plan.views)) or "none"
        raise UserError(f"no view {name!r} in the run's pipeline (views: {names})")
    first = planned.runner
    admin = KafkaAdmin(servers, client=client)

    def serving() -> tuple[str, dict[str, str], bool]:
        """The serving revision's group and input topics (by log), as the run's status says
        now: a cutover moves them (before its first record, revision 1's); and whether the
        status says it keeps up (`CaughtUp`)."""
        status = LocalRevisions.load(state_dir).status("DerivedView", f"{namespace}/{name}")
        refuse_suspended(f"view {name}", status)
        number = status.get("servingRevision")
        row = next((r for r in status.get("revisions") or [] if r["revision"] == number), None)
        keeping_up = any(
            c.get("type") == "CaughtUp" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        if row is None or not row.get("inputs"):
            inputs = {s.log: state.serving_topic(s.log, namespace) or s.topic for s in first.inputs}
            return first.consumer_group, inputs, False
        topics = {str(i["log"]): str(i["topic"]) for i in row["inputs"]}
        return str(row["consumerGroup"]), topics, keeping_up

    def probe() -> tuple[Positions, bool, str]:
        group, topics, keeping_up = serving()
        committed = admin.committed(group)
        ends = admin.end_offsets(list(topics.values()))
        positions = {log: dict(committed.get(topic, {})) for log, topic in topics.items()}
        lag = sum(
            max(0, end - committed.get(topic, {}).get(p, 0))
            for topic in topics.values()
            for p, end in ends.get(topic, {}).items()
        )
        return positions, lag == 0 or keeping_up, f"group {group}, lag {lag}"

    return probe


def _sink_probe(
    state_dir: Path,
    log: str,
    name: str,
    namespace: str,
    servers: str,
    client: Mapping[str, str] | None = None,
) -> Probe:
    """A Sink's position as its table holds it (committed with the rows: a record covered is
    in the table), read from its database as the run's Sink process reads it."""
    spec = state_dir / "sinks" / f"{namespace}.{name}.json"
    admin = KafkaAdmin(servers, client=client)

    def probe() -> tuple[Positions, bool, str]:
        # Here, not at the top: every command's module is loaded with the CLI, and the Sinks'
        # database drivers (15 MB) are no business of the others (the operator among them).
        from distributary.sinks.main import StoreReadError, held_positions

        if not spec.exists():
            return {log: {}}, False, "the Sink has not started yet"
        run = SinkRun.model_validate_json(spec.read_text("utf-8"))
        try:
            held = held_positions(run)
        except StoreReadError as exc:
            raise UserError(f"Sink {namespace}/{name}: reading its position: {exc}") from None
        ends = admin.end_offsets([run.topic]).get(run.topic, {})
        lag = sum(max(0, end - held.get(p, 0)) for p, end in ends.items())
        where = f"table {run.table}" if run.store == "postgres" else f"Redis {run.key_prefix}<key>"
        return {log: held}, lag == 0, f"{where}, lag {lag}"

    return probe


def wait_for_view(
    probe: Probe,
    covers: list[tuple[str, int, int]],
    caught_up: bool,
    timeout: float,
    say: Callable[[str], None],
    interval: float = 1.0,
) -> str:
    """Poll until the covers are covered (and the view caught up, if asked); what was seen.
    Raises UserError on a timeout, naming what is still missing."""
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        positions, is_caught_up, detail = probe()
        for log, _, _ in covers:
            if log not in positions and positions:
                reads = ", ".join(sorted(positions))
                raise UserError(f"it does not read log {log!r}; it reads {reads}")
        missing = uncovered(covers, positions)
        if not missing and (is_caught_up or not caught_up):
            return detail
        waiting = missing + ([] if is_caught_up or not caught_up else ["caught up"])
        line = f"waiting for {', '.join(waiting)} ({detail})"
        if line != last:
            say(line)
            last = line
        if time.monotonic() >= deadline:
            raise UserError(
                f"timed out after {timeout:.0f}s; still waiting for {', '.join(waiting)} ({detail})"
            )
        time.sleep(interval)


@click.command()
@click.argument("view", metavar="VIEW_OR_SINK")
@click.option(
    "--covers",
    "covers",
    multiple=True,
    metavar="LOG:PARTITION:OFFSET",
    help="A record the view must have read (repeatable).",
)
@click.option(
    "--caught-up",
    is_flag=True,
    help="Wait until the view keeps up: lag 0, or within what its inputs receive in its "
    "cutover window while records arrive (its CaughtUp condition).",
)
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds to wait.")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Wait on a `distributary run` on this machine (its state folder) instead of a cluster.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="KUBECONFIG",
    default=None,
    help="The cluster's kubeconfig ($KUBECONFIG; in a pod, its service account).",
)
@KAFKA_CONFIG
def wait(
    view: str,
    covers: tuple[str, ...],
    caught_up: bool,
    timeout: float,
    namespace: str,
    state_dir: Path | None,
    kubeconfig: Path | None,
    kafka_config: Path | None,
) -> None:
    """Wait until a view has read the given records (--covers) or everything (--caught-up);
    for a Sink of a `distributary run`, until they are in its table.

    Exits 0 once it has, 1 with what is still missing when --timeout passes first."""
    parsed = [parse_cover(c) for c in covers]
    if not parsed and not caught_up:
        raise UserError("say what to wait for: --covers LOG:PARTITION:OFFSET or --caught-up")
    if kafka_config is not None and state_dir is None:
        raise UserError(
            "--kafka-config is for a `distributary run` on a secured Kafka: give its --state-dir "
            "too (against a cluster, the view's status is read from the API server)"
        )
    if state_dir is None:
        from distributary.kube.resources import Kube  # the Kubernetes client: a cluster's only

        probe = _cluster_probe(Kube(kubeconfig), namespace, view)
        detail = wait_for_view(probe, parsed, caught_up, timeout, _say)
    else:
        _, security = kafka_connection(kafka_config, None)
        detail = _wait_local(state_dir, view, namespace, parsed, caught_up, timeout, security)
    click.echo(f"{view}: done ({detail})")


def _wait_local(
    state_dir: Path,
    view: str,
    namespace: str,
    covers: list[tuple[str, int, int]],
    caught_up: bool,
    timeout: float,
    security: KafkaSecurity | None = None,
) -> str:
    state = read_run_state(state_dir)
    alive = state.alive()
    with run_broker(None, state, state_dir, may_start=True, security=security) as servers:
        client = client_settings(security)
        probe = _local_probe(state, state_dir, servers, view, namespace, client)
        # A run that has stopped reads nothing more: its positions are final.
        return wait_for_view(probe, covers, caught_up, timeout if alive else 0.0, _say)


def _say(text: str) -> None:
    click.echo(text, err=True)


def refuse_suspended(what: str, status: Mapping[str, Any]) -> None:
    """Raise UserError when the view is suspended (`spec.suspend`): it reads nothing, so
    waiting for it would only time out."""
    if suspension(status) is not None:
        raise UserError(
            f"{what} is suspended (spec.suspend: true): it reads nothing until resumed; "
            "set spec.suspend to false, then wait"
        )


def positions_of(status: Mapping[str, Any]) -> Positions:
    """A view's serving positions by log, from its status."""
    return {
        str(row["log"]): {int(p): int(o) for p, o in (row.get("position") or {}).items()}
        for row in status.get("inputs") or []
    }
