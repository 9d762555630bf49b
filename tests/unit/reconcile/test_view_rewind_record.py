"""A rewind's record says where the group really stood when it moved: the position recorded
ahead is read before the old process stops, and it may read on until it is fenced or gone."""

from __future__ import annotations

from typing import Any

from tests.unit.reconcile.fakes import NS, parts
from tests.unit.reconcile.test_view_reconcile import log, run, view

GROUP = f"distributary.{NS}.big.r1"
REWIND = {"requestId": "again", "to": {"from": "Earliest"}}


def test_the_done_record_has_the_position_the_group_moved_from() -> None:
    p = parts([log("clicks")], [])
    p.admin.ends = {"clicks": 50}
    run(p, view())
    p.admin.groups = {GROUP: {"clicks": {0: 40}}}
    stop = p.runtime.stop

    def stop_reading_on(owner: Any, revisions: Any) -> list[int]:
        if 1 in revisions:  # its last batch commits while it stops
            p.admin.groups[GROUP]["clicks"][0] = 45
        return stop(owner, revisions)

    p.runtime.stop = stop_reading_on  # type: ignore[method-assign]
    run(p, view(generation=2, rewind=REWIND))
    records = [e[1] for e in p.journal if e[0] == "record"]
    pending = next(r["lastRewind"] for r in records if "lastRewind" in r)
    assert pending["offsets"][0]["fromOffset"] == 40
    done = p.store.status["lastRewind"]
    assert done["phase"] == "Done"
    assert done["offsets"] == [{"topic": "clicks", "partition": 0, "fromOffset": 45, "toOffset": 0}]
    assert p.admin.groups[GROUP] == {"clicks": {0: 0}}


def test_a_rewind_recorded_for_a_revision_an_edit_replaced_moves_no_other_revision() -> None:
    # The rewind was recorded for revision 1 (Pending), then the reconcile that carried it out
    # did not finish (a crash, or its status write refused); meanwhile the SQL was edited, so
    # revision 2 reprocesses from the start of the input with a group of its own.
    p = parts([log("clicks")], [])
    p.admin.ends = {"clicks": 50}
    run(p, view(rewind=REWIND))
    pending = {
        "requestId": "again",
        "revision": 1,
        "phase": "Pending",
        "offsets": [{"topic": "clicks", "partition": 0, "fromOffset": 40, "toOffset": 30}],
    }
    p.store.saved["lastRewind"] = pending
    p.store.saved.pop("rewinds", None)
    edited = view("SELECT user, n FROM src WHERE n > 5", generation=2, rewind=REWIND)
    mark = len(p.journal)
    run(p, edited, old_spec=view(rewind=REWIND)["spec"])
    after = p.since(mark)
    assert ("start", 2) in after
    revision_2 = f"distributary.{NS}.big.r2"
    assert not [e for e in after if e[0] in ("commit", "fence")], after
    assert revision_2 not in p.admin.groups  # it reads from the start of its input
    assert not [
        s for s in p.runtime.specs if s.revision == 2 and "rewind" in str(s.checkpoint_location)
    ]
    last = p.store.status["lastRewind"]
    assert (last["revision"], last["phase"], last["verified"]) == (1, "Done", "Undone")
    assert ("warning", "RewindUndone") in after
