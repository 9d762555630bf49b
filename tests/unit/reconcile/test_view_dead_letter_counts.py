"""A view's dead letters in its status, its metrics and `distributary run`'s summary: each
revision's row carries the count its runner reports in the progress topic (over the revision's
whole run), `status.deadLetters` the serving revision's, and the count a row holds is kept while
its runner reports nothing (a restarted runner, a stopped one)."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY
from tests.unit.reconcile.fakes import NS, Parts, parts
from tests.unit.reconcile.test_view_reconcile import log, reprocessed, run, view

from distributary.api import parse_resource
from distributary.controllers import metrics
from distributary.graph import Pipeline
from distributary.local.status import observe
from distributary.plan.pipelines.pipeline import PlanSettings, plan_pipeline
from distributary.plan.revisions.progress import progress_key


def report(p: Parts, revision: int, dead_letters: int | None, **fields: Any) -> None:
    record: dict[str, Any] = {"state": "Running", **fields}
    if dead_letters is not None:
        record["deadLetters"] = dead_letters
    p.progress.latest[progress_key("DerivedView", NS, "big", revision)] = record


def letters(p: Parts) -> dict[int, int | None]:
    return {r["revision"]: r.get("deadLetters") for r in p.store.status["revisions"]}


def test_the_serving_revisions_dead_letters_are_in_its_row_and_the_status() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    assert letters(p) == {1: None}  # nothing reported yet: unknown, not 0
    assert "deadLetters" not in p.store.status
    report(p, 1, 3)
    run(p, view())
    assert letters(p) == {1: 3}
    assert p.store.status["deadLetters"] == 3


def test_each_revision_has_its_own_count_and_the_status_the_serving_ones() -> None:
    p = parts([log("clicks")], [])
    report(p, 1, 5)
    report(p, 2, 2)
    edited = reprocessed(p)
    assert letters(p) == {1: 5, 2: 2}
    assert p.store.status["servingRevision"] == 1  # revision 2 catches up beside it
    assert p.store.status["deadLetters"] == 5
    run(p, edited)  # revision 2 has caught up (the test's cutover window is 0s) and serves
    assert p.store.status["servingRevision"] == 2
    assert letters(p) == {1: 5, 2: 2}
    assert p.store.status["deadLetters"] == 2


def test_a_count_is_kept_while_the_runner_reports_none() -> None:
    p = parts([log("clicks")], [])
    report(p, 1, 4)
    run(p, view())
    report(p, 1, None)  # e.g. a runner that has started and not counted yet
    run(p, view())
    del p.progress.latest[progress_key("DerivedView", NS, "big", 1)]
    run(p, view())
    assert letters(p) == {1: 4}
    assert p.store.status["deadLetters"] == 4


def test_a_new_count_replaces_the_old_one() -> None:
    p = parts([log("clicks")], [])
    report(p, 1, 4)
    run(p, view())
    report(p, 1, 9)
    run(p, view())
    assert letters(p) == {1: 9}


def sample(**labels: str) -> float | None:
    return REGISTRY.get_sample_value("distributary_view_dead_letters", labels)


def test_every_revisions_dead_letters_are_a_metric_and_a_dropped_revision_loses_its_own() -> None:
    status: dict[str, Any] = {
        "servingRevision": 2,
        "deadLetters": 1,
        "revisions": [
            {"revision": 1, "phase": "Retired", "deadLetters": 6},
            {"revision": 2, "phase": "Serving", "deadLetters": 1},
            {"revision": 3, "phase": "CatchingUp"},
        ],
    }
    metrics.record_view("ns", "letters", status)
    assert sample(namespace="ns", view="letters", revision="1") == 6
    assert sample(namespace="ns", view="letters", revision="2") == 1
    assert sample(namespace="ns", view="letters", revision="3") is None
    status["revisions"] = status["revisions"][1:]
    metrics.record_view("ns", "letters", status)
    assert sample(namespace="ns", view="letters", revision="1") is None
    assert sample(namespace="ns", view="letters", revision="2") == 1


def test_a_jobs_running_revisions_dead_letters_are_a_metric() -> None:
    def job_sample(revision: str) -> float | None:
        labels = {"namespace": "ns", "job": "letters", "revision": revision}
        return REGISTRY.get_sample_value("distributary_job_dead_letters", labels)

    metrics.record_job("ns", "letters", {"revision": 1, "deadLetters": 4})
    assert job_sample("1") == 4
    metrics.record_job("ns", "letters", {"revision": 2, "deadLetters": 0})
    assert (job_sample("1"), job_sample("2")) == (None, 0)
    metrics.record_job("ns", "letters", {"revision": 2})  # not reported yet after a restart
    assert job_sample("2") is None


class Admin:
    """The offsets `observe` reads: every group empty, every topic empty."""

    def committed(self, group: str) -> dict[str, dict[int, int]]:
        return {}

    def watermarks(self, topics: Any) -> dict[str, dict[int, tuple[int, int]]]:
        return {topic: {0: (0, 0)} for topic in topics}


def test_distributary_run_shows_the_revisions_count_from_its_progress() -> None:
    resources = [
        parse_resource({**log("clicks"), "metadata": {"name": "clicks", "namespace": NS}}),
        parse_resource({**view(), "metadata": {"name": "big", "namespace": NS}}),
    ]
    plan = plan_pipeline(Pipeline.build(resources), PlanSettings(bootstrap_servers="kafka:9092"))
    specs = [planned.runner for planned in plan.views]
    key = progress_key("DerivedView", NS, "big", 1)
    found = observe(plan, specs, Admin(), {key: {"state": "Running", "deadLetters": 7}})  # type: ignore[arg-type]
    assert found.to_json()["views"]["big"]["deadLetters"] == 7
    assert observe(plan, specs, Admin(), {}).views[0].dead_letters == 0  # type: ignore[arg-type]
