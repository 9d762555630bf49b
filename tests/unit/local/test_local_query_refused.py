"""`distributary run`'s runtime does not run again a revision whose query Spark refused at start.

The runner process publishes QueryRefused for the revision; the runtime reports that state (not an
ended application, so no back-off and no restart) and leaves the revision out of every later start
of the process while its spec stays the same. A changed spec is started again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from tests.unit.reconcile.fakes import parts
from tests.unit.reconcile.test_view_reconcile import log, run, view

from distributary.api import parse_body
from distributary.api.view import DerivedView
from distributary.local.revisions import LocalRevisions
from distributary.local.runtime import PipelineRuntime
from distributary.plan.applications.runner_spec import (
    RUNNER_SPEC_HASH,
    RunnerSpec,
    as_run_by,
    runner_spec_hash,
)
from distributary.plan.revisions.progress import progress_key


class ExitedRunner:
    """A runner process that has exited: all its revisions were refused."""

    pid = 4242

    def poll(self) -> int:
        return 0


def refused_setup(tmp_path: Path) -> tuple[PipelineRuntime, DerivedView, RunnerSpec]:
    p = parts([log("clicks")], [])
    body = view("SELECT user, n FROM src WHERE n")
    run(p, body)
    [spec] = p.runtime.specs
    found = parse_body(body, DerivedView)
    assert isinstance(found, DerivedView)
    record = {
        "state": "QueryRefused",
        "runnerPid": ExitedRunner.pid,
        "checkpoint": spec.checkpoint_location,
        RUNNER_SPEC_HASH: runner_spec_hash(spec),
        "error": "spec.sql: Spark refuses the query: ...",
    }
    records = {progress_key("DerivedView", spec.namespace, spec.name, spec.revision): record}
    runtime = PipelineRuntime(tmp_path, cast(Any, None), lambda s: s, lambda: records, print)
    return runtime, found, spec


def test_a_refused_revision_is_reported_and_not_run_again(tmp_path: Path) -> None:
    runtime, found, spec = refused_setup(tmp_path)
    app = runtime.view_app(found, spec)
    app.start()
    runtime.running = dict(runtime.wanted)  # the process ran it, and has exited
    runtime.process = cast(Any, ExitedRunner())
    state = app.state()
    assert state.state == "QueryRefused"
    assert not state.ended
    assert "spec.sql" in state.message
    # Started again by the next reconcile: still refused, and the process is not restarted.
    assert app.start().state == "QueryRefused"
    assert runtime.runnable(runtime.wanted) == {}
    assert runtime.flush() is False


def test_a_changed_spec_is_started_again(tmp_path: Path) -> None:
    runtime, found, spec = refused_setup(tmp_path)
    app = runtime.view_app(found, spec)
    app.start()
    runtime.running = dict(runtime.wanted)
    runtime.process = cast(Any, ExitedRunner())
    app.state()
    changed = spec.model_copy(update={"spark_conf": {**spec.spark_conf, "spark.x": "1"}})
    runtime.view_app(found, changed).start()
    assert list(runtime.runnable(runtime.wanted).values()) == [as_run_by(changed, changed)]


def test_an_edit_of_the_revision_looked_at_before_its_start_is_started(tmp_path: Path) -> None:
    runtime, found, spec = refused_setup(tmp_path)
    app = runtime.view_app(found, spec)
    app.start()
    runtime.running = dict(runtime.wanted)
    runtime.process = cast(Any, ExitedRunner())
    assert app.state().state == "QueryRefused"
    # An edit that keeps the revision: the reconcile looks at its state, then starts it.
    changed = spec.model_copy(update={"sql": "SELECT user, n FROM src WHERE n > 0"})
    edited = runtime.view_app(found, changed)
    assert edited.state().state == "QueryRefused"  # what the process last ran was refused
    edited.start()
    assert list(runtime.runnable(runtime.wanted).values()) == [as_run_by(changed, changed)]


def test_a_view_stalled_on_a_refused_query_is_not_waited_for_as_catching_up(
    tmp_path: Path,
) -> None:
    revisions = LocalRevisions.load(tmp_path)
    rows = [{"revision": 1, "phase": "Serving"}, {"revision": 2, "phase": "CatchingUp"}]
    stall = {"type": "Stalled", "status": "True", "reason": "QueryRefused", "message": "spec.sql"}
    revisions.views["default/big"] = {"status": {"revisions": rows, "conditions": [stall]}}
    revisions.views["default/small"] = {"status": {"revisions": rows, "conditions": []}}
    assert revisions.catching_up() == ["default/small"]
    assert revisions.query_refused() == {"default/big": "spec.sql"}


def test_a_view_or_job_whose_application_keeps_failing_is_not_waited_for(tmp_path: Path) -> None:
    revisions = LocalRevisions.load(tmp_path)
    rows = [{"revision": 1, "phase": "Serving"}, {"revision": 2, "phase": "CatchingUp"}]
    said = "the Spark application failed 5 times within 30m; the last error: Spark stopped"
    stall = {"type": "Stalled", "status": "True", "reason": "ApplicationFailing", "message": said}
    revisions.views["default/big"] = {"status": {"revisions": rows, "conditions": [stall]}}
    revisions.views["default/small"] = {"status": {"revisions": rows, "conditions": []}}
    revisions.jobs["default/shout"] = {"status": {"conditions": [stall]}}
    assert revisions.catching_up() == ["default/small"]
    assert revisions.keep_failing("DerivedView") == {"default/big": said}
    assert revisions.keep_failing("StreamJob") == {"default/shout": said}
    assert revisions.query_refused() == {}
    # Stalled no more (status False): waited for again.
    revisions.views["default/big"]["status"]["conditions"] = [{**stall, "status": "False"}]
    assert revisions.catching_up() == ["default/big", "default/small"]
