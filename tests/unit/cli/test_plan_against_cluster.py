"""`distributary plan --against-cluster` without a cluster: the options that do not go together,
a missing kubeconfig, where the files land (`kubectl apply -n`), and the report's lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.cli.test_commands import run

from distributary.cli.errors import UserError
from distributary.cli.pipeline_files import load_checked
from distributary.cli.plan_against import ClusterView, place, render_cluster
from distributary.graph import Ref
from distributary.plan.edits.cluster_changes import ClusterComparison
from distributary.plan.edits.file_changes import LogDifference, PlannedChange

LOG = """\
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: clicks}
spec: {partitions: 2, schema: "user_id STRING, url STRING"}
"""

VIEW = """\
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: urls}
spec:
  inputs: [{log: clicks, alias: c}]
  sql: SELECT user_id, url FROM c
"""


@pytest.fixture
def pipeline_file(tmp_path: Path) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text("---\n".join([LOG, VIEW]))
    return path


@pytest.fixture
def no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--against", "OLD", "--against-cluster"], "--against and --against-cluster exclude"),
        (["--namespace", "shop"], "--namespace: only with --against-cluster"),
        (["--kubeconfig", "k", "--context", "c"], "--kubeconfig, --context: only with"),
        (["--against-cluster", "-o", "yaml"], "--against-cluster prints a text report"),
    ],
    ids=["both", "namespace-alone", "kubeconfig-alone", "yaml"],
)
def test_options_that_do_not_go_together_are_a_usage_error(
    pipeline_file: Path, extra: list[str], message: str
) -> None:
    extra = [str(pipeline_file) if a == "OLD" else a for a in extra]
    code, out, err = run("plan", str(pipeline_file), *extra)
    assert code == 2
    assert out == ""
    assert message in err
    assert "Traceback" not in err


def test_without_a_kubeconfig_the_error_names_the_fix(
    pipeline_file: Path, no_kubeconfig: None
) -> None:
    code, out, err = run("plan", str(pipeline_file), "--against-cluster")
    assert code == 1
    assert out == ""
    assert err.startswith("error: no kubeconfig to reach the cluster: pass --kubeconfig FILE")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("how", "message"),
    [("flag", "--kubeconfig {}: no such file"), ("env", "$KUBECONFIG names no existing file")],
)
def test_a_kubeconfig_that_does_not_exist_is_named(
    pipeline_file: Path,
    no_kubeconfig: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    how: str,
    message: str,
) -> None:
    missing = tmp_path / "nowhere.yaml"
    args = ["plan", str(pipeline_file), "--against-cluster"]
    if how == "flag":
        args += ["--kubeconfig", str(missing)]
    else:
        monkeypatch.setenv("KUBECONFIG", str(missing))
    code, _, err = run(*args)
    assert code == 1
    assert message.format(missing) in err
    assert "Traceback" not in err


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: ctx, context: {cluster: c, user: u, namespace: shop}}]
current-context: ctx
"""


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        (KUBECONFIG, ["--context", "nope"], "--context nope: the kubeconfig {} has no such "
         "context (it has ctx); pass one of them"),
        ("just text\n", [], "cannot load the kubeconfig {} ("),
        ("clusters: [\n", [], "cannot load the kubeconfig {} (while parsing"),
    ],
    ids=["unknown-context", "not-a-kubeconfig", "not-yaml"],
)  # fmt: skip
def test_a_kubeconfig_that_cannot_be_used_is_named_before_any_connection(
    pipeline_file: Path, tmp_path: Path, content: str, extra: list[str], message: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(content)
    args = ["plan", str(pipeline_file), "--against-cluster", "--kubeconfig", str(kubeconfig)]
    code, out, err = run(*args, *extra)
    assert code == 1
    assert out == ""
    assert err.startswith("error: " + message.format(kubeconfig))
    assert len(err.strip().splitlines()) == 1


def test_files_naming_no_namespace_land_in_the_one_given(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    other = LOG.replace("name: clicks}", "name: audit, namespace: ops}")
    path.write_text("---\n".join([LOG, VIEW, other]))
    pipeline = load_checked([path])
    placed = place(pipeline, [path], "shop", explicit=False)  # the context's namespace
    assert set(placed.views) == {Ref("DerivedView", "shop", "urls")}
    assert Ref.log("clicks", "shop") in placed.logs
    assert placed.is_derived(Ref.log("urls", "shop"))
    assert Ref.log("audit", "ops") in placed.logs  # a namespace of its own is kept
    with pytest.raises(UserError, match="names namespace ops, not --namespace shop"):
        place(pipeline, [path], "shop", explicit=True)


def test_the_report_shows_revisions_reasons_and_each_side() -> None:
    urls = Ref("DerivedView", "shop", "urls")
    comparison = ClusterComparison(
        changes=(
            PlannedChange(
                urls,
                "Reprocess",
                ("sql changed: a new revision recomputes the output",),
                revision=2,
                starts=3,
                notes=("cluster: revision 2 serves (aaa)", "then: revision 3 reprocesses"),
            ),
            PlannedChange(Ref("DerivedView", "shop", "added"), "New", starts=1),
            PlannedChange(Ref("StreamJob", "shop", "old-job"), "Removed", revision=4),
        ),
        unchanged=(
            PlannedChange(Ref("DerivedView", "shop", "per-user"), "Ignore", revision=1),
            PlannedChange(Ref("StreamJob", "shop", "sessions"), "Ignore"),
        ),
        logs=(
            LogDifference(Ref.log("clicks", "shop"), "Changed", ("partitions: 2 -> 4",)),
            LogDifference(Ref.log("fresh", "shop"), "OnlyInFiles"),
            LogDifference(Ref.log("stale", "shop"), "OnlyInCluster"),
        ),
    )
    text = render_cluster(comparison, ClusterView("https://127.0.0.1:6443", ("shop",), {}))
    assert text.splitlines() == [
        "Changes against the cluster at https://127.0.0.1:6443, namespace shop:",
        "  DerivedView urls: Reprocess (recomputed beside the serving revision, which readers "
        "keep until cutover)",
        "      cluster: revision 2 serves (aaa)",
        "      then: revision 3 reprocesses",
        "      - sql changed: a new revision recomputes the output",
        "  DerivedView added: New (only in the files: starts as revision 1 once applied)",
        "  StreamJob old-job: Removed (only in the cluster: applying the files leaves it running; "
        "deleting it stops its application, and its output log's data stays unless its policy "
        "says Delete)",
        "  unchanged: DerivedView per-user (revision 1), StreamJob sessions (no revision yet)",
        "Logs against the cluster:",
        "  ~ clicks: partitions: 2 -> 4",
        "  + fresh: only in the files (created once applied)",
        "  - stale: only in the cluster (applying the files leaves it and its topic)",
    ]
    empty = ClusterComparison((), (), ())
    assert render_cluster(empty, ClusterView("s", ("a", "b"), {})).splitlines() == [
        "Changes against the cluster at s, namespaces a, b:",
        "  none",
        "Logs against the cluster:",
        "  no differences",
    ]
