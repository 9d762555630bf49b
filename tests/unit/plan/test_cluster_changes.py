"""Files against what a cluster holds and runs: the before-pipeline from API bodies, each view's
and job's change set against its revisions, the reprocess cascading downstream, and the Logs
only on one side."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from distributary.api import parse_resource
from distributary.api.job import StreamJob
from distributary.graph import Declared, Pipeline, Ref
from distributary.plan.edits.cluster_changes import (
    ClusterComparison,
    NamespaceResources,
    cluster_changes,
    cluster_pipeline,
)
from distributary.plan.edits.file_changes import PlannedChange
from distributary.plan.pipelines.pipeline import job_revision_hash
from distributary.plan.revisions.classify import revision_hash, view_definition
from distributary.plan.views.view_plan import VIEW_LABEL, serving_log

NS = "shop"
API = "distributary.dev/v1alpha1"
URLS_SQL = "SELECT user, url FROM c"
COUNTS_SQL = "SELECT user, COUNT(*) AS n FROM u GROUP BY user"


def log(name: str, partitions: int = 2, **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": API,
        "kind": "Log",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"partitions": partitions, "schema": "user STRING, url STRING"},
    }
    if status:
        body["status"] = status
    return body


def child(view: str, topic: str) -> dict[str, Any]:
    """A view's output Log as the operator creates it, serving `topic`."""
    body = log(view, topicName=topic)
    body["metadata"]["labels"] = {VIEW_LABEL: view}
    return body


def view(name: str, reads: str, sql: str, **spec: Any) -> dict[str, Any]:
    alias = "c" if reads == "clicks" else "u"
    return {
        "apiVersion": API,
        "kind": "DerivedView",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"inputs": [{"log": reads, "alias": alias}], "sql": sql, **spec},
    }


def job(arguments: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "StreamJob",
        "metadata": {"name": "sessions", "namespace": NS},
        "spec": {
            "image": "example/sessions:1",
            "mainApplicationFile": "local:///app/sessions.py",
            "arguments": arguments,
            "inputs": [{"log": "clicks"}],
            "outputs": [{"log": "session-log"}],
            "upgrade": {"strategy": "Reprocess"},
            **spec,
        },
    }


def rows(*revisions: tuple[int, str, str]) -> dict[str, Any]:
    """A view's status: (revision, spec hash, phase) rows; the Serving one is servingRevision."""
    serving = next(r for r, _, phase in revisions if phase == "Serving")
    return {
        "servingRevision": serving,
        "revisions": [
            {"revision": r, "specHash": h, "phase": p, "topic": f"t.r{r}"} for r, h, p in revisions
        ],
    }


def served_hash(cluster: NamespaceResources, name: str) -> str:
    """The hash the operator computes for view `name` as the cluster holds it."""
    before = cluster_pipeline(cluster)
    ref = Ref("DerivedView", NS, name)
    inputs = {
        a: serving_log(item, before.children, before.pipeline) or item
        for a, item in before.pipeline.inputs(ref).items()
    }
    return revision_hash(view_definition(before.pipeline.views[ref], inputs))


def running_cluster(urls_sql: str = URLS_SQL, **urls_spec: Any) -> NamespaceResources:
    """clicks -> urls (revision 2 serves, topic urls.r2) -> per-user (revision 1 serves), and
    the job sessions (revision 1), each with the status the operator writes."""
    logs = (log("clicks", topicName="clicks"), log("session-log"), child("urls", "urls.r2"))
    urls = view("urls", "clicks", urls_sql, **urls_spec)
    counts = view("per-user", "urls", COUNTS_SQL, output={"mode": "upsert", "key": ["user"]})
    sessions = job(["--gap", "30m"])
    bare = NamespaceResources(logs, (urls, counts), (sessions,))
    urls["status"] = rows((1, "0ld0ld0ld0ld", "Retired"), (2, served_hash(bare, "urls"), "Serving"))
    counts["status"] = rows((1, served_hash(bare, "per-user"), "Serving"))
    sessions["status"] = {"revision": 1, "specHash": job_revision_hash(_job_spec(sessions))}
    return NamespaceResources(logs, (urls, counts), (sessions,))


def _job_spec(body: Mapping[str, Any]) -> Any:
    return StreamJob.model_validate(body).spec


def files(*bodies: Mapping[str, Any]) -> Pipeline:
    """The files' pipeline: bodies without status, as a person writes them."""
    cleaned = []
    for body in bodies:
        kept = {k: copy.deepcopy(v) for k, v in body.items() if k != "status"}
        cleaned.append(Declared(parse_resource(kept), "pipeline.yaml"))
    pipeline = Pipeline.build(cleaned)
    assert pipeline.ok, pipeline.problems
    return pipeline


def same_files(cluster: NamespaceResources) -> list[Mapping[str, Any]]:
    declared = [b for b in cluster.logs if VIEW_LABEL not in b["metadata"].get("labels", {})]
    return [*declared, *cluster.views, *cluster.jobs]


