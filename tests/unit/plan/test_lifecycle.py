"""A view's revisions through reprocessing: catch up beside the serving one, cut over, retire."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from distributary.api.view import Revision, Upgrade
from distributary.plan.revisions.classify import Classification
from distributary.plan.revisions.lifecycle import (
    Lifecycle,
    Rebuild,
    mark_deleted,
    mark_groups_deleted,
    progress_message,
    reprocess_progress,
    step,
)

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
REPROCESS = Classification("Reprocess", ("sql changed",))
UPGRADE = Upgrade.model_validate({"cutoverWindow": "10s", "retireAfter": "1h"})


def run(
    rows: Sequence[dict[str, Any] | Revision],
    spec_hash: str,
    *,
    change: Classification | None = None,
    upgrade: Upgrade = UPGRADE,
    lags: dict[int, int | None] | None = None,
    now: datetime = T0,
    delete: bool = False,
    history_lost: str | None = None,
    rebuild: Rebuild | None = None,
) -> Lifecycle:
    return step(
        rows,
        spec_hash=spec_hash,
        change=change,
        upgrade=upgrade,
        lags=lags or {},
        now=now,
        topic_of=lambda r: f"out.r{r}",
        group_of=lambda r: f"g.r{r}",
        delete_retired=delete,
        history_lost=history_lost,
        rebuild=rebuild,
    )


def phases(life: Lifecycle) -> list[tuple[int, str]]:
    return [(r.revision, r.phase) for r in life.rows]


def revision(life: Lifecycle, number: int) -> Revision:
    row = life.row(number)
    assert row is not None, f"no revision {number} in {phases(life)}"
    return row


def test_a_new_view_serves_revision_1() -> None:
    life = run([], "h1")
    assert (life.serving, life.current, life.started) == (1, 1, 1)
    assert phases(life) == [(1, "Serving")]
    assert life.rows[0].topic == "out.r1"


def test_a_reprocess_runs_the_next_revision_beside_the_serving_one() -> None:
    serving = run([], "h1").rows
    life = run(list(serving), "h2", change=REPROCESS)
    assert phases(life) == [(1, "Serving"), (2, "CatchingUp")]
    assert (life.serving, life.current, life.started, life.stop) == (1, 2, 2, ())
    row = life.row(2)
    assert row is not None
    assert row.consumer_group == "g.r2"


def test_cutover_waits_until_the_lag_has_stayed_low_for_the_window() -> None:
    rows = list(run(list(run([], "h1").rows), "h2", change=REPROCESS).rows)
    behind = run(rows, "h2", lags={2: 500})
    assert (behind.serving, behind.cut_over) == (1, None)
    first = run(list(behind.rows), "h2", lags={2: 0}, now=T0 + timedelta(seconds=1))
    assert (first.serving, first.cut_over) == (1, None)
    assert revision(first, 2).caught_up_since == "2026-11-22T12:00:01Z"
    blip = run(list(first.rows), "h2", lags={2: 7}, now=T0 + timedelta(seconds=5))
    assert revision(blip, 2).caught_up_since is None  # the window starts again
    again = run(list(blip.rows), "h2", lags={2: 0}, now=T0 + timedelta(seconds=6))
    early = run(list(again.rows), "h2", lags={2: 0}, now=T0 + timedelta(seconds=15))
    assert early.cut_over is None
    due = run(list(early.rows), "h2", lags={2: 0}, now=T0 + timedelta(seconds=16))
    assert (due.serving, due.cut_over, due.stop) == (2, 2, (1,))
    assert phases(due) == [(1, "Retiring"), (2, "Serving")]
    assert revision(due, 1).retire_at == "2026-11-22T13:00:16Z"


def test_a_cutover_under_a_lag_threshold_accepts_that_lag() -> None:
    upgrade = Upgrade.model_validate({"cutoverMaxLag": 100, "cutoverWindow": "0s"})
    rows = list(run(list(run([], "h1").rows), "h2", change=REPROCESS).rows)
    assert run(rows, "h2", upgrade=upgrade, lags={2: 101}).cut_over is None
    assert run(rows, "h2", upgrade=upgrade, lags={2: 100}).cut_over == 2


def test_unknown_lag_never_cuts_over() -> None:
    rows = list(run(list(run([], "h1").rows), "h2", change=REPROCESS).rows)
    upgrade = Upgrade.model_validate({"cutoverWindow": "0s"})
    assert run(rows, "h2", upgrade=upgrade, lags={2: None}).cut_over is None


def test_the_retired_topic_is_deleted_after_the_grace_period_only_under_delete() -> None:
    upgrade = Upgrade.model_validate({"cutoverWindow": "0s", "retireAfter": "1h"})
    rows = list(run(list(run([], "h1").rows), "h2", change=REPROCESS).rows)
    cut = run(rows, "h2", upgrade=upgrade, lags={2: 0}, delete=True)
    assert cut.delete_topics == ()
    later = T0 + timedelta(hours=1)
    kept = run(list(cut.rows), "h2", upgrade=upgrade, lags={2: 0}, now=later, delete=False)
    assert phases(kept) == [(1, "Retired"), (2, "Serving")]
    assert kept.delete_topics == ()
    gone = run(list(cut.rows), "h2", upgrade=upgrade, lags={2: 0}, now=later, delete=True)
    assert gone.delete_topics == ("out.r1",)
    done = mark_deleted(list(gone.rows), gone.delete_topics)
    assert run(done, "h2", upgrade=upgrade, now=later, delete=True).delete_topics == ()


def test_a_newer_edit_during_a_catch_up_supersedes_it() -> None:
    rows = list(run(list(run([], "h1").rows), "h2", change=REPROCESS).rows)
    life = run(rows, "h3", change=REPROCESS)
    assert phases(life) == [(1, "Serving"), (2, "Retiring"), (3, "CatchingUp")]
    assert (life.current, life.stop) == (3, (2,))


def test_undoing_an_edit_during_a_catch_up_keeps_the_serving_revision() -> None:
    rows = list(run(list(run([], "h1").rows), "h2", change=REPROCESS).rows)
    life = run(rows, "h1")
    assert phases(life) == [(1, "Serving"), (2, "Retiring")]
    assert (life.current, life.stop) == (1, (2,))


def test_an_unclassified_change_starts_nothing() -> None:
    life = run(list(run([], "h1").rows), "h2")
    assert (life.current, life.started, phases(life)) == (None, None, [(1, "Serving")])


def test_in_place_changes_keep_the_revision_and_reprocess_only_changes_are_refused() -> None:
    serving = list(run([], "h1").rows)
    in_place = Upgrade.model_validate({"strategy": "InPlace"})
    restart = Classification("RestartInPlace", ("a filter changed",))
    kept = run(serving, "h2", change=restart, upgrade=in_place)
    assert (kept.current, phases(kept), revision(kept, 1).spec_hash) == (
        1,
        [(1, "Serving")],
        "h2",
    )
    refused = run(serving, "h2", change=REPROCESS, upgrade=in_place)
    assert refused.current is None
    assert refused.problem is not None
    assert refused.problem.reason == "ReprocessRequired"
    assert "strategy to Reprocess" in refused.problem.message
    auto = Upgrade.model_validate({"strategy": "Auto"})
    assert run(serving, "h2", change=restart, upgrade=auto).started is None
    assert run(serving, "h2", change=REPROCESS, upgrade=auto).started == 2


def test_a_forbidden_change_is_refused_whatever_the_strategy() -> None:
    serving = list(run([], "h1").rows)
    forbidden = Classification("Forbidden", ("output.log changed",))
    life = run(serving, "h2", change=forbidden)
    assert life.problem is not None
    assert (life.problem.reason, life.current, life.started) == ("ChangeForbidden", None, None)


def test_reprocess_progress_counts_from_the_first_retained_offset() -> None:
    start = {"clicks": {0: 100, 1: 0}}
    end = {"clicks": {0: 1100, 1: 1800}}
    position = {"clicks": {0: 600}}
    assert reprocess_progress(start, position, end) == (500, 2800)
    assert progress_message(2, 1_200_000, 2_800_000) == (
        "revision 2 reprocessing 43%: 1.2M of 2.8M records"
    )
    assert progress_message(3, 0, 0).startswith("revision 3 reprocessing 100%")


def test_a_reprocess_over_lost_history_is_refused_unless_partial_history_is_allowed() -> None:
    serving = list(run([], "h1").rows)
    lost = "input log clicks (topic clicks) has lost its history to retention: partition 0..."
    refused = step(
        serving, spec_hash="h2", change=REPROCESS, upgrade=UPGRADE, lags={}, now=T0,
        topic_of=lambda r: f"out.r{r}", group_of=lambda r: f"g.r{r}", delete_retired=False,
        history_lost=lost,
    )  # fmt: skip
    assert refused.problem is not None
    assert refused.problem.reason == "HistoryIncomplete"
    assert "allowPartialHistory: true" in refused.problem.message
    assert (refused.started, phases(refused)) == (None, [(1, "Serving")])
    partial = Upgrade.model_validate({"allowPartialHistory": True})
    allowed = step(
        serving, spec_hash="h2", change=REPROCESS, upgrade=partial, lags={}, now=T0,
        topic_of=lambda r: f"out.r{r}", group_of=lambda r: f"g.r{r}", delete_retired=False,
        history_lost=lost,
    )  # fmt: skip
    assert allowed.started == 2


def test_on_live_input_a_revision_within_one_window_of_arrivals_cuts_over() -> None:
    """Records keep arriving (50/s): a lag of 0 never comes, and is not waited for."""
    rows = list(run(list(run([], "h1").rows), "h2", change=REPROCESS).rows)
    live = [r.model_copy(update={"input_rate": 50.0}) if r.revision == 2 else r for r in rows]
    far = run(live, "h2", lags={2: 501})  # more than the 10 s window's 500 records
    assert (far.cut_over, revision(far, 2).caught_up_since) == (None, None)
    near = run(live, "h2", lags={2: 480})
    assert revision(near, 2).caught_up_since == "2026-11-22T12:00:00Z"
    due = run(list(near.rows), "h2", lags={2: 300}, now=T0 + timedelta(seconds=10))
    assert (due.serving, due.cut_over) == (2, 2)
    # On idle input the window allows nothing more than cutoverMaxLag.
    idle = run(rows, "h2", lags={2: 1})
    assert revision(idle, 2).caught_up_since is None


def test_a_revision_whose_batches_outlast_the_window_cuts_over_once_it_keeps_up() -> None:
    """On a busy machine each micro-batch takes 6 s (inputs grow 10 records/s, 3 s window): a
    revision that keeps up is a batch behind, and another before that batch commits (60 to 120
    records), never within the window's 30. It cuts over all the same, and one that falls
    further behind than two batches does not."""
    upgrade = Upgrade.model_validate({"cutoverWindow": "3s", "retireAfter": "1h"})
    rows = list(run(list(run([], "h1").rows), "h2", change=REPROCESS, upgrade=upgrade).rows)
    live = [
        r.model_copy(update={"input_rate": 10.0, "batch_seconds": 6.0}) if r.revision == 2 else r
        for r in rows
    ]
    behind = run(live, "h2", upgrade=upgrade, lags={2: 121})
    assert (behind.cut_over, revision(behind, 2).caught_up_since) == (None, None)
    near = run(live, "h2", upgrade=upgrade, lags={2: 72})
    assert revision(near, 2).caught_up_since == "2026-11-22T12:00:00Z"
    due = run(list(near.rows), "h2", upgrade=upgrade, lags={2: 110}, now=T0 + timedelta(seconds=3))
    assert (due.serving, due.cut_over) == (2, 2)


def lost(rows: tuple[Revision, ...], number: int) -> list[Revision]:
    """`rows` with revision `number`'s checkpoint reported lost."""
    update = {"checkpoint_lost": "2026-11-22T12:00:00Z"}
    return [r.model_copy(update=update) if r.revision == number else r for r in rows]


