"""Suspending and resuming a view or a job (`spec.suspend`), driven through in-memory parts.

Suspended, every live revision's application stops where it is and nothing else moves: no new
revision, no commit, no topic deleted; Ready is False with reason Suspended and neither
Reconciling nor Stalled is set. Resumed, the same revisions start again on the same checkpoints.
The integration test (`tests/integration/test_local_suspend.py`) does it on live input.
"""

from __future__ import annotations

from typing import Any

from tests.unit.reconcile import test_job_reconcile as jobs
from tests.unit.reconcile.fakes import NS, Parts, parts
from tests.unit.reconcile.test_view_reconcile import log, run, view

EDITED = "SELECT user, n FROM src WHERE n > 5"


def conditions(p: Parts) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason", "")) for c in p.store.status["conditions"]}


def checkpoints(p: Parts) -> list[tuple[int, str]]:
    """Each runner asked for: its revision and checkpoint."""
    return [(e[1], e[2]) for e in p.journal if e[0] == "runner"]


def test_a_suspended_view_stops_keeps_its_position_and_says_so() -> None:
    p = parts([log("clicks")], [])
    p.admin.ends = {"clicks": 10}
    run(p, view())
    p.admin.groups = {f"distributary.{NS}.big.r1": {"clicks": {0: 4}}}
    mark = len(p.journal)
    run(p, view(generation=2, suspend=True), old_spec=view()["spec"])
    after = p.since(mark)
    assert ("stop", (1,)) in after
    assert ("event", "Suspended") in after
    assert p.runtime.running == {}
    assert not [e for e in after if e[0] in ("start", "commit", "delete topic", "delete group")]
    assert conditions(p)["Ready"] == ("False", "Suspended")
    assert "Reconciling" not in conditions(p)
    assert "Stalled" not in conditions(p)
    status = p.store.status
    assert status["lag"] == 6  # still observed: the group's position stays where it stopped
    assert status["sparkApplication"]["state"] == "SUSPENDED"
    # Later rounds (the observer's) start nothing.
    run(p, view(generation=2, suspend=True))
    assert p.runtime.running == {}


def test_a_resumed_view_runs_the_same_revision_on_the_same_checkpoint() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    run(p, view(generation=2, suspend=True), old_spec=view()["spec"])
    mark = len(p.journal)
    run(p, view(generation=3), old_spec=view(suspend=True)["spec"])
    after = p.since(mark)
    assert ("start", 1) in after
    assert ("event", "Resumed") in after
    assert not [e for e in after if e[0] == "record"]  # no new revision was recorded
    assert len(set(checkpoints(p))) == 1
    assert conditions(p)["Ready"] == ("True", "Serving")
    # A restart that was due is not what brought it back: no failure was counted.
    assert not p.store.status["sparkApplication"].get("failures")


def behind(p: Parts) -> None:
    """Records in the input that revision 2 has not read: it catches up, it does not serve."""
    p.admin.ends = {"clicks": 10}
    p.admin.groups = {f"distributary.{NS}.big.r1": {"clicks": {0: 10}}}


def test_an_edit_made_while_suspended_starts_its_revision_on_resume() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    behind(p)
    run(p, view(generation=2, suspend=True), old_spec=view()["spec"])
    mark = len(p.journal)
    run(p, view(EDITED, generation=3, suspend=True), old_spec=view(suspend=True)["spec"])
    assert not [e for e in p.since(mark) if e[0] == "start"]
    phases = {r["revision"]: r["phase"] for r in p.store.status["revisions"]}
    assert phases == {1: "Serving", 2: "CatchingUp"}  # recorded, nothing runs
    assert conditions(p)["Ready"] == ("False", "Suspended")
    run(p, view(EDITED, generation=4), old_spec=view(EDITED, suspend=True)["spec"])
    assert set(p.runtime.running.values()) == {1, 2}  # both run again, as before suspending


def test_a_view_suspended_while_it_reprocesses_stops_both_and_resumes_both() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    behind(p)
    run(p, view(EDITED, generation=2), old_spec=view()["spec"])
    assert set(p.runtime.running.values()) == {1, 2}
    run(p, view(EDITED, generation=3, suspend=True), old_spec=view(EDITED)["spec"])
    assert p.runtime.running == {}
    assert p.world.served == {"big": "big.r1"}  # readers read what they read
    # Revision 1's spec is no longer the view's: the runtime keeps what each ran (`suspend`)
    # and starts it again as it ran (`keep`).
    assert p.runtime.suspended == {"big-r1": 1, "big-r2": 2}
    mark = len(p.journal)
    run(p, view(EDITED, generation=4), old_spec=view(EDITED, suspend=True)["spec"])
    after = p.since(mark)
    assert ("start", 1) in after
    assert ("start", 2) in after
    assert set(p.runtime.running.values()) == {1, 2}
    phases = {r["revision"]: r["phase"] for r in p.store.status["revisions"]}
    assert phases == {1: "Serving", 2: "CatchingUp"}


def test_a_suspended_view_whose_spec_is_wrong_is_stalled_not_suspended() -> None:
    p = parts([log("clicks")], [])
    run(p, view("SELECT nope FROM missing", suspend=True))
    assert conditions(p)["Stalled"][0] == "True"
    assert conditions(p)["Ready"][0] == "False"


def test_a_suspended_job_stops_and_resumes_where_it_stopped() -> None:
    p = parts([log("clicks"), log("enriched")], [])
    jobs.run(p, jobs.job())
    assert p.runtime.running == {"enrich-job-r1": 1}
    mark = len(p.journal)
    jobs.run(p, jobs.job(2, suspend=True), old_spec=jobs.job()["spec"])
    after = p.since(mark)
    assert ("stop", (1,)) in after
    assert ("event", "Suspended") in after
    assert p.runtime.running == {}
    assert conditions(p)["Ready"] == ("False", "Suspended")
    assert "Reconciling" not in conditions(p)
    assert "Stalled" not in conditions(p)
    assert p.store.status["revision"] == 1
    mark = len(p.journal)
    jobs.run(p, jobs.job(3), old_spec=jobs.job(suspend=True)["spec"])
    after = p.since(mark)
    assert ("start", 1) in after
    assert ("event", "Resumed") in after
    assert conditions(p)["Ready"] == ("True", "Running")
    assert p.store.status["revision"] == 1
    changed: Any = p.store.status["lastChange"]
    assert changed["classification"] == "Ignore"
    assert "suspend unset" in changed["reasons"][0]
