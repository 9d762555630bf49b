"""`distributary plan --against-cluster` on a real API server.

The resources are applied with the real kubectl, and each view's status (and its output Log, a
child labelled with the view) is written through the status subresource as the operator writes
it, with the spec hash the operator computes. No operator, Kafka or Spark is needed: the command
only reads. It runs as a person runs it, a separate process with a kubeconfig.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.kube.operator_harness import Cluster

from distributary.graph import Ref
from distributary.kube.resources import Kube
from distributary.plan.revisions.classify import revision_hash, view_definition
from distributary.plan.views.view_plan import VIEW_LABEL, namespace_pipeline, serving_log
from distributary.processes import free_port

NAMESPACE = "plan-cluster-test"
API = "distributary.dev/v1alpha1"
SCHEMA = "user_id STRING, url STRING"


def log(name: str, partitions: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Log",
        "metadata": {"name": name},
        "spec": {"partitions": partitions, "schema": SCHEMA},
    }


def view(name: str, reads: str, sql: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "DerivedView",
        "metadata": {"name": name},
        "spec": {"inputs": [{"log": reads, "alias": "src"}], "sql": sql},
    }


def child(view_name: str) -> dict[str, Any]:
    """A view's output Log as the operator creates it."""
    body = log(view_name)
    body["metadata"]["labels"] = {VIEW_LABEL: view_name}
    return body


URLS = view("urls", "clicks", "SELECT user_id, url FROM src")
PER_USER = view("per-user", "urls", "SELECT user_id, url FROM src WHERE url IS NOT NULL")
GONE = view("gone", "clicks", "SELECT url FROM src")


def operator_hash(kube: Kube, name: str) -> str:
    """The spec hash the operator computes for view `name` as the API server holds it."""
    pipeline, children, _ = namespace_pipeline(
        kube.list(API, "Log", NAMESPACE), kube.list(API, "DerivedView", NAMESPACE)
    )
    ref = Ref("DerivedView", NAMESPACE, name)
    inputs = {a: serving_log(i, children, pipeline) or i for a, i in pipeline.inputs(ref).items()}
    return revision_hash(view_definition(pipeline.views[ref], inputs))


def serve(kube: Kube, name: str, revision: int) -> str:
    """Write the status of view `name` serving `revision` (earlier ones retired), and of its
    output Log serving that revision's topic; the revision's spec hash."""
    topic = f"{name}.r{revision}"
    kube.patch_status(API, "Log", NAMESPACE, name, {"topicName": topic})
    spec_hash = operator_hash(kube, name)
    rows = [
        {"revision": r, "specHash": "0" * 12, "phase": "Retired", "topic": f"{name}.r{r}"}
        for r in range(1, revision)
    ]
    rows.append({"revision": revision, "specHash": spec_hash, "phase": "Serving", "topic": topic})
    status = {"servingRevision": revision, "revisions": rows, "outputTopic": topic}
    kube.patch_status(API, "DerivedView", NAMESPACE, name, status)
    return spec_hash


@pytest.fixture(scope="module")
def running(cluster: Cluster) -> dict[str, str]:
    """clicks -> urls (revision 2 serves) -> per-user (revision 1); gone (revision 1) and the
    Log stale exist only in the cluster. The serving spec hashes by view."""
    cluster.apply(log("clicks"), log("stale"), URLS, PER_USER, GONE, *map(child, ("urls", "gone")))
    cluster.apply(child("per-user"))
    with Kube(cluster.kubeconfig) as kube:
        hashes = {"urls": serve(kube, "urls", 2), "gone": serve(kube, "gone", 1)}
        hashes["per-user"] = serve(kube, "per-user", 1)  # reads urls.r2
    return hashes


def plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distributary.cli", "plan", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def write(folder: Path, *documents: dict[str, Any]) -> Path:
    folder.mkdir()
    (folder / "pipeline.yaml").write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return folder


