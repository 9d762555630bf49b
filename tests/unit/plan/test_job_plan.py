"""A StreamJob planned in its namespace: its revision, application, and how edits run."""

from __future__ import annotations

from typing import Any

from tests.unit.plan.test_view_plan import child, log, view

from distributary.api.job import StreamJob
from distributary.plan.jobs.job_plan import JobPlan, plan_job
from distributary.plan.pipelines.pipeline import job_revision_hash
from distributary.plan.views.view_plan import namespace_pipeline

NS = "shop"


def job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "StreamJob",
        "metadata": {"name": "enrich", "namespace": NS, "uid": "uid-enrich"},
        "spec": {
            "image": "registry/enrich:1",
            "mainApplicationFile": "local:///app/enrich.py",
            "inputs": [{"log": "clicks"}],
            "outputs": [{"log": "enriched"}],
            **spec,
        },
    }


def planned(
    body: dict[str, Any],
    previous: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    logs: list[dict[str, Any]] | None = None,
    views: list[dict[str, Any]] | None = None,
) -> JobPlan:
    found = logs if logs is not None else [log("clicks"), log("visits"), log("enriched")]
    pipeline, children, _ = namespace_pipeline(found, [*(views or []), body])
    return plan_job(
        pipeline,
        children,
        StreamJob.model_validate(body),
        previous,
        checkpoint_root="s3a://bucket/ck",
        bootstrap_servers="kafka:9092",
        old=StreamJob.model_validate(old) if old else None,
    )


def running(body: dict[str, Any], revision: int = 1) -> dict[str, Any]:
    """The status of `body` running as `revision`."""
    return {
        "revision": revision,
        "specHash": job_revision_hash(StreamJob.model_validate(body).spec),
        "inputs": [{"log": i["log"]} for i in body["spec"]["inputs"]],
    }


def env(plan: JobPlan) -> dict[str, str]:
    assert plan.application is not None
    return dict(plan.application["spec"]["driver"]["envVars"])


def test_a_new_job_starts_revision_1_with_its_facts_in_the_environment() -> None:
    plan = planned(job())
    assert (plan.revision, plan.starts, plan.problems, plan.change) == (1, True, (), None)
    assert plan.consumer_group == "distributary.shop.enrich.r1"
    assert [(i.log, i.topic) for i in plan.inputs] == [("clicks", "clicks")]
    assert plan.application is not None
    assert plan.application["metadata"]["name"] == "enrich-job-r1"
    assert plan.application["metadata"]["ownerReferences"][0]["uid"] == "uid-enrich"
    facts = env(plan)
    assert facts["DISTRIBUTARY_INPUT_CLICKS_TOPIC"] == "clicks"
    assert facts["DISTRIBUTARY_OUTPUT_ENRICHED_TOPIC"] == "enriched"
    assert facts["DISTRIBUTARY_CHECKPOINT_LOCATION"] == "s3a://bucket/ck/shop/enrich/r1"
    assert facts["DISTRIBUTARY_PROGRESS_TOPIC"] == "distributary.progress"
    assert (facts["DISTRIBUTARY_NAMESPACE"], facts["DISTRIBUTARY_NAME"]) == ("shop", "enrich")


def test_a_running_job_is_not_started_again() -> None:
    plan = planned(job(), running(job()))
    assert (plan.revision, plan.starts, plan.change) == (1, False, None)


def test_a_missing_log_stalls_the_job_naming_it() -> None:
    plan = planned(job(outputs=[{"log": "nowhere"}]))
    assert plan.launch is None
    assert [p.reason for p in plan.problems] == ["InvalidSpec"]
    assert "nowhere" in plan.problems[0].message


def test_a_job_reading_a_view_waits_for_its_topic_then_reads_the_serving_one() -> None:
    upstream = view("big", "clicks", "SELECT user, n FROM src")
    body = job(inputs=[{"log": "big"}])
    logs = [log("clicks"), log("enriched")]
    waiting = planned(body, logs=[*logs, child("big", "big", None)], views=[upstream])
    assert [w.reason for w in waiting.waiting] == ["WaitingForInput"]
    assert waiting.launch is None
    ready = planned(body, logs=[*logs, child("big", "big", "big.r3")], views=[upstream])
    assert [(i.log, i.topic) for i in ready.inputs] == [("big", "big.r3")]


def test_an_in_place_edit_keeps_the_revision_and_says_why() -> None:
    before = job()
    after = job(arguments=["--fast"])
    for old in (before, None):  # classified field by field on an update, else from the hash
        plan = planned(after, running(before), old=old)
        assert (plan.revision, plan.starts, plan.retires) == (1, False, None)
        assert plan.change is not None
        assert plan.change.kind == "RestartInPlace"
    assert plan.application is not None
    assert plan.application["spec"]["arguments"] == ["--fast"]


