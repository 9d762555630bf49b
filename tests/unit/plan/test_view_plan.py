"""A view planned in its namespace as the API server holds it: children, inputs, revisions."""

from __future__ import annotations

from typing import Any

from distributary.api.view import DerivedView
from distributary.plan.applications.children import holds
from distributary.plan.revisions.classify import Classification
from distributary.plan.views.view_plan import (
    CATCH_UP_BATCH,
    SERVING_ANNOTATION,
    VIEW_LABEL,
    namespace_pipeline,
    plan_view,
    planning_bodies,
)

NS = "shop"


def log(name: str, schema: str = "user STRING, n INT", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name, "namespace": NS, **meta},
        "spec": {"partitions": 2, "schema": schema},
    }


def view(name: str, reads: str, sql: str, mode: str = "append", **output: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {
            "inputs": [{"log": reads, "alias": "src"}],
            "sql": sql,
            "output": {"mode": mode, **output},
        },
    }


def child(name: str, view_name: str, topic: str | None) -> dict[str, Any]:
    body = log(name, labels={VIEW_LABEL: view_name})
    body["status"] = {"topicName": topic} if topic else {}
    return body


def planned(
    logs: list[dict[str, Any]],
    views: list[dict[str, Any]],
    which: str,
    previous: Any = None,
    generation: int = 1,
    change: Classification | None = None,
) -> Any:
    pipeline, children, _ = namespace_pipeline(logs, views)
    body = next(v for v in views if v["metadata"]["name"] == which)
    return plan_view(
        pipeline,
        children,
        DerivedView.model_validate(body),
        previous,
        checkpoint_root="s3a://bucket/ck",
        bootstrap_servers="kafka:9092",
        change=change,
        generation=generation,
    )


def test_a_new_view_starts_revision_1_with_its_topics_child_log_and_runner() -> None:
    plan = planned(
        [log("clicks")], [view("big", "clicks", "SELECT user, n FROM src WHERE n > 1")], "big"
    )
    assert (plan.revision, plan.starts, plan.problems, plan.waiting) == (1, True, (), ())
    assert [t.name for t in plan.topics] == ["big.r1", "distributary.shop.big.dlq"]
    assert plan.runner is not None
    assert plan.runner.consumer_group == "distributary.shop.big.r1"
    assert plan.runner.checkpoint_location == "s3a://bucket/ck/shop/big/uid-big/r1"
    assert plan.runner.bootstrap_servers == "kafka:9092"
    assert plan.runner.inputs[0].topic == "clicks"
    manifest = plan.output_log
    assert manifest is not None
    assert manifest["metadata"]["labels"][VIEW_LABEL] == "big"
    assert manifest["metadata"]["annotations"][SERVING_ANNOTATION] == "1"
    owner = manifest["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "DerivedView",
        "big",
        "uid-big",
        True,
    )
    assert manifest["spec"]["schema"] == "user STRING, n INT"


def test_a_missing_input_stalls_the_view_naming_the_log() -> None:
    plan = planned([], [view("big", "nowhere", "SELECT user FROM src")], "big")
    assert plan.runner is None
    assert plan.problems
    assert "nowhere" in plan.problems[0].message


def test_a_view_of_a_view_waits_for_the_upstream_topic_then_reads_it() -> None:
    views = [
        view("big", "clicks", "SELECT user, n FROM src"),
        view(
            "per-user",
            "big",
            "SELECT user, count(*) AS c FROM src GROUP BY user",
            "upsert",
            key=["user"],
        ),
    ]
    waiting = planned([log("clicks"), child("big", "big", None)], views, "per-user")
    assert waiting.runner is None
    assert waiting.waiting[0].reason == "WaitingForInput"
    ready = planned([log("clicks"), child("big", "big", "big.r1")], views, "per-user")
    assert ready.runner is not None
    assert ready.runner.inputs[0].topic == "big.r1"


def test_a_cycle_across_views_stalls_each_view() -> None:
    views = [view("a", "b", "SELECT user, n FROM src"), view("b", "a", "SELECT user, n FROM src")]
    plan = planned([], views, "a")
    assert plan.runner is None
    assert any("cycle" in p.message for p in plan.problems)


def test_a_running_revision_is_not_started_again() -> None:
    views = [view("big", "clicks", "SELECT user, n FROM src")]
    first = planned([log("clicks")], views, "big")
    row = {"revision": 1, "specHash": first.spec_hash, "phase": "Serving"}
    previous = {"servingRevision": 1, "revisions": [row]}
    again = planned([log("clicks")], views, "big", previous)
    assert again.starts is False
    assert again.runner == first.runner


