"""`distributary produce` and `tail` as a person meets them when something is wrong (no Kafka).

Also the run-state file they read: written atomically, read back, refused with a clear message
when it is corrupt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from distributary.cli import main
from distributary.local.state import (
    RunState,
    RunStateError,
    ServedLog,
    find_run_state,
    pid_alive,
    read_run_state,
    write_run_state,
)
from distributary.processes import free_port

ROOT = Path(__file__).resolve().parents[3]
CLICKSTREAM = ROOT / "examples" / "clickstream"

SCHEMALESS = """\
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: raw}
"""


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def dead_pid() -> int:
    process = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(process.stdout)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def test_produce_needs_a_file_or_a_count(state_dir: Path) -> None:
    for extra in (
        [],
        ["--file", str(CLICKSTREAM / "data" / "page-views.jsonl"), "--generate", "3"],
    ):
        code, _, err = run("produce", "page-views", "--state-dir", str(state_dir), *extra)
        assert code == 1
        assert err == "error: give the records: either --file F.jsonl or --generate N\n"


def test_produce_without_a_pipeline_or_a_run_says_how_to_name_one(state_dir: Path) -> None:
    code, _, err = run("produce", "page-views", "--generate", "1", "--state-dir", str(state_dir))
    assert code == 1
    assert "pass --pipeline PATH" in err
    assert "start `distributary run PATH`" in err


def test_an_unknown_log_is_refused_with_the_nearest_name(state_dir: Path) -> None:
    code, _, err = run(
        "produce",
        "page-view",
        "--generate",
        "1",
        "--pipeline",
        str(CLICKSTREAM),
        "--state-dir",
        str(state_dir),
    )
    assert code == 1
    assert "no Log 'page-view' in the pipeline (did you mean 'page-views'?)" in err
    assert "views-per-user" in err  # the logs there are are listed


def test_a_views_output_is_refused(state_dir: Path) -> None:
    code, _, err = run(
        "produce",
        "views-per-user",
        "--generate",
        "1",
        "--pipeline",
        str(CLICKSTREAM),
        "--state-dir",
        str(state_dir),
    )
    assert code == 1
    assert err == (
        "error: Log 'views-per-user' is the output of DerivedView 'views-per-user': only its view "
        "writes it (a log has one writer); produce to its input instead (page-views)\n"
    )


def test_invalid_lines_are_reported_and_nothing_is_sent(tmp_path: Path, state_dir: Path) -> None:
    data = tmp_path / "views.jsonl"
    data.write_text(
        '{"user_id": "u1", "ts": "2025-05-01T12:00:00Z", "duration_ms": 5}\n'
        "\n"
        '{"user_id": "u2", "duration_ms": "five"}\n'
        '{"user": "u3", "ts": "noon"}\n'
        "{not json\n"
    )
    # No broker is given or recorded: the file is refused before any broker is looked for.
    code, out, err = run(
        "produce",
        "page-views",
        "--file",
        str(data),
        "--pipeline",
        str(CLICKSTREAM),
        "--state-dir",
        str(state_dir),
    )
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    assert lines[:4] == [
        f'{data}:3: duration_ms: is the string "five", not INT: write a whole number such as 42',
        f"{data}:4: user: is not a column of the Log's schema (did you mean 'user_id'?): fix the "
        "name, or add it to the Log's spec.schema",
        f'{data}:4: ts: is the string "noon", not TIMESTAMP: write an ISO 8601 string such as '
        '"2025-05-01T12:30:00Z"',
        f"{data}:5: is not valid JSON: Expecting property name enclosed in double quotes "
        "(column 2)",
    ]
    assert lines[4] == (
        f"error: 3 of 4 records in {data} are invalid, so none was sent: fix them, or pass "
        "--skip-invalid to send the 1 valid one(s)"
    )


def test_skip_invalid_goes_on_with_the_valid_records(tmp_path: Path, state_dir: Path) -> None:
    data = tmp_path / "views.jsonl"
    data.write_text('{"user_id": "u1"}\n{"user_id": 1}\n')
    code, _, err = run(
        "produce",
        "page-views",
        "--file",
        str(data),
        "--skip-invalid",
        "--pipeline",
        str(CLICKSTREAM),
        "--state-dir",
        str(state_dir),
    )
    assert code == 1  # checked and skipped; then there is no broker to send to
    assert f"{data}:2: user_id: is the number 1, not STRING" in err
    assert f"skipping 1 invalid record(s) of {data}" in err
    assert "error: no Kafka broker to use" in err


def test_records_can_come_from_standard_input(state_dir: Path) -> None:
    code, _, err = run(
        "produce",
        "page-views",
        "--file",
        "-",
        "--pipeline",
        str(CLICKSTREAM),
        "--state-dir",
        str(state_dir),
        stdin='{"duration_ms": -1.5}\n',
    )
    assert code == 1
    assert err.startswith("-:1: duration_ms: is the number -1.5, not INT")


def test_without_a_broker_produce_says_to_start_a_run_or_name_one(state_dir: Path) -> None:
    code, _, err = run(
        "produce",
        "page-views",
        "--generate",
        "5",
        "--pipeline",
        str(CLICKSTREAM),
        "--state-dir",
        str(state_dir),
    )
    assert code == 1
    assert err == (
        f"error: no Kafka broker to use: no `distributary run` has recorded one in {state_dir}; "
        "start `distributary run PATH`, or pass --bootstrap-servers HOST:PORT\n"
    )


def test_a_stopped_run_whose_broker_is_gone_is_named(state_dir: Path) -> None:
    pid = dead_pid()
    write_run_state(state_dir, RunState(f"127.0.0.1:{free_port()}", (str(CLICKSTREAM),), pid))
    code, _, err = run("produce", "page-views", "--generate", "5", "--state-dir", str(state_dir))
    assert code == 1
    assert f"the `distributary run` recorded in {state_dir} (pid {pid}) has stopped" in err
    assert "start `distributary run` again, or pass --bootstrap-servers" in err


def test_made_up_records_need_a_schema(tmp_path: Path, state_dir: Path) -> None:
    pipeline = tmp_path / "raw.yaml"
    pipeline.write_text(SCHEMALESS)
    code, _, err = run(
        "produce",
        "raw",
        "--generate",
        "5",
        "--pipeline",
        str(pipeline),
        "--state-dir",
        str(state_dir),
    )
    assert code == 1
    assert "Log 'raw' declares no spec.schema, so records cannot be made up: use --file" in err


def test_a_corrupt_run_state_is_refused_with_the_fix(state_dir: Path) -> None:
    state_dir.mkdir()
    (state_dir / "run.json").write_text("{not json")
    for command in (["produce", "page-views", "--generate", "1"], ["tail", "page-views"]):
        code, _, err = run(*command, "--state-dir", str(state_dir))
        assert code == 1
        assert f"{state_dir / 'run.json'} is corrupt" in err
        assert "delete it and start `distributary run` again" in err


def test_tail_of_an_unknown_log_and_without_a_broker(state_dir: Path) -> None:
    code, _, err = run(
        "tail", "nope", "--pipeline", str(CLICKSTREAM), "--state-dir", str(state_dir)
    )
    assert (code, err.startswith("error: no Log 'nope' in the pipeline")) == (1, True)
    code, _, err = run(
        "tail", "page-views", "--pipeline", str(CLICKSTREAM), "--state-dir", str(state_dir)
    )
    assert code == 1
    assert "error: no Kafka broker to use" in err


def test_tail_refuses_a_negative_count(state_dir: Path) -> None:
    code, _, err = run("tail", "page-views", "-n", "-1", "--state-dir", str(state_dir))
    assert code == 2
    assert "-n" in err


# The run-state file ----------------------------------------------------------------------------


def test_the_run_state_is_written_atomically_and_read_back(state_dir: Path) -> None:
    state = RunState(
        "127.0.0.1:9092",
        ("/pipelines/clickstream",),
        os.getpid(),
        {
            "page-views": ServedLog("page-views"),
            "views-per-user": ServedLog("views-per-user.r2", "shop"),
        },
    )
    path = write_run_state(state_dir, state)
    assert sorted(p.name for p in state_dir.iterdir()) == ["run.json"]  # no temporary file left
    assert json.loads(path.read_text()) == {
        "bootstrapServers": "127.0.0.1:9092",
        "paths": ["/pipelines/clickstream"],
        "pid": os.getpid(),
        "logs": {
            "page-views": {"topic": "page-views", "namespace": "default"},
            "views-per-user": {"topic": "views-per-user.r2", "namespace": "shop"},
        },
    }
    read = read_run_state(state_dir)
    assert read == state
    assert read.alive()
    assert read.serving_topic("views-per-user", "shop") == "views-per-user.r2"
    assert read.serving_topic("views-per-user") is None  # another namespace
    write_run_state(state_dir, RunState("127.0.0.1:9093", pid=os.getpid()))
    assert read_run_state(state_dir).bootstrap_servers == "127.0.0.1:9093"


def test_a_missing_run_state_is_none_or_a_clear_error(state_dir: Path) -> None:
    assert find_run_state(state_dir) is None
    with pytest.raises(RunStateError, match=r"does not exist: no `distributary run` has used"):
        read_run_state(state_dir)


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ("[]", "is not a JSON object"),
        ('{"paths": [], "pid": 1}', "bootstrapServers: is missing"),
        ('{"bootstrapServers": "h:1", "pid": "1"}', "pid: is missing or not a number"),
        ('{"bootstrapServers": "h:1", "pid": 1, "paths": "p"}', "paths: is not a list"),
        ('{"bootstrapServers": "h:1", "pid": 1, "logs": {"a": {}}}', "logs.a: needs a topic"),
    ],
)
def test_a_corrupt_run_state_names_what_is_wrong(state_dir: Path, content: str, field: str) -> None:
    state_dir.mkdir()
    (state_dir / "run.json").write_text(content)
    with pytest.raises(RunStateError, match="is corrupt") as raised:
        read_run_state(state_dir)
    assert field in str(raised.value)


def test_a_pid_is_alive_only_while_its_process_runs() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(dead_pid())
    assert not pid_alive(0)
    assert not RunState("h:1", pid=-1).alive()
