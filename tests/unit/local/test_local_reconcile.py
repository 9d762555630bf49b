"""`distributary run`'s front end of the one reconcile, the parts without a broker or Spark.

Each "run" here is what a `distributary run` does on its first round: the state folder's
statuses loaded from disk, every view reconciled (`reconcile.view`) with the state folder as its
store and the pipeline files as its world, run.json written. Kafka is played by in-memory parts
(`tests/unit/reconcile/fakes.py`) and Spark by the real `PipelineRuntime`, which only gathers the
specs until it is started. Covered: the retention guard (a refused reprocess keeps the serving
revision running and says why, in revisions.json and run.json), a rewind carried out once per
request id onto a fresh checkpoint, and what a second run makes of what the first recorded.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, cast

from tests.unit.reconcile.fakes import FakeAdmin, FakeProgress, FakeTopics

from distributary.api import parse_resource
from distributary.backends.local_spark import LocalRuntime, LocalSparkRuntime
from distributary.graph import Pipeline
from distributary.local.revisions import LocalRevisions
from distributary.local.run import LocalRun, PipelineFiles
from distributary.local.runtime import PipelineRuntime
from distributary.local.state import read_run_state
from distributary.plan.applications.runner_spec import RunnerSpec
from distributary.plan.edits.write_ahead import rewind_message
from distributary.plan.pipelines.pipeline import PlanSettings, plan_pipeline
from distributary.plan.revisions.positions import Offsets, lost_history
from distributary.plan.revisions.positions import rewind_destinations as targets
from distributary.reconcile.ports import Services

KEY = "default/big"
LOST = {"clicks": {0: 0, 1: 250}}
WHOLE = {"clicks": {0: 0, 1: 0}}


def pipeline(sql: str = "SELECT user, n FROM src", **spec: Any) -> Pipeline:
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
        "spec": {"inputs": [{"log": "clicks", "alias": "src"}], "sql": sql, **spec},
    }
    return Pipeline.build([parse_resource(log), parse_resource(view)])


def run(
    state: Path, found: Pipeline, starts: Offsets | None = None, admin: FakeAdmin | None = None
) -> LocalRun:
    """One run's first round over `found`, the inputs' first offsets being `starts`."""
    journal: list[tuple[Any, ...]] = []
    admin = admin or FakeAdmin(journal)

    def lost_history_of(topics: Mapping[str, str], tables: Collection[str]) -> str | None:
        assert starts is not None, "the first revision reads no history"
        assert topics == {"clicks": "clicks"}
        return lost_history(starts, topics)

    local = LocalRun(found, [state], state, bootstrap_servers="127.0.0.1:9092")
    local.bootstrap = "127.0.0.1:9092"
    local.revisions = LocalRevisions.load(state)
    checkpoints = "file:///state/checkpoints"
    settings = PlanSettings("direct", checkpoint_root=checkpoints, bootstrap_servers="x:9092")
    local.plan = plan_pipeline(found, settings)
    local.files = PipelineFiles(found, local.revisions)
    local.files.served.update(local._served())
    jobs = LocalSparkRuntime(LocalRuntime(state / "jobs"))
    local.runtime = PipelineRuntime(state, jobs, lambda spec: spec, dict, lambda _: None)
    local.services = Services(
        checkpoint_root=checkpoints,
        bootstrap_servers="127.0.0.1:9092",
        admin=cast(Any, admin),
        progress=cast(Any, FakeProgress()),
        topics=FakeTopics(journal),
        runtime=local.runtime,
        lost_history=lost_history_of,
    )
    local.reconcile()
    local.loop.close()
    return local


def revisions(state: Path) -> dict[str, Any]:
    return LocalRevisions.load(state).views


def first_run(state: Path) -> RunnerSpec:
    [served] = run(state, pipeline()).specs
    assert served.revision == 1
    return served


def test_a_reprocess_over_lost_history_is_refused_and_the_serving_revision_runs_on(
    tmp_path: Path,
) -> None:
    served = first_run(tmp_path)
    local = run(tmp_path, pipeline("SELECT user, n FROM src WHERE n > 1"), LOST)
    assert local.specs == [served]  # revision 1, as recorded, and nothing else
    assert local.files is not None
    assert local.files.served == {"big": "big.r1"}
    status = revisions(tmp_path)[KEY]["status"]
    assert [(r["revision"], r["phase"]) for r in status["revisions"]] == [(1, "Serving")]
    assert status["problem"]["reason"] == "HistoryIncomplete"
    message = status["problem"]["message"]
    assert "input log clicks (topic clicks)" in message
    assert "partition 1 starts at offset 250, not 0" in message
    assert "allowPartialHistory: true" in message
    # What runs is still the old spec: the next run compares the edit with it again.
    assert revisions(tmp_path)[KEY]["view"]["spec"]["sql"] == "SELECT user, n FROM src"
    views = read_run_state(tmp_path).views["big"]
    assert (views["servingRevision"], views["problem"]) == (1, status["problem"])


def test_a_refused_edit_is_refused_again_by_the_next_run(tmp_path: Path) -> None:
    first_run(tmp_path)
    edited = pipeline("SELECT user, n FROM src WHERE n > 1")
    run(tmp_path, edited, LOST)
    again = run(tmp_path, edited, LOST)
    assert [s.revision for s in again.specs] == [1]
    assert revisions(tmp_path)[KEY]["status"]["problem"]["reason"] == "HistoryIncomplete"


def test_the_refusal_is_lifted_once_the_change_is_reverted(tmp_path: Path) -> None:
    first_run(tmp_path)
    run(tmp_path, pipeline("SELECT user, n FROM src WHERE n > 1"), LOST)
    again = run(tmp_path, pipeline())
    assert "problem" not in revisions(tmp_path)[KEY]["status"]
    assert [s.revision for s in again.specs] == [1]


def test_a_reprocess_over_complete_history_starts_beside_the_serving_revision(
    tmp_path: Path,
) -> None:
    first_run(tmp_path)
    local = run(tmp_path, pipeline("SELECT user, n FROM src WHERE n > 1"), WHOLE)
    assert sorted(s.revision for s in local.specs) == [1, 2]
    assert "problem" not in revisions(tmp_path)[KEY]["status"]


def test_allow_partial_history_reprocesses_what_remains(tmp_path: Path) -> None:
    first_run(tmp_path)
    edited = pipeline("SELECT user, n FROM src WHERE n > 1", upgrade={"allowPartialHistory": True})
    local = run(tmp_path, edited, LOST)
    assert "problem" not in revisions(tmp_path)[KEY]["status"]
    rows = revisions(tmp_path)[KEY]["status"]["revisions"]
    assert [(r["revision"], r["phase"]) for r in rows] == [(1, "Serving"), (2, "CatchingUp")]
    # Spark is told to accept the gap rather than stop at it.
    reprocessing = next(s for s in local.specs if s.revision == 2)
    assert reprocessing.fail_on_data_loss is False


def test_a_revision_catching_up_runs_on_while_a_later_edit_is_refused(tmp_path: Path) -> None:
    first_run(tmp_path)
    second = run(tmp_path, pipeline("SELECT user, n FROM src WHERE n > 1"), WHOLE)
    assert sorted(s.revision for s in second.specs) == [1, 2]
    # Retention removes history before revision 2 has caught up; a third query is refused.
    third = run(tmp_path, pipeline("SELECT user, n FROM src WHERE n > 2"), LOST)
    assert revisions(tmp_path)[KEY]["status"]["problem"]["reason"] == "HistoryIncomplete"
    assert sorted(third.specs, key=lambda s: s.revision) == sorted(
        second.specs, key=lambda s: s.revision
    )  # 2 may still catch up and cut over


MOVES = [
    {"topic": "clicks", "partition": 0, "fromOffset": 40, "toOffset": 12},
    {"topic": "clicks", "partition": 1, "fromOffset": None, "toOffset": 0},
]
TO_TIME = {
    "requestId": "replay-1",
    "to": {"from": "Timestamp", "timestamp": "2026-01-01T00:00:00Z"},
}


def rewinding_admin(request_group: str = "distributary.default.big.r1") -> FakeAdmin:
    admin = FakeAdmin([])
    admin.groups = {request_group: {"clicks": {0: 40}}}
    admin.marks = {"clicks": {0: (0, 40), 1: (0, 0)}}
    admin.by_time = {"clicks": {0: 12, 1: 0}}
    return admin


def test_a_rewind_is_carried_out_once_onto_a_fresh_checkpoint_and_recorded(
    tmp_path: Path,
) -> None:
    before = first_run(tmp_path).checkpoint_location
    admin = rewinding_admin()
    local = run(tmp_path, pipeline(rewind=TO_TIME), admin=admin)
    [spec] = local.specs
    assert spec.checkpoint_location == f"{before}/rewind-replay-1"
    # The revision writes in transactions: its old writer is fenced before the group moves.
    assert admin.journal[0] == ("fence", "distributary.default.big.r1")
    assert [e[0] for e in admin.journal] == ["fence", "commit"]
    assert admin.groups["distributary.default.big.r1"] == {"clicks": {0: 12, 1: 0}}
    entry = revisions(tmp_path)[KEY]
    [record] = entry["status"]["rewinds"]
    assert (record["requestId"], record["revision"], record["phase"]) == ("replay-1", 1, "Done")
    assert record["offsets"] == MOVES
    assert entry["status"]["revisions"][0]["checkpoint"] == "rewind-replay-1"
    assert read_run_state(tmp_path).views["big"]["rewinds"] == ["replay-1"]
    # A later run reads the file again: no second rewind, the checkpoint and record survive.
    later_admin = rewinding_admin()
    later = run(tmp_path, pipeline(rewind=TO_TIME), admin=later_admin)
    assert later_admin.journal == []
    assert later.specs[0].checkpoint_location == f"{before}/rewind-replay-1"
    assert revisions(tmp_path)[KEY]["status"]["rewinds"] == [record]
    # A new request id is carried out, and both are kept.
    again = rewinding_admin()
    run(tmp_path, pipeline(rewind={**TO_TIME, "requestId": "replay-2"}), admin=again)
    assert [e[0] for e in again.journal] == ["fence", "commit"]
    kept = revisions(tmp_path)[KEY]["status"]["rewinds"]
    assert [r["requestId"] for r in kept] == ["replay-1", "replay-2"]


def test_a_pending_rewind_left_by_a_killed_run_is_finished_with_its_recorded_offsets(
    tmp_path: Path,
) -> None:
    first_run(tmp_path)
    found = LocalRevisions.load(tmp_path)
    pending = {"requestId": "replay-1", "revision": 1, "phase": "Pending", "offsets": MOVES}
    found.views[KEY]["status"]["lastRewind"] = pending
    found.save()
    admin = rewinding_admin()
    admin.by_time = {"clicks": {0: 30, 1: 30}}  # where a new look would put it: not used
    run(tmp_path, pipeline(rewind=TO_TIME), admin=admin)
    assert [e for e in admin.journal if e[0] == "commit"] == [
        ("commit", "distributary.default.big.r1", {"clicks": {0: 12, 1: 0}})
    ]
    [record] = revisions(tmp_path)[KEY]["status"]["rewinds"]
    assert record["phase"] == "Done"


def test_the_moves_become_the_offsets_to_commit_and_a_line_for_people() -> None:
    assert targets(MOVES) == {"clicks": {0: 12, 1: 0}}
    record = {"requestId": "replay-1", "revision": 1, "phase": "Done", "offsets": MOVES}
    assert rewind_message(record) == (
        "rewound revision 1 for request replay-1: clicks[0] 40 -> 12, "
        "clicks[1] - -> 0; it reads on from there on a fresh checkpoint (rewind-replay-1)"
    )
