"""`distributary run` as a person runs it: the clickstream example, its demo data, until caught up.

The command starts its own embedded broker in the state folder, creates the topics, appends the
demo files (the users, some of them twice, then the page views), runs the four views on local
Spark (one of them joins each page view with its user's row of the users table) and exits once
they have caught up, printing a JSON summary as its last line. A second run on the same state
folder resumes: the broker comes back with its data, the views from their checkpoints, and
nothing is processed twice. A third, after the checkpoints are deleted, starts each view from
its consumer group's committed offsets.

A fourth finds a view's SQL changed since (the state folder records each view's revisions, as a
view's status does under the operator): its revision 2 reads the input again from its start into
a topic of its own while revision 1 keeps serving; once revision 2 has caught up it serves,
revision 1 stops, and the view reading its output reprocesses in turn. The view whose definition
did not change keeps its revision.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "clickstream"
DATA = EXAMPLE / "data" / "page-views.jsonl"
USERS = EXAMPLE / "data" / "users.jsonl"


def distributary(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    """Run the command as installed, capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "distributary.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )


def summary_of(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, f"exit {result.returncode}:\n{result.stderr[-3000:]}"
    last = result.stdout.strip().splitlines()[-1]
    summary: dict[str, Any] = json.loads(last)
    return summary


def demo_records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def served(state: Path, log: str) -> list[tuple[int, int, Any, Any]]:
    """Every record of `log`'s serving topic that a committed reader sees, as `distributary tail`
    prints them (it starts the stopped run's embedded broker to read): (partition, offset, key,
    value), keys and values decoded from JSON, a tombstone's value None."""
    result = distributary("tail", log, "-n", "1000000", "--state-dir", str(state))
    assert result.returncode == 0, result.stderr[-3000:]
    decoder, rows = json.JSONDecoder(), []
    for line in result.stdout.splitlines():
        place, rest = line.split(" ", 1)
        partition, offset = (int(n) for n in place.split("/"))
        key: Any = None
        if rest.startswith("- "):
            rest = rest[2:]
        else:
            key, end = decoder.raw_decode(rest)
            rest = rest[end + 1 :]
        rows.append((partition, offset, key, None if rest == "(deleted)" else json.loads(rest)))
    return rows


def latest(rows: list[tuple[int, int, Any, Any]]) -> dict[str, Any]:
    """A table topic's rows as a table: each key's last value (a key lives in one partition)."""
    table: dict[str, Any] = {}
    for _, _, key, value in sorted(rows, key=lambda r: (r[0], r[1])):
        name = json.dumps(key, sort_keys=True)
        if value is None:
            table.pop(name, None)
        else:
            table[name] = value
    return table


def enriched_rows(records: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """What the enriched view's output must hold, as a multiset of the fields it copies."""
    return Counter(
        (
            r["user_id"],
            r["session_id"],
            r["url"],
            r["duration_ms"],
            (r.get("country") or "unknown").upper(),
        )
        for r in records
    )


def output_rows(rows: list[tuple[int, int, Any, Any]]) -> Counter[tuple[Any, ...]]:
    """The enriched output's records as the same multiset."""
    return Counter(
        (v["user_id"], v["session_id"], v["url"], v["duration_ms"], v["country"])
        for _, _, _, v in rows
    )


def per_user(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-user table the input implies: views and total duration of each user."""
    table: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("user_id") is None:
            continue
        row = table.setdefault(r["user_id"], {"views": 0, "total_duration_ms": None})
        row["views"] += 1
        if r.get("duration_ms") is not None:
            row["total_duration_ms"] = (row["total_duration_ms"] or 0) + r["duration_ms"]
    return {json.dumps({"user_id": user}): row for user, row in table.items()}


def enriched(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records the enriched view keeps (its WHERE clause)."""
    return [
        r
        for r in records
        if r.get("user_id") is not None
        and r.get("url") is not None
        and r.get("duration_ms") is not None
        and r["duration_ms"] >= 0
    ]


KEPT = "duration_ms >= 0"  # the enriched view's condition in the example ...
STRICTER = "duration_ms >= 1000"  # ... and after the fourth run's edit
TABLES = ("enriched-page-views", "views-per-user", "views-per-country")


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's Logs and views, each view with a short cutover window (the fourth run does
    not wait the default 10 s per view)."""
    folder = tmp_path_factory.mktemp("run")
    for name in ("logs.yaml", "views.yaml", "users.yaml"):
        shutil.copy(EXAMPLE / name, folder / name)
    views = folder / "views.yaml"
    text = views.read_text()
    assert KEPT in text
    views.write_text(text.replace("  sql: |", "  upgrade: {cutoverWindow: 1s}\n  sql: |"))
    return folder


@pytest.fixture(scope="module")
def state(pipeline: Path) -> Path:
    """The state folder the runs share."""
    return pipeline / "state"


@pytest.fixture(scope="module")
def history(pipeline: Path, state: Path) -> dict[str, Any]:
    """The summaries of the four runs, and what the outputs served before the fourth."""
    common = (str(pipeline), "--state-dir", str(state), "--until-caught-up", "--cores", "2")
    first = summary_of(
        distributary(
            "run", *common, "--produce", f"users={USERS}", "--produce", f"page-views={DATA}"
        )
    )
    second = summary_of(distributary("run", *common))
    # Lost checkpoints: each view starts again from its consumer group's committed offsets.
    shutil.rmtree(state / "checkpoints")
    third = summary_of(distributary("run", *common))
    before = {log: served(state, log) for log in TABLES}
    views = pipeline / "views.yaml"
    views.write_text(views.read_text().replace(KEPT, STRICTER))
    edited = summary_of(distributary("run", *common))
    return {"runs": (first, second, third), "served": before, "edited": edited}


@pytest.fixture(scope="module")
def runs(history: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The summaries of the first three runs (the example as it is)."""
    runs: tuple[dict[str, Any], ...] = history["runs"]
    return runs


def test_the_demo_data_is_appended_and_every_view_catches_up(
    runs: tuple[dict[str, Any], ...],
) -> None:
    first = runs[0]
    assert first["logs"]["page-views"]["records"] == len(demo_records())
    for name, view in first["views"].items():
        assert view["lag"] == 0, name
        assert view["state"] == "Running", name
        assert view["revision"] == 1
        assert view["deadLetters"] == 0


def test_the_views_outputs_hold_what_their_queries_say(
    runs: tuple[dict[str, Any], ...], history: dict[str, Any]
) -> None:
    first, before = runs[0], history["served"]
    kept = enriched(demo_records())
    assert 0 < len(kept) < len(demo_records())  # the demo data exercises the filter
    assert first["logs"]["enriched-page-views"]["topic"] == "enriched-page-views.r1"
    # Its offsets count a commit marker per transaction besides the records.
    assert first["logs"]["enriched-page-views"]["records"] >= len(kept)
    # Exactly the records the query keeps, each once: after a resumed run and a run that lost
    # its checkpoints and started again from the group's offsets (the fixture's three runs).
    assert output_rows(before["enriched-page-views"]) == enriched_rows(kept)
    users = {
        k: {c: v[c] for c in ("views", "total_duration_ms")}
        for k, v in latest(before["views-per-user"]).items()
    }
    assert users == per_user(demo_records())
    countries = Counter((r.get("country") or "unknown").upper() for r in kept)
    table = latest(before["views-per-country"])
    assert {json.loads(k)["country"]: v["views"] for k, v in table.items()} == countries


def test_each_page_view_is_written_once_with_its_users_plan(
    runs: tuple[dict[str, Any], ...], state: Path
) -> None:
    """The users were appended before the page views, the upgraded ones twice: every page view
    meets each user's latest row (a user without a row: unknown), once, through the three runs
    (the third, without its checkpoint, reads the table and the page views anew)."""
    plans: dict[str, str] = {}
    for line in USERS.read_text().splitlines():
        row = json.loads(line)
        plans[row["user_id"]] = row["plan"]
    assert len(USERS.read_text().splitlines()) > len(plans), "some users changed plan"
    expected = Counter(
        (r["user_id"], r.get("session_id"), r.get("url"), plans.get(r["user_id"], "unknown"))
        for r in demo_records()
        if r.get("user_id") is not None
    )
    found = Counter(
        (v["user_id"], v.get("session_id"), v.get("url"), v["plan"])
        for _, _, _, v in served(state, "views-with-plan")
    )
    assert found == expected
    assert {"pro", "unknown"} <= {plan for *_, plan in found}


def test_each_views_position_is_its_inputs_end(runs: tuple[dict[str, Any], ...]) -> None:
    first = runs[0]
    logs, views = first["logs"], first["views"]
    page_views = {logs["page-views"]["topic"]: logs["page-views"]["endOffsets"]}
    assert views["enriched-page-views"]["position"] == page_views
    assert views["views-per-user"]["position"] == page_views
    enriched_log = logs["enriched-page-views"]
    # Every partition, empty ones too (at 0): the group names what Spark's source assigned.
    assert views["views-per-country"]["position"] == {
        enriched_log["topic"]: enriched_log["endOffsets"]
    }


def test_a_second_run_resumes_without_processing_anything_twice(
    runs: tuple[dict[str, Any], ...],
) -> None:
    first, second, _ = runs
    for name in ("page-views", "enriched-page-views", "views-per-user", "views-per-country"):
        assert second["logs"][name]["endOffsets"] == first["logs"][name]["endOffsets"], name
    for name, view in second["views"].items():
        assert view["position"] == first["views"][name]["position"], name
        assert view["lag"] == 0


def test_a_file_that_does_not_match_the_schema_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user_id": "u1", "duration_ms": "long"}\n')
    result = distributary(
        "run", str(EXAMPLE), "--state-dir", str(tmp_path / "state"), "--produce",
        f"page-views={bad}", "--until-caught-up",
    )  # fmt: skip
    assert result.returncode == 1
    assert f"{bad}:1: duration_ms" in result.stderr
    assert "none was sent" in result.stderr
    assert "Traceback" not in result.stderr


def test_checkpoint_files_are_made_in_java_without_a_checksum_file_each(
    runs: tuple[dict[str, Any], ...], state: Path
) -> None:
    """Distributary's manager of local checkpoint files (`runner/jvm/LocalCheckpointFiles.java`)
    makes each offsets and commits file in Java: no `chmod` process and no `.crc` file beside it,
    as Hadoop's local file system makes for each. The second run resumed from such files."""
    logs = [
        p for p in (state / "checkpoints").rglob("*") if p.parent.name in ("offsets", "commits")
    ]
    assert any(p.name.isdigit() for p in logs), logs
    assert [p for p in logs if p.name.endswith(".crc")] == []


def test_a_view_without_a_checkpoint_starts_from_its_groups_offsets(
    runs: tuple[dict[str, Any], ...],
) -> None:
    first, _, third = runs
    for name in ("enriched-page-views", "views-per-user", "views-per-country"):
        # Nothing was read again from the start: the outputs did not grow.
        assert third["logs"][name]["endOffsets"] == first["logs"][name]["endOffsets"], name
        assert third["views"][name]["position"] == first["views"][name]["position"], name


def test_wait_returns_once_the_view_covers_a_record_and_says_what_is_missing(
    runs: tuple[dict[str, Any], ...], state: Path
) -> None:
    ends = runs[-1]["logs"]["page-views"]["endOffsets"]
    partition, end = next((int(p), o) for p, o in ends.items() if o > 0)
    covered = distributary(
        "wait", "views-per-user", "--state-dir", str(state), "--caught-up",
        "--covers", f"page-views:{partition}:{end - 1}",
    )  # fmt: skip
    assert covered.returncode == 0, covered.stderr
    assert covered.stdout.startswith("views-per-user: done (group distributary.default.")
    # The run has stopped, so a record it never read is reported at once, with the position.
    beyond = distributary(
        "wait", "views-per-user", "--state-dir", str(state),
        "--covers", f"page-views:{partition}:{end}",
    )  # fmt: skip
    assert beyond.returncode == 1
    assert f"still waiting for page-views:{partition}:{end} (at {end})" in beyond.stderr
    unknown = distributary(
        "wait", "views-per-user", "--state-dir", str(state), "--covers", "orders:0:1"
    )
    assert unknown.returncode == 1
    assert "it does not read log 'orders'; it reads page-views" in unknown.stderr


def test_the_changed_view_serves_revision_2_with_the_new_querys_complete_output(
    runs: tuple[dict[str, Any], ...], history: dict[str, Any], state: Path
) -> None:
    first, edited = runs[0], history["edited"]
    assert first["views"]["enriched-page-views"]["revision"] == 1
    view = edited["views"]["enriched-page-views"]
    assert (view["revision"], view["outputTopic"], view["lag"]) == (
        2,
        "enriched-page-views.r2",
        0,
    )
    kept = [r for r in enriched(demo_records()) if r["duration_ms"] >= 1000]
    assert 0 < len(kept) < len(enriched(demo_records()))
    log = edited["logs"]["enriched-page-views"]
    assert log["topic"] == "enriched-page-views.r2"
    # Its offsets count a commit marker per transaction besides the records; the records
    # themselves are exactly what the new query keeps, each once.
    assert log["records"] >= len(kept)
    assert output_rows(served(state, "enriched-page-views")) == enriched_rows(kept)


def test_the_reader_of_its_output_reprocesses_in_turn_and_the_other_view_keeps_its_revision(
    runs: tuple[dict[str, Any], ...], history: dict[str, Any]
) -> None:
    # Before the edit, the third run rebuilt the aggregates whose checkpoints were lost as
    # revisions of their own: the edit counts from those.
    before, edited = runs[-1]["views"], history["edited"]["views"]
    country = edited["views-per-country"]
    assert country["revision"] == before["views-per-country"]["revision"] + 1
    assert list(country["position"]) == ["enriched-page-views.r2"]
    assert edited["views-per-user"]["revision"] == before["views-per-user"]["revision"]


def test_the_state_folder_records_the_revisions_and_serving_topics(
    history: dict[str, Any], state: Path
) -> None:
    edited = history["edited"]["views"]
    revisions = json.loads((state / "revisions.json").read_text())["views"]
    rows = {
        r["revision"]: r["phase"]
        for r in revisions["default/enriched-page-views"]["status"]["revisions"]
    }
    assert rows == {1: "Retiring", 2: "Serving"}
    change = revisions["default/enriched-page-views"]["status"]["lastChange"]
    assert change["classification"] == "Reprocess"
    assert any(reason.startswith("sql changed") for reason in change["reasons"])
    topics = json.loads((state / "run.json").read_text())["logs"]
    assert topics["enriched-page-views"]["topic"] == "enriched-page-views.r2"
    for view in ("views-per-country", "views-per-user"):
        assert topics[view]["topic"] == f"{view}.r{edited[view]['revision']}", view


def test_wait_follows_the_serving_revision_after_the_cutover(
    history: dict[str, Any], state: Path
) -> None:
    ends = history["edited"]["logs"]["page-views"]["endOffsets"]
    partition, end = next((int(p), o) for p, o in ends.items() if o > 0)
    covered = distributary(
        "wait", "enriched-page-views", "--state-dir", str(state), "--caught-up",
        "--covers", f"page-views:{partition}:{end - 1}",
    )  # fmt: skip
    assert covered.returncode == 0, covered.stderr
    group = "distributary.default.enriched-page-views.r2"
    assert covered.stdout.startswith(f"enriched-page-views: done (group {group}, lag 0)")
