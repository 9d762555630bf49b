"""A revision whose query Spark refused at start (its runner reported QueryRefused) is not
restarted: the view is Stalled naming `spec.sql` with Spark's words, a revision serving beside it
serves on, and an edit that fixes the SQL starts a new revision. Driven through in-memory parts
(`fakes`), as the operator and `distributary run` share the reconcile."""

from __future__ import annotations

from typing import Any

from tests.unit.reconcile.fakes import NS, Parts, parts
from tests.unit.reconcile.test_view_reconcile import log, run, view

from distributary.plan.progress import progress_key
from distributary.plan.view_plan import ViewPlan
from distributary.plan.view_status import query_refused

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
    record = {"state": "QueryRefused", "checkpoint": spec.checkpoint_location, "error": SAID}
    problem = query_refused(plan, record)
    assert problem is not None
    assert problem.reason == "QueryRefused"
    assert SAID in problem.message
    assert "until spec.sql is fixed" in problem.message
    assert query_refused(plan, {**record, "state": "Running"}) is None
    assert query_refused(plan, {**record, "revision": 2}) is None
    assert query_refused(plan, None) is None
    assert query_refused(ViewPlan(1), record) is None
