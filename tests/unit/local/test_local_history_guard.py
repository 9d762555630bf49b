"""The retention guard in `distributary run`: a reprocess over inputs that lost history is
refused, the serving revision runs on, and the refusal is recorded; allowPartialHistory accepts
the gap. Planned as a run plans (`local.revisions.plan_views`), with the inputs' first offsets
given as a run reads them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from distributary.api import parse_resource
from distributary.graph import Pipeline
from distributary.local.revisions import LocalPlan, LocalRevisions, plan_views
from distributary.plan.positions import Offsets, lost_history
from distributary.plan.runner_spec import RunnerSpec

KEY = "default/big"


def pipeline(sql: str, **upgrade: Any) -> Pipeline:
    log = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": "clicks"},
        "spec": {"partitions": 2, "schema": "user STRING, n INT"},
    }
    view = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "big"},
        "spec": {"inputs": [{"log": "clicks", "alias": "src"}], "sql": sql, "upgrade": upgrade},
    }
    return Pipeline.build([parse_resource(log), parse_resource(view)])


def planned(found: Pipeline, revisions: LocalRevisions, starts: Offsets | None = None) -> LocalPlan:
    def lost_history_of(topics: Mapping[str, str]) -> str | None:
        assert starts is not None, "the first revision reads no history"
        assert topics == {"clicks": "clicks"}
        return lost_history(starts, topics)

    return plan_views(
        found,
        revisions,
        checkpoint_root="file:///state/checkpoints",
        bootstrap_servers="127.0.0.1:9092",
        localize=lambda spec: spec,
        lost_history_of=lost_history_of,
    )


def revisions_after_first_run(tmp_path: Path) -> LocalRevisions:
    revisions = LocalRevisions(tmp_path)
    first = planned(pipeline("SELECT user, n FROM src"), revisions)
    assert [s.revision for s in first.specs] == [1]
    return revisions


LOST = {"clicks": {0: 0, 1: 250}}


def test_a_reprocess_over_lost_history_is_refused_and_the_serving_revision_runs_on(
    tmp_path: Path,
) -> None:
    revisions = revisions_after_first_run(tmp_path)
    served: RunnerSpec = planned(pipeline("SELECT user, n FROM src"), revisions).specs[0]
    local = planned(pipeline("SELECT user, n FROM src WHERE n > 1"), revisions, LOST)
    plan = local.views["big"]
    assert plan.runner is None
    assert [p.reason for p in plan.problems] == ["HistoryIncomplete"]
    assert local.specs == [served]  # revision 1, as recorded, and nothing else
    assert local.serving == {"big": "big.r1"}
    status = revisions.views[KEY]["status"]
    assert [(r["revision"], r["phase"]) for r in status["revisions"]] == [(1, "Serving")]
    assert status["problem"]["reason"] == "HistoryIncomplete"
    message = status["problem"]["message"]
    assert "input log clicks (topic clicks)" in message
    assert "partition 1 starts at offset 250, not 0" in message
    assert "allowPartialHistory: true" in message
    # What runs is still the old spec: the next run compares the edit with it again.
    assert revisions.views[KEY]["view"]["spec"]["sql"] == "SELECT user, n FROM src"


def test_the_refusal_is_lifted_once_the_change_is_reverted(tmp_path: Path) -> None:
    revisions = revisions_after_first_run(tmp_path)
    planned(pipeline("SELECT user, n FROM src WHERE n > 1"), revisions, LOST)
    again = planned(pipeline("SELECT user, n FROM src"), revisions)
    assert again.views["big"].problems == ()
    assert "problem" not in revisions.views[KEY]["status"]
    assert [s.revision for s in again.specs] == [1]


def test_a_reprocess_over_complete_history_starts_beside_the_serving_revision(
    tmp_path: Path,
) -> None:
    revisions = revisions_after_first_run(tmp_path)
    whole = {"clicks": {0: 0, 1: 0}}
    local = planned(pipeline("SELECT user, n FROM src WHERE n > 1"), revisions, whole)
    assert [s.revision for s in local.specs] == [2, 1]
    assert local.views["big"].problems == ()


def test_allow_partial_history_reprocesses_what_remains(tmp_path: Path) -> None:
    revisions = revisions_after_first_run(tmp_path)
    edited = pipeline("SELECT user, n FROM src WHERE n > 1", allowPartialHistory=True)
    local = planned(edited, revisions, LOST)
    assert local.views["big"].problems == ()
    assert [s.revision for s in local.specs] == [2, 1]
    rows = revisions.views[KEY]["status"]["revisions"]
    assert [(r["revision"], r["phase"]) for r in rows] == [(1, "Serving"), (2, "CatchingUp")]
    # Spark is told to accept the gap rather than stop at it.
    assert local.specs[0].fail_on_data_loss is False


def test_without_a_reader_of_first_offsets_nothing_is_checked(tmp_path: Path) -> None:
    revisions = revisions_after_first_run(tmp_path)
    local = plan_views(
        pipeline("SELECT user, n FROM src WHERE n > 1"),
        revisions,
        checkpoint_root="file:///state/checkpoints",
        bootstrap_servers="127.0.0.1:9092",
        localize=lambda spec: spec,
        lost_history_of=None,
    )
    assert [s.revision for s in local.specs] == [2, 1]


def test_a_revision_catching_up_runs_on_while_a_later_edit_is_refused(tmp_path: Path) -> None:
    revisions = revisions_after_first_run(tmp_path)
    whole = {"clicks": {0: 0, 1: 0}}
    second = planned(pipeline("SELECT user, n FROM src WHERE n > 1"), revisions, whole)
    assert [s.revision for s in second.specs] == [2, 1]
    # Retention removes history before revision 2 has caught up; a third query is refused.
    third = planned(pipeline("SELECT user, n FROM src WHERE n > 2"), revisions, LOST)
    assert [p.reason for p in third.views["big"].problems] == ["HistoryIncomplete"]
    assert [s.revision for s in third.specs] == [2, 1]  # 2 may still catch up and cut over
    assert third.specs == second.specs
