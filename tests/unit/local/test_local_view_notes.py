"""What `distributary run` tells of a view beyond its position: a refused change (in the live
table, the status line, the summary and run.json) and the rewinds carried out."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from distributary.local.state import RunState, read_run_state, write_run_state
from distributary.local.status import (
    Snapshot,
    ViewNote,
    ViewRow,
    one_line,
    problem_line,
    render,
)
from distributary.plan.status.conditions import Problem

LOST = Problem(
    "HistoryIncomplete",
    "input log clicks (topic clicks) has lost its history to retention: partition 1 starts at "
    "offset 250, not 0: a new revision would miss those records, so it is not started; set "
    "spec.upgrade.allowPartialHistory: true to reprocess what remains, or keep the serving "
    "revision (revert the change)",
)
REWIND = {
    "requestId": "replay-1",
    "revision": 1,
    "phase": "Done",
    "offsets": [{"topic": "clicks", "partition": 0, "fromOffset": 40, "toOffset": 12}],
    "completedAt": "2026-01-01T00:00:00Z",
}


def snapshot(note: ViewNote) -> Snapshot:
    row = ViewRow("big", 1, "big.r1", {"clicks": {0: 40}}, 0, "Running", 0.0, 0, note=note)
    return Snapshot(logs=(), views=(row,))


def test_a_refused_change_says_what_is_wrong_what_to_do_and_what_serves() -> None:
    line = problem_line("big", LOST, 1)
    assert line.startswith("view big: change refused (HistoryIncomplete): input log clicks")
    assert "partition 1 starts at offset 250" in line
    assert "allowPartialHistory: true" in line
    assert line.endswith(
        "(revert the change); or restore the input's history (its records from offset 0, e.g. "
        "produced again into a fresh --state-dir) and run again. Revision 1 keeps serving."
    )
    other = problem_line("big", Problem("ChangeForbidden", "output.mode changed"), 3)
    assert other == "view big: change refused (ChangeForbidden): output.mode changed. " + (
        "Revision 3 keeps serving."
    )


def test_the_summary_names_the_refusal_and_the_rewinds_done() -> None:
    view = snapshot(ViewNote(1, LOST, (REWIND,))).to_json()["views"]["big"]
    assert view["problem"] == {"reason": "HistoryIncomplete", "message": LOST.message}
    assert view["rewinds"] == [REWIND]
    plain = snapshot(ViewNote()).to_json()["views"]["big"]
    assert "problem" not in plain
    assert "rewinds" not in plain


def test_the_status_line_and_the_table_show_the_refusal() -> None:
    refused = snapshot(ViewNote(1, LOST))
    assert one_line(refused) == "big r1 lag 0 Running, change refused: HistoryIncomplete"
    assert one_line(snapshot(ViewNote())) == "big r1 lag 0 Running"
    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(render(refused))
    shown = " ".join(out.getvalue().split())  # the message under the table wraps to its width
    assert "Running; change refused: HistoryIncomplete (below)" in shown
    assert problem_line("big", LOST, 1) in shown


def test_run_json_keeps_each_views_serving_revision_refusal_and_rewinds(tmp_path: Path) -> None:
    views = {
        "big": {
            "namespace": "default",
            "servingRevision": 1,
            "problem": {"reason": "HistoryIncomplete", "message": LOST.message},
            "rewinds": ["replay-1"],
        }
    }
    write_run_state(tmp_path, RunState("127.0.0.1:9092", ("/p",), 42, {}, views))
    assert read_run_state(tmp_path).views == views
    assert RunState.from_json({"bootstrapServers": "h:1", "pid": 1}).views == {}
    with pytest.raises(ValueError, match="views: is not an object of view names"):
        RunState.from_json({"bootstrapServers": "h:1", "pid": 1, "views": ["big"]})