def report(stdout: str) -> list[str]:
    return stdout[stdout.index("Changes against the cluster") :].splitlines()


def test_an_edit_is_classified_against_the_revisions_the_cluster_runs(
    cluster: Cluster, running: dict[str, str], tmp_path: Path
) -> None:
    edited = view("urls", "clicks", "SELECT user_id, lower(url) AS url FROM src")
    added = view("added", "clicks", "SELECT user_id FROM src")
    files = write(tmp_path / "edited", log("clicks", 4), log("fresh"), edited, PER_USER, added)
    done = plan(str(files), "--against-cluster", "--kubeconfig", str(cluster.kubeconfig),
                "--namespace", NAMESPACE)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = report(done.stdout)
    assert lines[0].endswith(f", namespace {NAMESPACE}:")
    at = lines.index("  DerivedView urls: Reprocess (recomputed beside the serving revision, "
                     "which readers keep until cutover)")  # fmt: skip
    assert lines[at + 1] == f"      cluster: revision 2 serves ({running['urls']})"
    assert lines[at + 2].startswith("      then: revision 3 reprocesses beside revision 2")
    assert lines[at + 3].startswith("      - sql changed")
    at = next(i for i, line in enumerate(lines) if line.startswith("  DerivedView per-user:"))
    assert lines[at].startswith("  DerivedView per-user: Reprocess")
    assert lines[at + 1 : at + 3] == [
        f"      cluster: revision 1 serves ({running['per-user']})",
        "      then: once DerivedView urls cuts over to revision 3 (a new input topic), "
        "revision 2 reprocesses beside revision 1, which serves until it has caught up",
    ]
    assert "serves topic urls.r3 (was urls.r2)" in lines[at + 3]
    assert (
        "  DerivedView added: New (only in the files: starts as revision 1 once applied)" in lines
    )
    assert any(
        line.startswith("  DerivedView gone: Removed (only in the cluster") for line in lines
    )
    logs = lines[lines.index("Logs against the cluster:") + 1 :]
    assert logs == [
        "  ~ clicks: partitions: 2 -> 4",
        "  + fresh: only in the files (created once applied)",
        "  - stale: only in the cluster (applying the files leaves it and its topic)",
    ]
    assert "reading namespace plan-cluster-test from the API server at https://" in done.stderr


def test_the_files_that_run_change_nothing_in_the_contexts_namespace(
    cluster: Cluster, running: dict[str, str], tmp_path: Path
) -> None:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for item in config["contexts"]:
        item["context"]["namespace"] = NAMESPACE  # as `kubectl config set-context --current`
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    files = write(tmp_path / "same", log("clicks"), log("stale"), URLS, PER_USER, GONE)
    done = plan(str(files), "--against-cluster", "--kubeconfig", str(kubeconfig))
    assert done.returncode == 0, done.stderr
    assert report(done.stdout) == [
        f"Changes against the cluster at {config['clusters'][0]['cluster']['server']}, "
        f"namespace {NAMESPACE}:",
        "  unchanged: DerivedView gone (revision 1), DerivedView urls (revision 2), "
        "DerivedView per-user (revision 1)",
        "Logs against the cluster:",
        "  no differences",
    ]


def test_an_unreachable_cluster_is_one_line_naming_the_fix(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    server = f"https://127.0.0.1:{free_port()}"  # nothing listens there
    config["clusters"][0]["cluster"]["server"] = server
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    files = write(tmp_path / "files", log("clicks"), URLS)
    started = time.monotonic()
    done = plan(str(files), "--against-cluster", "--kubeconfig", str(kubeconfig))
    assert time.monotonic() - started < 30
    assert done.returncode == 1
    assert done.stdout == ""
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: cannot reach the API server at {server} (")
    assert "Connection refused" in error
    assert error.endswith("check that the cluster is up and that the kubeconfig and context "
                          "point at it (--kubeconfig, --context)")  # fmt: skip
    assert "Traceback" not in done.stderr
