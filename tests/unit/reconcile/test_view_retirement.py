"""A retired revision leaves nothing behind: its application stopped, its topic deleted under the
output's `deletionPolicy: Delete`, and its consumer group deleted whatever the policy, once
nothing of its application runs. Driven through the in-memory parts of `fakes`."""

from __future__ import annotations

from typing import Any

from tests.unit.reconcile.fakes import NS, Parts, parts
from tests.unit.reconcile.test_view_reconcile import log, run, view

GROUP_1, GROUP_2 = f"distributary.{NS}.big.r1", f"distributary.{NS}.big.r2"
EDITED_SQL = "SELECT user, n FROM src WHERE n > 5"


def settings(policy: str) -> dict[str, Any]:
    return {
        "upgrade": {"cutoverWindow": "0s", "retireAfter": "0s"},
        "output": {"mode": "append", "deletionPolicy": policy},
    }


def cut_over(p: Parts, policy: str) -> dict[str, Any]:
    """Revision 1, then an edit; revision 2 catches up and serves, and revision 1 retires at
    once (`retireAfter: 0s`)."""
    p.admin.ends = {"clicks": 10}
    run(p, view(**settings(policy)))
    edited = view(EDITED_SQL, generation=2, **settings(policy))
    run(p, edited, old_spec=view(**settings(policy))["spec"])
    p.admin.groups = {GROUP_1: {"clicks": {0: 10}}, GROUP_2: {"clicks": {0: 10}}}
    run(p, edited)  # observes revision 2's lag: 0
    run(p, edited)  # cuts over; revision 1 retires
    return edited


def rows(p: Parts) -> dict[int, dict[str, Any]]:
    return {r["revision"]: r for r in p.store.status["revisions"]}


def test_a_retired_revisions_group_is_deleted_once_under_either_policy() -> None:
    for policy in ("Delete", "Retain"):
        p = parts([log("clicks")], [])
        edited = cut_over(p, policy)
        assert rows(p)[1]["phase"] == "Retired"
        assert ("delete group", GROUP_1) in p.journal
        assert p.admin.group_names() == {GROUP_2}
        assert rows(p)[1]["groupDeleted"] is True
        assert "groupDeleted" not in rows(p)[2]
        assert (("delete topic", "big.r1") in p.journal) == (policy == "Delete")
        mark = len(p.journal)
        run(p, edited)
        assert not [e for e in p.since(mark) if e[0] == "delete group"]


def test_the_group_waits_while_the_retired_revisions_application_still_runs() -> None:
    p = parts([log("clicks")], [])
    lingering = {"big-r1": 1}

    def stop(owner: Any, revisions: Any) -> list[int]:
        return []  # a driver that takes its time to go

    p.runtime.stop = stop  # type: ignore[method-assign]
    p.runtime.running.update(lingering)
    edited = cut_over(p, "Delete")
    assert rows(p)[1]["phase"] == "Retired"
    assert not [e for e in p.journal if e[0] == "delete group"]
    assert "groupDeleted" not in rows(p)[1]
    del p.runtime.running["big-r1"]  # gone now
    run(p, edited)
    assert ("delete group", GROUP_1) in p.journal
    assert rows(p)[1]["groupDeleted"] is True


def test_a_revision_still_retiring_keeps_its_group() -> None:
    p = parts([log("clicks")], [])
    p.admin.ends = {"clicks": 10}
    later = {"upgrade": {"cutoverWindow": "0s", "retireAfter": "1h"}}
    run(p, view(**later))
    edited = view(EDITED_SQL, generation=2, **later)
    run(p, edited, old_spec=view(**later)["spec"])
    p.admin.groups = {GROUP_1: {"clicks": {0: 10}}, GROUP_2: {"clicks": {0: 10}}}
    run(p, edited)
    run(p, edited)
    assert rows(p)[1]["phase"] == "Retiring"
    assert not [e for e in p.journal if e[0] == "delete group"]
