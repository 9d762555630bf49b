"""A revision whose query Spark refused at start (its runner reported QueryRefused) is not
restarted: the view is Stalled naming `spec.sql` with Spark's words, a revision serving beside it
serves on, and an edit that fixes the SQL starts a new revision. The runner's report counts only
for the runner spec it names (its hash): an edit that keeps the revision but changes what it runs
is started again. A due restart of an application that ended without failing reads the runner's
report first, and is not made when Spark refused this spec. Driven through in-memory parts
(`fakes`), as the operator and `distributary run` share the reconcile."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from tests.unit.reconcile.fakes import NS, FakeProgress, Parts, parts
from tests.unit.reconcile.test_view_reconcile import log, run, view

from distributary.plan.applications.runner_spec import (
    RUNNER_SPEC_HASH,
    as_run_by,
    reported_hash,
    runner_spec_hash,
)
from distributary.plan.revisions.progress import progress_key
from distributary.plan.views.view_plan import ViewPlan
from distributary.plan.views.view_status import query_refused
from distributary.reconcile import applications
from distributary.reconcile.ports import TryAgain

SAID = (
    'spec.sql: Spark refuses the query: Cannot resolve "sum(page)" due to data type mismatch '
    "(DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE); make the types agree, e.g. with CAST(expr AS type)"
)
REFUSED_SQL = "SELECT user, n FROM src WHERE user"
SLOW = {"cutoverWindow": "10m"}  # a revision catching up serves only after keeping up this long


def refuse(p: Parts, revision: int) -> None:
    """The runner's record: Spark refused revision `revision`'s query at start."""
    spec = next(s for s in reversed(p.runtime.specs) if s.revision == revision)
    record = {
        "state": "QueryRefused",
        "revision": revision,
        "checkpoint": spec.checkpoint_location,
        RUNNER_SPEC_HASH: runner_spec_hash(spec),
        "error": SAID,
    }
    p.progress.latest[progress_key("DerivedView", NS, "big", revision)] = record
    # The application ended with the driver (a SparkApplication that completed).
    p.runtime.failing.add(revision)


def conditions(p: Parts) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in p.store.status["conditions"]}


def test_a_refused_first_revision_is_stalled_and_never_restarted() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    refuse(p, 1)
    mark = len(p.journal)
    for _ in range(3):
        run(p, view())
    after = p.since(mark)
    assert not [e for e in after if e[0] in ("start", "remove")]
    stalled = conditions(p)["Stalled"]
    assert (stalled["status"], stalled["reason"]) == ("True", "QueryRefused")
    assert "spec.sql" in stalled["message"]
    assert 'Cannot resolve "sum(page)"' in stalled["message"]
    # Not counted as a failure of the application: no restart is scheduled.
    app = p.store.status["sparkApplication"]
    assert not app.get("failures")
    assert not app.get("restartAt")
    assert app["state"] == "QueryRefused"
    # One Warning, when the refusal first appears.
    assert after.count(("warning", "QueryRefused")) == 1


def test_a_refused_edit_leaves_the_serving_revision_serving() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    edited = view(REFUSED_SQL, generation=2, upgrade=SLOW)
    run(p, edited, old_spec=view()["spec"])
    assert p.runtime.running == {"big-r1": 1, "big-r2": 2}
    refuse(p, 2)
    mark = len(p.journal)
    run(p, edited)
    run(p, edited)
    after = p.since(mark)
    assert not [e for e in after if e[0] in ("start", "remove", "stop", "serve")]
    assert p.world.served == {"big": "big.r1"}
    rows = {r["revision"]: r for r in p.store.status["revisions"]}
    assert (rows[1]["phase"], rows[2]["phase"]) == ("Serving", "CatchingUp")
    # It reads nothing, so it is never caught up and never cut over to.
    assert rows[2].get("lag") is None
    assert not rows[2].get("caughtUpSince")
    assert p.store.status["servingRevision"] == 1
    stalled = conditions(p)["Stalled"]
    assert stalled["reason"] == "QueryRefused"
    assert "revision 2" in stalled["message"]
    assert "revision 1 serves on" in stalled["message"]
    assert ("warning", "QueryRefused") in after


def test_an_edit_that_fixes_the_sql_starts_a_new_revision() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    edited = view(REFUSED_SQL, generation=2, upgrade=SLOW)
    run(p, edited, old_spec=view()["spec"])
    refuse(p, 2)
    run(p, edited)
    fixed = view("SELECT user, n FROM src WHERE user <> ''", generation=3, upgrade=SLOW)
    mark = len(p.journal)
    run(p, fixed, old_spec=edited["spec"])
    assert ("start", 3) in p.since(mark)
    assert p.runtime.specs[-1].revision == 3
    assert conditions(p).get("Stalled", {}).get("status") != "True"
    phases = {r["revision"]: r["phase"] for r in p.store.status["revisions"]}
    assert (phases[1], phases[3]) == ("Serving", "CatchingUp")
    assert phases[2] not in ("Serving", "CatchingUp")
    assert p.world.served == {"big": "big.r1"}  # until revision 3 catches up


def test_a_refusal_of_another_checkpoint_is_not_this_revisions() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    stale = {"state": "QueryRefused", "checkpoint": "file:///ck/shop/big/old-uid/r1", "error": SAID}
    p.progress.latest[progress_key("DerivedView", NS, "big", 1)] = stale
    run(p, view())
    assert conditions(p).get("Stalled", {}).get("status") != "True"
    assert conditions(p)["Ready"]["status"] == "True"


def test_query_refused_reads_only_a_refusal_of_the_running_revision() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    [spec] = p.runtime.specs
    plan = ViewPlan(1, runner=spec)
    record = {
        "state": "QueryRefused",
        "checkpoint": spec.checkpoint_location,
        RUNNER_SPEC_HASH: runner_spec_hash(spec),
        "error": SAID,
    }
    problem = query_refused(plan, record)
    assert problem is not None
    assert problem.reason == "QueryRefused"
    assert SAID in problem.message
    assert "until spec.sql is fixed" in problem.message
    assert query_refused(plan, {**record, "state": "Running"}) is None
    assert query_refused(plan, {**record, "revision": 2}) is None
    assert query_refused(plan, None) is None
    assert query_refused(ViewPlan(1), record) is None


AUTO = {"upgrade": {"strategy": "Auto", "cutoverWindow": "0s"}}
FIXED_SQL = "SELECT user, n FROM src WHERE user <> ''"


def refused_in_place(p: Parts) -> dict[str, Any]:
    """A first revision Spark refused, under an upgrade strategy that lets an edit of its SQL
    keep the revision (a stateless query: Spark's checkpoint accepts the change)."""
    bad = view(REFUSED_SQL, **AUTO)
    run(p, bad)
    refuse(p, 1)
    run(p, bad)
    assert conditions(p)["Stalled"]["reason"] == "QueryRefused"
    return bad


def due_now(p: Parts) -> None:
    """The application's restart is due (its back-off is over)."""
    p.store.saved["sparkApplication"]["restartAt"] = "2000-01-01T00:00:00Z"


def test_query_refused_reads_only_a_refusal_of_the_spec_the_revision_runs_now() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    [spec] = p.runtime.specs
    record = {"state": "QueryRefused", "revision": 1, RUNNER_SPEC_HASH: runner_spec_hash(spec)}
    edits = [
        {"sql": FIXED_SQL},
        {"spark_conf": {**spec.spark_conf, "spark.sql.ansi.enabled": "false"}},
        {"inputs": (spec.inputs[0].model_copy(update={"schema_ddl": "user STRING, n BIGINT"}),)},
        {"trigger": "1s"},
    ]
    for edit in edits:
        edited = spec.model_copy(update=edit)
        assert query_refused(ViewPlan(1, runner=edited), record) is None, edit
        assert query_refused(ViewPlan(1, runner=edited), {**record, **{
            RUNNER_SPEC_HASH: runner_spec_hash(edited)}}) is not None  # fmt: skip
    # Same checkpoint, but no spec named: not taken as this spec's.
    unnamed = {k: v for k, v in record.items() if k != RUNNER_SPEC_HASH}
    assert query_refused(ViewPlan(1, runner=spec), unnamed) is None


def test_a_runner_reports_the_planned_specs_hash_whatever_its_runtime_added() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    [spec] = p.runtime.specs
    assert reported_hash(spec) == runner_spec_hash(spec)  # run as planned (a SparkApplication)
    assert "planned_hash" not in spec.model_dump_json()  # its argument is as it was
    machine = {"spark.master": "local[2]", "spark.driver.memory": "2g", "spark.sql.x": "1"}
    local = spec.model_copy(update={"spark_conf": {**spec.spark_conf, **machine}})
    assert runner_spec_hash(local) != runner_spec_hash(spec)
    marked = as_run_by(local, spec)
    assert reported_hash(marked) == runner_spec_hash(spec)
    # Marked again, as a runtime does with what it carries over: still the planned spec's.
    assert reported_hash(as_run_by(marked, spec)) == runner_spec_hash(spec)
    edited = spec.model_copy(update={"sql": FIXED_SQL})
    assert reported_hash(as_run_by(local, edited)) != reported_hash(marked)


def test_an_in_place_edit_of_a_refused_revision_is_started_again() -> None:
    p = parts([log("clicks")], [])
    bad = refused_in_place(p)
    first = p.runtime.specs[-1]
    fixed = view(FIXED_SQL, generation=2, **AUTO)
    mark = len(p.journal)
    with pytest.raises(TryAgain):  # its application ended: restarted after its back-off
        run(p, fixed, old_spec=bad["spec"])
    assert p.store.status["lastChange"]["classification"] == "RestartInPlace"
    spec = p.runtime.specs[-1]
    # The same revision on the same checkpoint: only what it runs changed.
    assert (spec.revision, spec.checkpoint_location) == (1, first.checkpoint_location)
    assert spec.sql != first.sql
    assert conditions(p).get("Stalled", {}).get("reason") != "QueryRefused"
    assert p.store.status["sparkApplication"]["restartAt"]
    due_now(p)
    run(p, fixed)
    after = p.since(mark)
    assert after.index(("remove", 1)) < after.index(("start", 1))
    assert p.runtime.running == {"big-r1": 1}
    assert conditions(p)["Ready"]["status"] == "True"


def test_an_edit_that_keeps_the_revisions_spec_does_not_retry_it() -> None:
    p = parts([log("clicks")], [])
    bad = refused_in_place(p)
    mark = len(p.journal)
    # More memory for the driver: the runner spec, what Spark analyses, is the same.
    resized = view(REFUSED_SQL, generation=2, spark={"driver": {"memory": "2g"}}, **AUTO)
    run(p, resized, old_spec=bad["spec"])
    assert p.runtime.specs[-1] == p.runtime.specs[-2]
    run(p, resized)
    assert not [e for e in p.since(mark) if e[0] in ("start", "remove")]
    assert conditions(p)["Stalled"]["reason"] == "QueryRefused"


@dataclass
class LateProgress(FakeProgress):
    """A progress reader behind the topic: `pending` records are read from the `after`-th
    poll on."""

    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    after: int = 2
    polls: int = 0

    def poll(self, timeout: float = 0.2) -> dict[str, dict[str, Any]]:
        self.polls += 1
        if self.polls >= self.after:
            self.latest.update(self.pending)
        return dict(self.latest)


def ended_cleanly_unread(p: Parts) -> dict[str, Any]:
    """Revision 1's runner exited with code 0 (its application COMPLETED): Spark refused its
    query, and its record saying so is not read yet; the restart is due."""
    run(p, view())
    [spec] = p.runtime.specs
    record = {
        "state": "QueryRefused",
        "revision": 1,
        "checkpoint": spec.checkpoint_location,
        RUNNER_SPEC_HASH: runner_spec_hash(spec),
        "error": SAID,
    }
    p.runtime.failing.add(1)
    p.runtime.ended_as = "COMPLETED"
    with pytest.raises(TryAgain):  # first seen ended: its restart is scheduled
        run(p, view())
    due_now(p)
    return record


def test_a_due_restart_reads_the_runners_report_first_and_is_not_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(applications, "REPORT_POLL", 0.01)
    p = parts([log("clicks")], [])
    record = ended_cleanly_unread(p)
    p.progress = LateProgress(pending={progress_key("DerivedView", NS, "big", 1): record})
    mark = len(p.journal)
    run(p, view())
    assert not [e for e in p.since(mark) if e[0] in ("start", "remove")], p.since(mark)
    stalled = conditions(p)["Stalled"]
    assert (stalled["status"], stalled["reason"]) == ("True", "QueryRefused")
    app = p.store.status["sparkApplication"]
    assert (app["state"], app.get("restartAt")) == ("QueryRefused", None)
    mark = len(p.journal)
    run(p, view())  # and never after
    assert not [e for e in p.since(mark) if e[0] in ("start", "remove")]


def test_a_report_read_at_the_start_of_a_round_drops_the_scheduled_restart() -> None:
    """The record is read before the restart is looked at (a round that begins after it came):
    the view is Stalled and no restart is left scheduled in status."""
    p = parts([log("clicks")], [])
    record = ended_cleanly_unread(p)
    p.progress.latest[progress_key("DerivedView", NS, "big", 1)] = record
    mark = len(p.journal)
    run(p, view())
    assert not [e for e in p.since(mark) if e[0] in ("start", "remove")], p.since(mark)
    assert conditions(p)["Stalled"]["reason"] == "QueryRefused"
    app = p.store.status["sparkApplication"]
    assert (app["state"], app.get("restartAt")) == ("QueryRefused", None)


def test_a_report_of_an_earlier_spec_does_not_hold_a_due_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(applications, "REPORT_WAIT", 0.2)
    monkeypatch.setattr(applications, "REPORT_POLL", 0.01)
    p = parts([log("clicks")], [])
    record = ended_cleanly_unread(p)
    stale = {**record, RUNNER_SPEC_HASH: "another-spec"}
    p.progress = LateProgress(pending={progress_key("DerivedView", NS, "big", 1): stale})
    mark = len(p.journal)
    run(p, view())
    after = p.since(mark)
    assert after.index(("remove", 1)) < after.index(("start", 1))
    assert conditions(p).get("Stalled", {}).get("reason") != "QueryRefused"


def test_a_crashed_runner_is_restarted_without_waiting_for_a_report() -> None:
    p = parts([log("clicks")], [])
    ended_cleanly_unread(p)
    p.runtime.ended_as = "FAILED"  # exit code 1: a crash, not a refusal
    p.progress = LateProgress(after=10**6)
    mark = len(p.journal)
    run(p, view())
    assert p.progress.polls == 1  # read once, as every reconcile does
    assert ("start", 1) in p.since(mark)


def test_the_runtime_looks_at_a_revision_the_reconcile_knows_refused() -> None:
    """The runtime of `distributary run` learns of a refusal by looking at the revision's state
    (`local.runtime`): the reconcile looks, so that it does not start the query again."""
    p = parts([log("clicks")], [])
    run(p, view())
    refuse(p, 1)
    looked: list[int] = []
    make = p.runtime.view_app

    def view_app(body: Any, runner: Any) -> Any:
        app = make(body, runner)

        def state() -> Any:
            looked.append(runner.revision)
            return app.state()

        return replace(app, state=state)

    p.runtime.view_app = view_app  # type: ignore[method-assign]
    run(p, view())
    assert conditions(p)["Stalled"]["reason"] == "QueryRefused"
    assert looked == [1]
