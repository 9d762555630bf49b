"""Reprocessing in `distributary run`: a view's SQL changes between two runs.

The second run finds the view's definition changed since the first (the state folder records
each view's revisions, as a view's status does under the operator): revision 2 reads the input
again from its start into a topic of its own while revision 1 keeps serving; once revision 2 has
caught up it serves, revision 1 stops, and the view reading its output reprocesses in turn.
The view whose definition did not change keeps its revision.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_local_run import (
    DATA,
    EXAMPLE,
    distributary,
    enriched,
    enriched_rows,
    output_rows,
    served,
    summary_of,
)

KEPT = "duration_ms >= 0"
STRICTER = "duration_ms >= 1000"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    folder = tmp_path_factory.mktemp("pipeline")
    for name in ("logs.yaml", "views.yaml"):
        shutil.copy(EXAMPLE / name, folder / name)
    views = folder / "views.yaml"
    text = views.read_text()
    assert KEPT in text
    # A short cutover window, so the test does not wait the default 10 s per view.
    views.write_text(text.replace("  sql: |", "  upgrade: {cutoverWindow: 1s}\n  sql: |"))
    state = folder / "state"
    common = (str(folder), "--state-dir", str(state), "--until-caught-up", "--cores", "2")
    first = summary_of(distributary("run", *common, "--produce", f"page-views={DATA}"))
    views.write_text(views.read_text().replace(KEPT, STRICTER))
    second = summary_of(distributary("run", *common))
    return state, first, second


def records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def test_the_changed_view_serves_revision_2_with_the_new_querys_complete_output(
    runs: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    state, first, second = runs
    assert first["views"]["enriched-page-views"]["revision"] == 1
    view = second["views"]["enriched-page-views"]
    assert (view["revision"], view["outputTopic"], view["lag"]) == (
        2,
        "enriched-page-views.r2",
        0,
    )
    kept = [r for r in enriched(records()) if r["duration_ms"] >= 1000]
    assert 0 < len(kept) < len(enriched(records()))
    log = second["logs"]["enriched-page-views"]
    assert log["topic"] == "enriched-page-views.r2"
    # Its offsets count a commit marker per transaction besides the records; the records
    # themselves are exactly what the new query keeps, each once.
    assert log["records"] >= len(kept)
    assert output_rows(served(state, "enriched-page-views")) == enriched_rows(kept)


def test_the_reader_of_its_output_reprocesses_in_turn_and_the_other_view_keeps_its_revision(
    runs: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    _, _, second = runs
    country = second["views"]["views-per-country"]
    assert country["revision"] == 2
    assert list(country["position"]) == ["enriched-page-views.r2"]
    assert second["views"]["views-per-user"]["revision"] == 1


def test_the_state_folder_records_the_revisions_and_serving_topics(
    runs: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    state, _, _ = runs
    revisions = json.loads((state / "revisions.json").read_text())["views"]
    rows = {
        r["revision"]: r["phase"]
        for r in revisions["default/enriched-page-views"]["status"]["revisions"]
    }
    assert rows == {1: "Retiring", 2: "Serving"}
    change = revisions["default/enriched-page-views"]["status"]["lastChange"]
    assert change["classification"] == "Reprocess"
    assert any(reason.startswith("sql changed") for reason in change["reasons"])
    served = json.loads((state / "run.json").read_text())["logs"]
    assert served["enriched-page-views"]["topic"] == "enriched-page-views.r2"
    assert served["views-per-country"]["topic"] == "views-per-country.r2"
    assert served["views-per-user"]["topic"] == "views-per-user.r1"


def test_wait_follows_the_serving_revision_after_the_cutover(
    runs: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    state, _, second = runs
    ends = second["logs"]["page-views"]["endOffsets"]
    partition, end = next((int(p), o) for p, o in ends.items() if o > 0)
    covered = distributary(
        "wait", "enriched-page-views", "--state-dir", str(state), "--caught-up",
        "--covers", f"page-views:{partition}:{end - 1}",
    )  # fmt: skip
    assert covered.returncode == 0, covered.stderr
    group = "distributary.default.enriched-page-views.r2"
    assert covered.stdout.startswith(f"enriched-page-views: done (group {group}, lag 0)")
