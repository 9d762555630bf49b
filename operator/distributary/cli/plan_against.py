"""`distributary plan --against` and `--against-cluster`: what applying the files would change.

`--against OLD` compares two sets of files. `--against-cluster` compares the files with what a
cluster holds and runs (`plan.edits.cluster_changes`), read with the person's own kubeconfig, as
kubectl finds it: `--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`, else (in a Pod)
the service account. The files are placed where `kubectl apply` would put them: a resource that
names no namespace goes to `--namespace`, else the context's namespace, else `default`. The
cluster is read before anything is printed, so a failure leaves no half report.

`cli.plan` takes the options and calls in here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from distributary.api.documents import yaml_documents
from distributary.cli.errors import UserError
from distributary.graph import Declared, Pipeline, Ref
from distributary.kube.cluster_pipeline import context_namespace, read_namespaces
from distributary.kube.resources import Kube
from distributary.plan.edits.cluster_changes import ClusterComparison, NamespaceResources
from distributary.plan.edits.file_changes import LogDifference, PlannedChange

F = TypeVar("F", bound=Callable[..., Any])


def comparison_options(func: F) -> F:
    """The options of `plan` that say what to compare the files with."""
    options = [
        click.option(
            "--against",
            "against",
            multiple=True,
            type=click.Path(exists=True, path_type=Path),
            help="The previous files (repeatable): show how each view's and job's change is "
            "carried out.",
        ),
        click.option(
            "--against-cluster",
            is_flag=True,
            help="Compare with what the cluster holds and runs: its Logs, DerivedViews, "
            "StreamJobs and their revisions.",
        ),
        click.option(
            "--kubeconfig",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            help="With --against-cluster: the kubeconfig (default: $KUBECONFIG, else "
            "~/.kube/config, else the Pod's service account).",
        ),
        click.option(
            "--context", default=None, help="With --against-cluster: the kubeconfig's context."
        ),
        click.option(
            "-n",
            "--namespace",
            default=None,
            help="With --against-cluster: the namespace the files are applied to, as kubectl "
            "apply -n (default: the context's, else default).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@dataclass(frozen=True)
class ClusterTarget:
    """Where --against-cluster reads: a kubeconfig (None: in a Pod), a context, a namespace."""

    kubeconfig: str | None
    context: str | None
    namespace: str | None

    @classmethod
    def of(
        cls,
        against: Sequence[Path],
        against_cluster: bool,
        kubeconfig: Path | None,
        context: str | None,
        namespace: str | None,
        output: str,
    ) -> ClusterTarget | None:
        """The cluster to compare with (None: none), or a usage error for options that do not
        go together."""
        if against and against_cluster:
            raise click.UsageError(
                "--against and --against-cluster exclude each other: compare the files with "
                "other files or with the cluster, not both"
            )
        if not against_cluster:
            given = [f for f, v in (("--kubeconfig", kubeconfig), ("--context", context),
                                    ("--namespace", namespace)) if v is not None]  # fmt: skip
            if given:
                raise click.UsageError(f"{', '.join(given)}: only with --against-cluster")
            return None
        if output != "text":
            raise click.UsageError("--against-cluster prints a text report: drop -o yaml")
        return cls(_kubeconfig(kubeconfig), context, namespace)


def _kubeconfig(given: Path | None) -> str | None:
    """The kubeconfig, as kubectl finds it; None in a Pod (its service account)."""
    if given is not None:
        if not given.is_file():
            raise UserError(f"--kubeconfig {given}: no such file; pass the path of a kubeconfig")
        return str(given)
    listed = os.environ.get("KUBECONFIG", "")
    if listed:
        if not any(Path(p).is_file() for p in listed.split(os.pathsep) if p):
            raise UserError(
                f"$KUBECONFIG names no existing file ({listed}): fix it, or pass --kubeconfig FILE"
            )
        return listed
    home = Path.home() / ".kube" / "config"
    if home.is_file():
        return str(home)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    raise UserError(
        "no kubeconfig to reach the cluster: pass --kubeconfig FILE, set $KUBECONFIG, or write "
        "~/.kube/config (e.g. with your provider's get-credentials command)"
    )


@dataclass(frozen=True)
class ClusterView:
    """The cluster read for a comparison: where, and its resources by namespace."""

    server: str
    namespaces: tuple[str, ...]
    resources: dict[str, NamespaceResources]


def read_cluster(
    target: ClusterTarget, pipeline: Pipeline, paths: Sequence[Path]
) -> tuple[Pipeline, ClusterView]:
    """The files' pipeline placed in the namespaces `kubectl apply` would put it in, and what
    the cluster holds there. Raises KubeError when the cluster cannot be read."""
    in_context = context_namespace(target.kubeconfig, target.context)
    with Kube(target.kubeconfig, target.context) as kube:
        namespace = target.namespace or in_context
        placed = place(pipeline, paths, namespace, explicit=target.namespace is not None)
        namespaces = tuple(sorted({ref.namespace for ref in placed.order}))
        where = f"namespace{'s' if len(namespaces) > 1 else ''} {', '.join(namespaces)}"
        click.echo(f"reading {where} from the API server at {kube.server}", err=True)
        resources = read_namespaces(kube, namespaces)
        return placed, ClusterView(kube.server, namespaces, resources)


def place(
    pipeline: Pipeline, paths: Sequence[Path], namespace: str | None, explicit: bool
) -> Pipeline:
    """`pipeline` with the resources whose documents name no namespace in `namespace`. With an
    explicit --namespace, a document naming another one is an error, as with kubectl."""
    if namespace is None:
        return pipeline
    free = _unnamespaced(paths)
    declared = []
    for ref in [*pipeline.logs, *pipeline.views, *pipeline.jobs]:
        if ref.kind == "Log" and pipeline.is_derived(ref):
            continue  # built again from its view
        resource = pipeline.resource(ref)
        if (ref.kind, ref.name) in free and ref.namespace == "default":
            metadata = resource.metadata.model_copy(update={"namespace": namespace})
            resource = resource.model_copy(update={"metadata": metadata})
        elif explicit and ref.namespace != namespace:
            raise UserError(
                f"{pipeline.source(ref)}: {ref.kind} {ref.name} names namespace {ref.namespace}, "
                f"not --namespace {namespace}: drop one of them"
            )
        declared.append(Declared(resource, pipeline.source(ref)))
    placed = Pipeline.build(declared)
    if not placed.ok:  # two resources of the same name in one namespace now
        raise UserError("; ".join(map(str, placed.problems)))
    return placed


def _unnamespaced(paths: Sequence[Path]) -> set[tuple[str, str]]:
    """(kind, name) of each document of the files that names no namespace."""
    files: list[Path] = []
    for path in paths:
        found = path.rglob("*") if path.is_dir() else [path]
        files += [p for p in found if p.is_file() and p.suffix in (".yaml", ".yml")]
    free = set()
    for file in files:
        for _, document, _ in yaml_documents(file.read_text("utf-8")):  # read by load_checked
            if isinstance(document, dict) and not (document.get("metadata") or {}).get("namespace"):
                free.add((str(document.get("kind")), str(document["metadata"].get("name"))))
    return free


_CHANGE_MEANING = {
    "New": "starts as revision 1",
    "Removed": "its application stops; its output log's data stays unless its policy says Delete",
    "Ignore": "nothing to do",
    "RestartInPlace": "restarts from its checkpoint",
    "Reprocess": "recomputed beside the serving revision, which readers keep until cutover",
    "Forbidden": "refused: the resource is Stalled until the change is undone",
}
_CLUSTER_MEANING = {
    **_CHANGE_MEANING,
    "New": "only in the files: starts as revision 1 once applied",
    "Removed": "only in the cluster: applying the files leaves it running; deleting it stops its "
    "application, and its output log's data stays unless its policy says Delete",
}


def render_changes(changes: list[PlannedChange], against: Sequence[Path]) -> str:
    """The report of `plan --against`."""
    lines = [f"Changes against {', '.join(map(str, against))}:"]
    lines += _change_lines(changes, _CHANGE_MEANING, qualified=False) or ["  none"]
    return "\n".join(lines)


def _change_lines(
    changes: Sequence[PlannedChange], meaning: dict[str, str], qualified: bool
) -> list[str]:
    lines = []
    for change in changes:
        lines.append(f"  {_name(change.ref, qualified)}: {change.kind} ({meaning[change.kind]})")
        lines += [f"      {note}" for note in change.notes]
        lines += [f"      - {reason}" for reason in change.reasons]
    return lines


def _name(ref: Ref, qualified: bool) -> str:
    return f"{ref.kind} {ref.namespace}/{ref.name}" if qualified else f"{ref.kind} {ref.name}"


def render_cluster(comparison: ClusterComparison, cluster: ClusterView) -> str:
    """The report of `plan --against-cluster`: views and jobs, then declared Logs."""
    qualified = len(cluster.namespaces) > 1
    where = f"namespace{'s' if qualified else ''} {', '.join(cluster.namespaces)}"
    lines = [f"Changes against the cluster at {cluster.server}, {where}:"]
    lines += _change_lines(comparison.changes, _CLUSTER_MEANING, qualified)
    if comparison.unchanged:
        lines.append(
            "  unchanged: "
            + ", ".join(_unchanged(change, qualified) for change in comparison.unchanged)
        )
    if len(lines) == 1:
        lines.append("  none")
    lines.append("Logs against the cluster:")
    lines += [_log_line(item, qualified) for item in comparison.logs] or ["  no differences"]
    return "\n".join(lines)


def _unchanged(change: PlannedChange, qualified: bool) -> str:
    revision = f"revision {change.revision}" if change.revision else "no revision yet"
    return f"{_name(change.ref, qualified)} ({revision})"


def _log_line(item: LogDifference, qualified: bool) -> str:
    name = f"{item.ref.namespace}/{item.ref.name}" if qualified else item.ref.name
    if item.kind == "OnlyInFiles":
        return f"  + {name}: only in the files (created once applied)"
    if item.kind == "OnlyInCluster":
        return f"  - {name}: only in the cluster (applying the files leaves it and its topic)"
    return f"  ~ {name}: {'; '.join(item.fields)}"