def test_changing_inputs_in_place_is_refused_and_the_running_revision_kept() -> None:
    before = job()
    after = job(inputs=[{"log": "visits"}])
    for old in (before, None):
        plan = planned(after, running(before), old=old)
        assert plan.launch is None
        assert plan.spec_hash == running(before)["specHash"]
        (problem,) = plan.problems
        assert problem.reason == "ChangeForbidden"
        assert "inputs changed (clicks -> visits)" in problem.message
        assert "Reprocess" in problem.message


def test_under_reprocess_an_edit_starts_the_next_revision_afresh() -> None:
    before = job(upgrade={"strategy": "Reprocess"})
    after = job(arguments=["--v2"], upgrade={"strategy": "Reprocess"})
    plan = planned(after, running(before, 3), old=before)
    assert (plan.revision, plan.starts, plan.retires) == (4, True, 3)
    assert plan.change is not None
    assert plan.change.kind == "Reprocess"
    assert env(plan)["DISTRIBUTARY_CONSUMER_GROUP"] == "distributary.shop.enrich.r4"
    assert env(plan)["DISTRIBUTARY_CHECKPOINT_LOCATION"].endswith("/enrich/r4")
    # Once revision 4 is recorded, the same update seen again starts nothing more.
    again = planned(after, running(after, 4), old=before)
    assert (again.revision, again.starts) == (4, False)


def test_a_refused_edit_then_reprocess_compares_with_what_runs() -> None:
    """The edit before was refused, so the running spec is not the update's old one."""
    first = job()
    refused = job(inputs=[{"log": "visits"}])
    allowed = job(inputs=[{"log": "visits"}], upgrade={"strategy": "Reprocess"})
    plan = planned(allowed, running(first), old=refused)
    assert (plan.revision, plan.starts) == (2, True)
    assert [(i.log, i.topic) for i in plan.inputs] == [("visits", "visits")]


def test_a_retried_update_keeps_the_classification_its_generation_was_carried_out_with() -> None:
    """The update from a refused edit started revision 2 (Reprocess); its reconcile runs again
    with the same previous spec (a status conflict under load). That spec, refused before, now
    hashes like what runs, but the change was carried out: it is not classified again (it
    would be Ignore: only upgrade.strategy differs from the refused spec)."""
    first = job()
    refused = job(inputs=[{"log": "visits"}])
    allowed = job(inputs=[{"log": "visits"}], upgrade={"strategy": "Reprocess"})
    allowed["metadata"]["generation"] = 3
    plan = planned(allowed, running(first), old=refused)
    assert plan.change is not None
    assert plan.change.kind == "Reprocess"
    recorded = {
        **running(allowed, 2),
        "lastChange": {"generation": 3, "classification": "Reprocess", "reasons": ["inputs"]},
    }
    again = planned(allowed, recorded, old=refused)
    assert (again.revision, again.starts, again.change) == (2, False, None)
    # A later edit (another generation) is classified as ever.
    edited = job(inputs=[{"log": "visits"}], upgrade={"strategy": "Reprocess"}, arguments=["-v"])
    edited["metadata"]["generation"] = 4
    later = planned(edited, recorded, old=allowed)
    assert later.change is not None
    assert (later.change.kind, later.revision, later.starts) == ("Reprocess", 3, True)


def test_only_resources_changing_under_reprocess_keep_the_revision() -> None:
    before = job(upgrade={"strategy": "Reprocess"})
    after = job(upgrade={"strategy": "Reprocess"}, spark={"driver": {"memory": "2g"}})
    plan = planned(after, running(before), old=before)
    assert (plan.revision, plan.starts) == (1, False)
    assert plan.change is not None
    assert plan.change.kind == "RestartInPlace"


def test_after_a_rewind_the_revision_runs_on_the_rewinds_fresh_checkpoint() -> None:
    status = {
        **running(job()),
        "lastRewind": {"requestId": "again", "revision": 1, "phase": "Done", "offsets": []},
    }
    plan = planned(job(), status)
    assert env(plan)["DISTRIBUTARY_CHECKPOINT_LOCATION"] == (
        "s3a://bucket/ck/shop/enrich/r1/rewind-again"
    )
    # A rewind of an older revision does not follow the job into a new one.
    reprocess = job(arguments=["x"], upgrade={"strategy": "Reprocess"})
    moved = planned(reprocess, {**status, **running(job(upgrade={"strategy": "Reprocess"}))})
    assert env(moved)["DISTRIBUTARY_CHECKPOINT_LOCATION"] == "s3a://bucket/ck/shop/enrich/r2"
