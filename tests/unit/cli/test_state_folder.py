"""A state folder the commands cannot use: one line naming the file and the fix, exit status 1,
no traceback; and for `distributary run`, before any broker starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from distributary.cli import main
from distributary.local.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[3]
CLICKSTREAM = ROOT / "examples" / "clickstream"
FIX = "delete it to start every view at revision 1 again (their outputs are recomputed)"


@pytest.fixture
def corrupt_revisions(tmp_path: Path) -> Path:
    """A state folder whose revisions.json is not JSON."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "revisions.json").write_text("{not json")
    return state


def test_run_reports_a_corrupt_revisions_file_before_the_broker_starts(
    corrupt_revisions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def start(_broker: EmbeddedBroker) -> EmbeddedBroker:
        raise AssertionError("the embedded broker started before revisions.json was read")

    monkeypatch.setattr(EmbeddedBroker, "start", start)
    result = CliRunner().invoke(
        main, ["run", str(CLICKSTREAM), "--state-dir", str(corrupt_revisions)]
    )
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {corrupt_revisions / 'revisions.json'} cannot be read (")
    assert lines[0].endswith(FIX)
    assert "Traceback" not in result.output


def test_the_command_prints_no_traceback_for_a_corrupt_revisions_file(
    corrupt_revisions: Path,
) -> None:
    # A broker that is never reached: the state folder is read before Kafka is used.
    command = [sys.executable, "-m", "distributary.cli", "run", str(CLICKSTREAM)]
    options = ["--state-dir", str(corrupt_revisions), "--bootstrap-servers", "127.0.0.1:1"]
    result = subprocess.run(
        [*command, *options], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {corrupt_revisions / 'revisions.json'} cannot be read (")
    assert lines[0].endswith(FIX)


def test_wait_reports_a_corrupt_run_state_as_one_line(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("{not json")
    result = CliRunner().invoke(
        main, ["wait", "views-per-user", "--caught-up", "--state-dir", str(tmp_path)]
    )
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{tmp_path / 'run.json'} is corrupt" in lines[0]
    assert "delete it and start `distributary run` again" in lines[0]