def test_an_unclassified_change_leaves_the_serving_revision_running_and_says_so() -> None:
    row = {"revision": 1, "specHash": "0123456789ab", "phase": "Serving"}
    previous = {"servingRevision": 1, "revisions": [row], "observedGeneration": 1}
    plan = planned(
        [log("clicks")], [view("big", "clicks", "SELECT user FROM src")], "big", previous, 2
    )
    assert plan.runner is None  # the serving revision's application is left as it is
    assert [w.reason for w in plan.waiting] == ["ChangePending"]


def test_a_reprocess_starts_the_next_revision_from_the_start_of_its_inputs() -> None:
    row = {"revision": 1, "specHash": "0123456789ab", "phase": "Serving"}
    previous = {"servingRevision": 1, "revisions": [row], "observedGeneration": 1}
    change = Classification("Reprocess", ("sql changed",))
    views = [view("big", "clicks", "SELECT user FROM src")]
    plan = planned([log("clicks")], views, "big", previous, 2, change)
    assert plan.runner is not None
    assert (plan.revision, plan.runner.revision, plan.starts) == (1, 2, True)
    assert plan.runner.output is not None
    assert plan.runner.output.topic == "big.r2"
    assert plan.runner.consumer_group == "distributary.shop.big.r2"
    assert [s.starting_position.kind for s in plan.runner.inputs] == ["earliest"]
    assert [t.name for t in plan.topics] == ["big.r2", "distributary.shop.big.dlq"]
    assert plan.output_log is not None
    assert plan.output_log["metadata"]["annotations"][SERVING_ANNOTATION] == "1"
    # Its history is read in bounded batches, so that its progress shows as it goes.
    assert plan.runner.max_offsets_per_trigger == CATCH_UP_BATCH
    first = planned([log("clicks")], views, "big")
    assert first.runner is not None
    assert first.runner.max_offsets_per_trigger is None  # revision 1: as the spec says
    views[0]["spec"]["spark"] = {"maxOffsetsPerTrigger": 1000}
    chosen = planned([log("clicks")], views, "big", previous, 2, change)
    assert chosen.runner is not None
    assert chosen.runner.max_offsets_per_trigger == 1000  # the spec's own limit wins


def test_an_upstream_cutover_makes_a_reader_reprocess_without_an_edit() -> None:
    views = [
        view("up", "clicks", "SELECT user, n FROM src"),
        view("big", "up", "SELECT * FROM src"),
    ]
    before = [log("clicks"), child("up", "up", "up.r1")]
    first = planned(before, views, "big")
    row = {"revision": 1, "specHash": first.spec_hash, "phase": "Serving"}
    previous = {"servingRevision": 1, "revisions": [row], "observedGeneration": 4}
    assert planned(before, views, "big", previous, 4).starts is False
    # The spec is as observed (generation 4); the upstream view now serves revision 2.
    after = [log("clicks"), child("up", "up", "up.r2")]
    moved = planned(after, views, "big", previous, 4)
    assert moved.starts is True
    assert moved.runner.revision == 2
    assert [s.topic for s in moved.runner.inputs] == ["up.r2"]
    assert moved.lifecycle.change.kind == "Reprocess"
    # An edit not yet classified (generation 5 unseen) waits for its handler instead.
    assert planned(after, views, "big", previous, 5).runner is None


def test_a_refused_edit_stays_refused_when_observed_again_without_its_handler() -> None:
    views = [view("big", "clicks", "SELECT user FROM src")]
    row = {"revision": 1, "specHash": "0123456789ab", "phase": "Serving"}
    refused = {
        "generation": 2,
        "classification": "Forbidden",
        "reasons": ["output.log changed from a to b: it is immutable"],
    }
    previous = {
        "servingRevision": 1,
        "revisions": [row],
        "observedGeneration": 2,
        "lastChange": refused,
    }
    again = planned([log("clicks")], views, "big", previous, 2)
    assert again.runner is None
    assert [p.reason for p in again.problems] == ["ChangeForbidden"]


def test_the_namespace_graph_is_reused_only_for_the_same_resource_versions() -> None:
    logs = [log("clicks", resourceVersion="10")]
    views = [view("big", "clicks", "SELECT user, n FROM src")]
    views[0]["metadata"]["resourceVersion"] = "11"
    first, _, _ = namespace_pipeline(logs, views)
    again, _, _ = namespace_pipeline(logs, views)
    assert again is first  # the observer plans every view of a namespace from one listing
    views[0]["metadata"]["resourceVersion"] = "12"
    views[0]["spec"]["sql"] = "SELECT user FROM src"
    changed, _, _ = namespace_pipeline(logs, views)
    assert changed is not first
    assert next(iter(changed.views.values())).spec.sql == "SELECT user FROM src"
    bare = [log("clicks")]  # no resourceVersion (files, tests): never kept
    assert namespace_pipeline(bare, [])[0] is not namespace_pipeline(bare, [])[0]


