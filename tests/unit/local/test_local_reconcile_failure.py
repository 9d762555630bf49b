"""`distributary run` when one view's reconcile fails unexpectedly: the run and the other views go
on; the failure is said in one line on stderr and recorded in the view's status (Stalled,
`ReconcileError`), and the view is tried again after its back-off.

Kafka is played by the in-memory parts of `tests/unit/reconcile/fakes.py`, Spark by the real
`PipelineRuntime`, which only gathers the specs until it is started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from tests.unit.reconcile.fakes import FakeAdmin, FakeProgress, FakeTopics

from distributary.api import parse_resource
from distributary.api.view import DerivedView
from distributary.backends.base import RevisionApp
from distributary.backends.local_spark import LocalRuntime, LocalSparkRuntime
from distributary.graph import Pipeline
from distributary.local.revisions import LocalRevisions
from distributary.local.run import LocalRun, PipelineFiles
from distributary.local.runtime import PipelineRuntime
from distributary.plan.applications.runner_spec import RunnerSpec
from distributary.plan.pipelines.pipeline import PlanSettings, plan_pipeline
from distributary.reconcile.ports import Services


def pipeline() -> Pipeline:
    log = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": "clicks"},
        "spec": {"partitions": 1, "schema": "user STRING, n INT"},
    }
    views = [
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "DerivedView",
            "metadata": {"name": name},
            "spec": {"inputs": [{"log": "clicks", "alias": "src"}], "sql": "SELECT user FROM src"},
        }
        for name in ("big", "small")
    ]
    return Pipeline.build([parse_resource(log), *map(parse_resource, views)])


class BrokenRuntime(PipelineRuntime):
    """The local runtime, with a bug on view `big` while `broken` is set."""

    broken = True
    tries = 0

    def view_app(self, view: DerivedView, runner: RunnerSpec) -> RevisionApp:
        if view.metadata.name == "big":
            self.tries += 1
            if self.broken:
                raise KeyError("driver")
        return super().view_app(view, runner)


def local_run(state: Path, said: list[str]) -> tuple[LocalRun, BrokenRuntime]:
    found = pipeline()
    local = LocalRun(found, [state], state, bootstrap_servers="127.0.0.1:9092", say=said.append)
    local.bootstrap = "127.0.0.1:9092"
    local.revisions = LocalRevisions.load(state)
    settings = PlanSettings("direct", checkpoint_root="file:///ck", bootstrap_servers="x:9092")
    local.plan = plan_pipeline(found, settings)
    local.files = PipelineFiles(found, local.revisions)
    jobs = LocalSparkRuntime(LocalRuntime(state / "jobs"))
    runtime = BrokenRuntime(state, jobs, lambda spec: spec, dict, lambda _: None)
    local.runtime = runtime
    journal: list[tuple[Any, ...]] = []
    local.services = Services(
        checkpoint_root="file:///ck",
        bootstrap_servers="127.0.0.1:9092",
        admin=cast(Any, FakeAdmin(journal)),
        progress=cast(Any, FakeProgress()),
        topics=FakeTopics(journal),
        runtime=runtime,
        lost_history=lambda _topics, _tables: None,
    )
    return local, runtime


def stalled(state: Path, name: str) -> dict[str, Any] | None:
    status = LocalRevisions.load(state).views[f"default/{name}"]["status"]
    return next((c for c in status.get("conditions") or [] if c["type"] == "Stalled"), None)


def test_one_views_unexpected_failure_stops_neither_the_run_nor_the_other_views(
    tmp_path: Path,
) -> None:
    said: list[str] = []
    local, runtime = local_run(tmp_path, said)
    local.reconcile()
    assert [(s.name, s.revision) for s in local.specs] == [("small", 1)]
    condition = stalled(tmp_path, "big")
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "ReconcileError")
    assert "KeyError: 'driver'" in condition["message"]
    assert stalled(tmp_path, "small") is None
    [line] = [s for s in said if "failed" in s]
    assert line == (
        "view big: the reconcile failed unexpectedly (KeyError: 'driver'); the others run on, "
        "it is tried again in 10s"
    )
    local.reconcile()  # within its back-off: not tried again, and the others go on
    assert runtime.tries == 1
    local.loop.close()


def test_a_failed_view_is_tried_again_after_its_back_off_and_recovers(tmp_path: Path) -> None:
    local, runtime = local_run(tmp_path, [])
    local.reconcile()
    runtime.broken = False
    local.failing = {key: (tries, 0.0) for key, (tries, _) in local.failing.items()}  # now due
    local.reconcile()
    assert runtime.tries == 2
    assert sorted((s.name, s.revision) for s in local.specs) == [("big", 1), ("small", 1)]
    assert stalled(tmp_path, "big") is None
    assert local.failing == {}
    local.loop.close()
