"""Which view outputs a reader waits on before it starts a new revision of its own: those of views
with a revision catching up, and of every view downstream of one, which reprocesses in turn once
it cuts over (its input moves to a new topic)."""

from __future__ import annotations

from typing import Any

from distributary.plan.views.view_plan import reprocessing_outputs


def view(
    name: str,
    reads: str,
    phases: tuple[str, ...] = ("Serving",),
    generation: int = 1,
    observed: int = 1,
    reason: str = "Serving",
) -> dict[str, Any]:
    rows = [{"revision": i + 1, "phase": phase} for i, phase in enumerate(phases)]
    ready = {"type": "Ready", "status": "True", "reason": reason}
    return {
        "kind": "DerivedView",
        "metadata": {"name": name, "generation": generation},
        "spec": {"inputs": [{"log": reads, "alias": "src"}], "output": {"log": name}},
        "status": {"revisions": rows, "observedGeneration": observed, "conditions": [ready]},
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


def test_an_edit_its_reconcile_has_not_handled_yet_is_waited_on() -> None:
    """The upstream view's spec is new but its status is the old one's: whether it reprocesses is
    not known yet, so its readers wait rather than start a revision on the topic it may
    replace."""
    bodies = [view("big", "events", generation=3, observed=2), view("per-user", "big")]
    assert reprocessing_outputs(bodies) == {"big", "per-user"}


def test_an_edit_still_being_classified_is_waited_on() -> None:
    bodies = [view("big", "events", reason="ChangePending"), view("per-user", "big")]
    assert reprocessing_outputs(bodies) == {"big", "per-user"}


def test_a_new_view_without_revisions_holds_nothing_here() -> None:
    new = view("big", "events", phases=(), generation=1, observed=0)
    assert reprocessing_outputs([new, view("per-user", "big")]) == frozenset()