def test_a_serving_revision_that_lost_its_state_is_rebuilt_beside_it_not_resumed() -> None:
    life = run(lost(run([], "h1").rows, 1), "h1")
    assert phases(life) == [(1, "Serving"), (2, "CatchingUp")]
    assert (life.serving, life.current, life.started) == (1, 2, 2)
    assert revision(life, 2).reason == "CheckpointLost"
    assert revision(life, 2).spec_hash == "h1"
    assert life.stop == (1,)  # never resumed on empty state
    assert life.live() == [2]


def test_a_rebuild_cuts_over_like_a_reprocess_and_is_not_undone() -> None:
    started = run(lost(run([], "h1").rows, 1), "h1")
    again = run(list(started.rows), "h1", lags={2: 0})
    assert phases(again) == [(1, "Serving"), (2, "CatchingUp")]  # not retired as unneeded
    assert again.started is None  # and not started twice
    done = run(list(again.rows), "h1", lags={2: 0}, now=T0 + timedelta(seconds=11))
    assert (done.serving, done.cut_over) == (2, 2)
    assert phases(done) == [(1, "Retiring"), (2, "Serving")]


def test_a_rebuild_over_incomplete_history_is_refused_and_nothing_runs() -> None:
    rows = lost(run([], "h1").rows, 1)
    life = run(rows, "h1", history_lost="events[0] starts at offset 500")
    assert phases(life) == [(1, "Serving")]
    assert life.problem is not None
    assert life.problem.reason == "HistoryIncomplete"
    assert "allowPartialHistory" in life.problem.message
    assert (life.current, life.stop) == (None, (1,))


