"""Rewinds in `distributary run`, the parts without a broker: which requests are due, what the
state folder records, and how a rewound revision runs on its fresh checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distributary.api import parse_resource
from distributary.graph import Pipeline
from distributary.local.revisions import LocalPlan, LocalRevisions, plan_views
from distributary.local.rewinds import describe, due_rewinds
from distributary.plan.positions import rewind_destinations as targets

KEY = "default/joined"
MOVES = [
    {"topic": "clicks", "partition": 0, "fromOffset": 40, "toOffset": 12},
    {"topic": "clicks", "partition": 1, "fromOffset": None, "toOffset": 0},
]


def pipeline(rewind: dict[str, Any] | None = None) -> Pipeline:
    logs = [
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": name},
            "spec": {"partitions": 2, "schema": "user STRING, n INT"},
        }
        for name in ("clicks", "users")
    ]
    view = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "joined"},
        "spec": {
            "inputs": [{"log": "clicks", "alias": "c"}, {"log": "users", "alias": "u"}],
            "sql": "SELECT c.user, c.n FROM c UNION ALL SELECT u.user, u.n FROM u",
            **({"rewind": rewind} if rewind else {}),
        },
    }
    return Pipeline.build([parse_resource(d) for d in [*logs, view]])


def planned(found: Pipeline, revisions: LocalRevisions) -> LocalPlan:
    return plan_views(
        found,
        revisions,
        checkpoint_root="file:///state/checkpoints",
        bootstrap_servers="127.0.0.1:9092",
        localize=lambda spec: spec,
    )


TO_TIME = {
    "requestId": "replay-1",
    "to": {"from": "Timestamp", "timestamp": "2026-01-01T00:00:00Z"},
}


def test_a_rewind_is_due_for_the_running_revisions_group_in_the_inputs_it_names(
    tmp_path: Path,
) -> None:
    found = pipeline({**TO_TIME, "inputs": ["c"]})
    revisions = LocalRevisions(tmp_path)
    due = due_rewinds(found, planned(found, revisions).views, revisions)
    assert [(d.name, d.request_id, d.revision) for d in due] == [("joined", "replay-1", 1)]
    assert due[0].group == "distributary.default.joined.r1"
    assert due[0].topics == ("clicks",)
    assert due[0].to.from_ == "Timestamp"
    every = pipeline(TO_TIME)
    assert due_rewinds(every, planned(every, revisions).views, revisions)[0].topics == (
        "clicks",
        "users",
    )


def test_a_view_without_a_rewind_has_none_due(tmp_path: Path) -> None:
    found = pipeline()
    revisions = LocalRevisions(tmp_path)
    assert due_rewinds(found, planned(found, revisions).views, revisions) == []


def test_a_request_recorded_done_is_not_due_again_but_a_pending_one_and_a_new_id_are(
    tmp_path: Path,
) -> None:
    found = pipeline(TO_TIME)
    revisions = LocalRevisions(tmp_path)
    plans = planned(found, revisions).views
    pending = {"requestId": "replay-1", "revision": 1, "phase": "Pending", "offsets": MOVES}
    revisions.record_rewind(KEY, pending)
    assert len(due_rewinds(found, plans, revisions)) == 1
    revisions.record_rewind(KEY, {**pending, "phase": "Done"})
    assert due_rewinds(found, plans, revisions) == []
    assert [r["phase"] for r in revisions.rewinds(KEY)] == ["Done"]  # one record per request
    again = pipeline({**TO_TIME, "requestId": "replay-2"})
    assert [d.request_id for d in due_rewinds(again, plans, revisions)] == ["replay-2"]


def test_the_rewound_revision_runs_on_its_fresh_checkpoint_and_the_records_are_kept(
    tmp_path: Path,
) -> None:
    found = pipeline(TO_TIME)
    revisions = LocalRevisions(tmp_path)
    before = planned(found, revisions).specs[0].checkpoint_location
    done = {"requestId": "replay-1", "revision": 1, "phase": "Done", "offsets": MOVES}
    revisions.record_rewind(KEY, done)
    revisions.use_checkpoint(KEY, 1, "rewind-replay-1")
    revisions.save()
    # A later run reads the file again: the checkpoint and the record survive its planning.
    later = LocalRevisions.load(tmp_path)
    local = planned(found, later)
    assert local.specs[0].checkpoint_location == f"{before}/rewind-replay-1"
    assert later.rewinds(KEY) == [done]
    assert later.views[KEY]["status"]["revisions"][0]["checkpoint"] == "rewind-replay-1"


def test_the_moves_become_the_offsets_to_commit_and_a_line_for_people() -> None:
    assert targets(MOVES) == {"clicks": {0: 12, 1: 0}}
    record = {"requestId": "replay-1", "revision": 1, "phase": "Done", "offsets": MOVES}
    assert describe("joined", record) == (
        "view joined: rewound revision 1 for request replay-1: clicks[0] 40 -> 12, "
        "clicks[1] - -> 0; it reads on from there on a fresh checkpoint (rewind-replay-1)"
    )