def editable(body: Mapping[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(dict(body))


def compare(cluster: NamespaceResources, *bodies: Mapping[str, Any]) -> ClusterComparison:
    return cluster_changes(files(*bodies), {NS: cluster})


def change_of(comparison: ClusterComparison, kind: str, name: str) -> PlannedChange:
    return next(c for c in comparison.changes if (c.ref.kind, c.ref.name) == (kind, name))


def test_the_before_pipeline_keeps_child_logs_out_of_the_graph_with_their_topic() -> None:
    before = cluster_pipeline(running_cluster())
    urls_log = Ref.log("urls", NS)
    assert before.pipeline.is_derived(urls_log)  # derived again from the view, not declared
    assert before.children["urls"].topic_name == "urls.r2"
    assert before.statuses[Ref("DerivedView", NS, "urls")]["servingRevision"] == 2
    assert before.statuses[Ref("StreamJob", NS, "sessions")]["revision"] == 1
    assert before.invalid == {}


def test_files_equal_to_the_cluster_change_nothing_and_name_each_revision() -> None:
    cluster = running_cluster()
    found = compare(cluster, *same_files(cluster))
    assert found.changes == ()
    assert found.logs == ()
    revisions = {(c.ref.kind, c.ref.name): c.revision for c in found.unchanged}
    assert revisions == {
        ("DerivedView", "urls"): 2,
        ("DerivedView", "per-user"): 1,
        ("StreamJob", "sessions"): 1,
    }


def test_a_new_definition_reprocesses_as_the_next_revision_and_readers_follow() -> None:
    cluster = running_cluster()
    edited = view("urls", "clicks", "SELECT user, lower(url) AS url FROM c")
    found = compare(cluster, *[b for b in same_files(cluster) if b["kind"] != "DerivedView"],
                    edited, cluster.views[1])  # fmt: skip
    urls = change_of(found, "DerivedView", "urls")
    assert (urls.kind, urls.revision, urls.starts) == ("Reprocess", 2, 3)
    assert urls.reasons[0].startswith("sql changed")
    assert urls.notes[0].startswith("cluster: revision 2 serves (")
    assert urls.notes[1].startswith("then: revision 3 reprocesses beside revision 2")
    downstream = change_of(found, "DerivedView", "per-user")
    assert (downstream.kind, downstream.revision, downstream.starts) == ("Reprocess", 1, 2)
    assert any("now serves topic urls.r3 (was urls.r2)" in r for r in downstream.reasons)
    assert downstream.notes[1] == (
        "then: once DerivedView urls cuts over to revision 3 (a new input topic), revision 2 "
        "reprocesses beside revision 1, which serves until it has caught up"
    )
    assert [c.ref.name for c in found.unchanged] == ["sessions"]


def test_an_edit_downstream_and_the_cutover_upstream_start_two_revisions() -> None:
    cluster = running_cluster()
    edited_urls = view("urls", "clicks", "SELECT user, lower(url) AS url FROM c")
    edited_counts = editable(cluster.views[1])
    edited_counts["spec"]["sql"] = "SELECT user, COUNT(url) AS n FROM u GROUP BY user"
    found = compare(cluster, log("clicks"), log("session-log"), edited_urls, edited_counts,
                    cluster.jobs[0])  # fmt: skip
    downstream = change_of(found, "DerivedView", "per-user")
    assert downstream.starts == 3
    assert downstream.notes[1] == (
        "then: revision 2 reprocesses beside revision 1 now, and once DerivedView urls cuts over "
        "to revision 3 (a new input topic), revision 3 does"
    )


def test_a_settings_change_restarts_the_serving_revision_in_place() -> None:
    cluster = running_cluster()
    tuned = editable(cluster.views[0])
    tuned["spec"]["spark"] = {"executor": {"instances": 4}}
    found = compare(cluster, *same_files(cluster)[:2], tuned, cluster.views[1], cluster.jobs[0])
    urls = change_of(found, "DerivedView", "urls")
    assert (urls.kind, urls.revision, urls.starts) == ("RestartInPlace", 2, None)
    assert "then: revision 2 restarts from its checkpoint" in urls.notes
    assert "per-user" in [c.ref.name for c in found.unchanged]


def test_going_back_to_the_serving_definition_retires_the_catch_up() -> None:
    edit = "SELECT user, lower(url) AS url FROM c"
    serving = running_cluster()  # URLS_SQL serves as revision 2
    catching = running_cluster(edit)  # the cluster's spec: an edit catching up as revision 3
    urls = editable(catching.views[0])
    urls["status"] = rows(
        (2, served_hash(serving, "urls"), "Serving"),
        (3, served_hash(catching, "urls"), "CatchingUp"),
    )
    cluster = NamespaceResources(serving.logs, (urls, serving.views[1]), serving.jobs)
    found = compare(cluster, *same_files(serving))
    change = change_of(found, "DerivedView", "urls")
    assert (change.kind, change.revision, change.starts) == ("Ignore", 2, None)
    assert "revision 3's catch-up retires" in change.reasons[0]
    assert "revision 3 is catching up" in change.notes[0]


@pytest.mark.parametrize(
    ("strategy", "kind", "starts"), [("Reprocess", "Reprocess", 3), ("InPlace", "Forbidden", None)]
)
def test_an_edit_from_a_spec_that_does_not_run_is_reprocessed(
    strategy: str, kind: str, starts: int | None
) -> None:
    refused = running_cluster("SELECT user, url, 1 AS one FROM c")
    urls = editable(refused.views[0])
    urls["status"] = rows((2, "5e1fe5e1fe5e", "Serving"))  # another definition serves
    cluster = NamespaceResources(refused.logs, (urls, refused.views[1]), refused.jobs)
    edited = view("urls", "clicks", "SELECT user FROM c", upgrade={"strategy": strategy})
    found = compare(cluster, log("clicks"), log("session-log"), edited, cluster.views[1],
                    cluster.jobs[0])  # fmt: skip
    change = change_of(found, "DerivedView", "urls")
    assert (change.kind, change.starts) == (kind, starts)
    assert change.reasons[0].startswith("the cluster's spec is not what runs")


def test_a_view_the_operator_has_not_run_says_so() -> None:
    cluster = running_cluster()
    bare = editable(cluster.views[0])
    del bare["status"]
    cluster = NamespaceResources(cluster.logs, (bare, cluster.views[1]), cluster.jobs)
    found = compare(cluster, *same_files(cluster))
    urls = next(c for c in found.unchanged if c.ref.name == "urls")
    assert urls.revision is None
    assert urls.notes == ("cluster: no revision recorded yet (the operator has not started it)",)


def test_resources_only_on_one_side_and_a_changed_log() -> None:
    cluster = running_cluster()
    gone = view("gone", "clicks", URLS_SQL)
    gone["status"] = rows((4, "a1a1a1a1a1a1", "Serving"))
    stale = log("stale")
    cluster = NamespaceResources((*cluster.logs, stale), (*cluster.views, gone), cluster.jobs)
    added = view("added", "clicks", URLS_SQL)
    found = compare(cluster, log("clicks", partitions=4), log("session-log"), log("fresh"),
                    *cluster.views[:2], added, cluster.jobs[0])  # fmt: skip
    new = change_of(found, "DerivedView", "added")
    assert (new.kind, new.starts) == ("New", 1)
    removed = change_of(found, "DerivedView", "gone")
    assert (removed.kind, removed.revision) == ("Removed", 4)
    logs = {(d.ref.name, d.kind): d.fields for d in found.logs}
    assert logs == {
        ("clicks", "Changed"): ("partitions: 2 -> 4",),
        ("fresh", "OnlyInFiles"): (),
        ("stale", "OnlyInCluster"): (),
    }


def test_a_job_reprocesses_as_its_next_revision_or_restarts_when_only_resources_change() -> None:
    cluster = running_cluster()
    declared = same_files(cluster)[:-1]
    found = compare(cluster, *declared, job(["--gap", "10m"]))
    sessions = change_of(found, "StreamJob", "sessions")
    assert (sessions.kind, sessions.revision, sessions.starts) == ("Reprocess", 1, 2)
    assert (
        sessions.notes[0] == f"cluster: revision 1 runs ({cluster.jobs[0]['status']['specHash']})"
    )
    resized = job(["--gap", "30m"], spark={"executor": {"instances": 3}})
    sessions = change_of(compare(cluster, *declared, resized), "StreamJob", "sessions")
    assert (sessions.kind, sessions.starts) == ("RestartInPlace", None)


def test_a_namespace_with_nothing_yet_makes_everything_new() -> None:
    cluster = running_cluster()
    found = cluster_changes(files(*same_files(cluster)), {})
    assert {(c.ref.name, c.kind) for c in found.changes} == {
        ("urls", "New"),
        ("per-user", "New"),
        ("sessions", "New"),
    }
    assert {d.kind for d in found.logs} == {"OnlyInFiles"}


def test_files_repeating_a_refused_spec_change_nothing() -> None:
    refused = running_cluster("SELECT user, url, 1 AS one FROM c")
    urls = editable(refused.views[0])
    urls["status"] = {
        **rows((2, "5e1fe5e1fe5e", "Serving")),
        "lastChange": {"generation": 3, "classification": "Forbidden", "reasons": ["..."]},
    }
    cluster = NamespaceResources(refused.logs, (urls, refused.views[1]), refused.jobs)
    change = change_of(compare(cluster, *same_files(cluster)), "DerivedView", "urls")
    assert (change.kind, change.revision, change.starts) == ("Ignore", 2, None)
    assert "which does not run (last classified Forbidden)" in change.reasons[0]
    assert change.notes[-1] == "then: revision 2 keeps serving"