def test_a_catching_up_revision_that_lost_its_state_is_replaced() -> None:
    catching = run(list(run([], "h1").rows), "h2", change=REPROCESS).rows
    life = run(lost(catching, 2), "h2")
    assert phases(life) == [(1, "Serving"), (2, "Retiring"), (3, "CatchingUp")]
    assert (life.current, life.started) == (3, 3)
    assert revision(life, 3).spec_hash == "h2"


def test_a_lost_serving_revision_beside_an_edit_is_replaced_by_the_edit() -> None:
    catching = run(list(run([], "h1").rows), "h2", change=REPROCESS).rows
    life = run(lost(catching, 1), "h2")
    assert phases(life) == [(1, "Serving"), (2, "CatchingUp")]
    assert (life.current, life.started, life.stop) == (2, None, (1,))


def test_a_rewind_of_a_view_that_keeps_state_rebuilds_it_once() -> None:
    life = run(run([], "h1").rows, "h1", rebuild="Rewind")
    assert phases(life) == [(1, "Serving"), (2, "CatchingUp")]
    assert revision(life, 2).reason == "Rewind"
    assert life.stop == ()  # the serving revision serves on meanwhile
    # Until it is recorded as done, the request is seen again.
    again = run(life.rows, "h1", rebuild="Rewind")
    assert phases(again) == [(1, "Serving"), (2, "CatchingUp")]
    assert again.started is None


def test_a_retired_revisions_group_is_due_once_whatever_the_deletion_policy() -> None:
    upgrade = Upgrade.model_validate({"cutoverWindow": "0s", "retireAfter": "1h"})
    rows = list(run(list(run([], "h1").rows), "h2", change=REPROCESS).rows)
    cut = run(rows, "h2", upgrade=upgrade, lags={2: 0})
    assert cut.delete_groups == ()  # Retiring: not yet
    later = T0 + timedelta(hours=1)
    for delete in (False, True):
        retired = run(list(cut.rows), "h2", upgrade=upgrade, lags={2: 0}, now=later, delete=delete)
        assert phases(retired) == [(1, "Retired"), (2, "Serving")]
        assert retired.delete_groups == (1,)
    done = mark_groups_deleted(list(retired.rows), retired.delete_groups)
    assert revision(Lifecycle(2, tuple(done), 2), 1).group_deleted is True
    assert run(done, "h2", upgrade=upgrade, now=later).delete_groups == ()
