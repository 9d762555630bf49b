"""Which view outputs a reader waits on before it starts a new revision of its own: those of views
with a revision catching up, and of every view downstream of one, which reprocesses in turn once
it cuts over (its input moves to a new topic)."""

from __future__ import annotations

from typing import Any

from distributary.plan.view_plan import reprocessing_outputs


def view(name: str, reads: str, phases: tuple[str, ...] = ("Serving",)) -> dict[str, Any]:
    rows = [{"revision": i + 1, "phase": phase} for i, phase in enumerate(phases)]
    return {
        "kind": "DerivedView",
        "metadata": {"name": name},
        "spec": {"inputs": [{"log": reads, "alias": "src"}], "output": {"log": name}},
        "status": {"revisions": rows},
    }


def test_nothing_is_waited_on_while_no_revision_catches_up() -> None:
    assert reprocessing_outputs([view("big", "events"), view("mid", "big")]) == frozenset()


def test_the_outputs_downstream_of_a_catch_up_are_waited_on_to_the_end_of_the_cascade() -> None:
    bodies = [
        view("big", "events", ("Serving", "CatchingUp")),
        view("mid", "big"),
        view("per-user", "mid"),
        view("other", "events"),
        view("other-reader", "other"),
    ]
    assert reprocessing_outputs(bodies) == {"big", "mid", "per-user"}


def test_a_catch_up_further_down_holds_only_what_is_below_it() -> None:
    bodies = [
        view("per-user", "mid"),
        view("mid", "big", ("Serving", "CatchingUp")),
        view("big", "events"),
    ]
    assert reprocessing_outputs(bodies) == {"mid", "per-user"}