def names(bodies: list[dict[str, Any]]) -> list[str]:
    return sorted(str(b["metadata"]["name"]) for b in bodies)


def job(name: str, reads: list[str], writes: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "StreamJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "file": "local:///jobs/job.py",
            "inputs": [{"log": n} for n in reads],
            "outputs": [{"log": n} for n in writes],
        },
    }


def test_a_view_is_planned_from_its_lineage_not_its_whole_namespace() -> None:
    logs = [log(f"log-{i}") for i in range(50)] + [
        child("sums", "sums", "sums.r1"),
        child("top", "top", "top.r1"),
        log("enriched"),
    ]
    writers = [
        view("sums", "log-1", "SELECT user, n FROM src"),
        view("top", "sums", "SELECT user FROM src"),  # reads sums: downstream of it
        view("other", "log-2", "SELECT user FROM src"),
        job("enrich", ["log-3"], ["enriched"]),
        view("late", "enriched", "SELECT user FROM src"),
    ]
    top = writers[1]
    found_logs, found = planning_bodies(logs, writers, top)
    assert names(found) == ["sums", "top"]  # its upstream view; not other, not late
    assert names(found_logs) == ["log-1", "sums", "top"]  # inputs upstream, its own output
    sums_logs, sums = planning_bodies(logs, writers, writers[0])
    assert (names(sums_logs), names(sums)) == (["log-1", "sums"], ["sums"])
    late_logs, late = planning_bodies(logs, writers, writers[4])
    assert names(late) == ["enrich", "late"]  # a job writing an input is upstream too
    assert names(late_logs) == ["enriched", "log-3"]  # no child Log yet: not started
    # Planned from that part alone, the view has the plan it has in the whole namespace.
    whole = planned(logs, writers, "top")
    pipeline, children, _ = namespace_pipeline(found_logs, found)
    alone = plan_view(
        pipeline,
        children,
        DerivedView.model_validate(top),
        None,
        checkpoint_root="s3a://bucket/ck",
        bootstrap_servers="kafka:9092",
        generation=1,
    )
    assert alone.runner == whole.runner
    assert alone.output_log == whole.output_log


def test_the_lineage_holds_what_makes_a_view_fail() -> None:
    # A cycle through the view, across two views.
    writers = [view("a", "b", "SELECT user, n FROM src"), view("b", "a", "SELECT user, n FROM src")]
    writers.append(view("c", "a", "SELECT user FROM src"))  # downstream of the cycle only
    logs, found = planning_bodies([], writers, writers[0])
    assert names(found) == ["a", "b"]
    pipeline, _, _ = namespace_pipeline(logs, found)
    assert any("cycle" in p.message for p in pipeline.problems if p.resource.endswith("/a"))
    # A Log, or another view, claiming the view's output name.
    taken = [log("clicks"), log("big")]
    writers = [view("big", "clicks", "SELECT user FROM src"), view("copy", "clicks",
               "SELECT user FROM src", log="big")]  # fmt: skip
    logs, found = planning_bodies(taken, writers, writers[0])
    assert names(logs) == ["big", "clicks"]
    assert names(found) == ["big", "copy"]
    # A missing input stays missing, and a spec that does not parse names nothing more.
    logs, found = planning_bodies(
        [log("x")], [view("v", "nowhere", "SELECT 1")], view("v", "nowhere", "SELECT 1")
    )
    assert (names(logs), names(found)) == ([], ["v"])
    broken = {"kind": "DerivedView", "metadata": {"name": "b"}, "spec": {"inputs": "clicks"}}
    assert planning_bodies([log("clicks")], [], broken) == ([], [broken])


def test_an_output_log_is_applied_again_only_when_the_server_lacks_part_of_it() -> None:
    views = [view("big", "clicks", "SELECT user, n FROM src")]
    manifest = planned([log("clicks")], views, "big").output_log
    assert manifest is not None
    assert not holds(None, manifest)  # not made yet
    current = {
        **manifest,
        "metadata": {**manifest["metadata"], "uid": "u-9", "resourceVersion": "7"},
        "spec": {**manifest["spec"], "deletionPolicy": "Retain"},  # a default the server adds
        "status": {"topicName": "big.r1"},
    }
    assert holds(current, manifest)
    moved = {**manifest["metadata"]["annotations"], SERVING_ANNOTATION: "2"}
    assert not holds(
        current, {**manifest, "metadata": {**manifest["metadata"], "annotations": moved}}
    )
    edited = {**current, "spec": {**current["spec"], "partitions": 9}}  # drifted: applied again
    assert not holds(edited, manifest)
    assert not holds({**current, "metadata": {"name": "big"}}, manifest)
