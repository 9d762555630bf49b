"""`distributary run` killed with SIGKILL leaves nothing of its own behind.

SIGKILL runs no clean-up, so what the run started (the embedded broker's JVM, the runner and its
Spark JVM) must stop on its own: within 30 seconds, even when the broker was killed first and the
runner's queries hang on a dead broker while they stop (they once hung for more than eight
minutes, `Timed out waiting for a node assignment`, with a 2 GB JVM). The run's processes are
found by a variable set in the run's environment (which all of them inherit) or by the state
folder in their command lines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.integration.spark_pipelines import wait_for_run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc"),
]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "clickstream"
DATA = EXAMPLE / "data" / "page-views.jsonl"
LIMIT = 30.0  # seconds what the run started may outlive it
MARK = "DISTRIBUTARY_KILLED_RUN"


def family(state: Path) -> dict[int, str]:
    """The living processes of the run on `state` (pid -> command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
            status = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        ours = f"{MARK}={state}".encode() in environ or str(state).encode() in cmdline
        if ours and status != "Z":
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def broker_pid(state: Path) -> int | None:
    return next((p for p, c in family(state).items() if " kafka.Kafka " in c), None)


def spark_running(state: Path) -> bool:
    """The runner and its Spark JVM run, and Spark has started a query (it wrote progress)."""
    running = family(state).values()
    runner = any("distributary.runner" in c for c in running)
    jvm = any("org.apache.spark.deploy.SparkSubmit" in c for c in running)
    return runner and jvm and any((state / "checkpoints").rglob("offsets/0"))


def start_run(state: Path) -> tuple[subprocess.Popen[bytes], Path]:
    said = state.parent / "run.err"
    with said.open("w") as err:
        run = subprocess.Popen(
            [sys.executable, "-m", "distributary.cli", "run", str(EXAMPLE),
             "--state-dir", str(state), "--cores", "1", "--produce", f"page-views={DATA}"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=ROOT,
            env={**os.environ, MARK: str(state)},
        )  # fmt: skip
    return run, said


def left_after(state: Path, limit: float) -> tuple[float, dict[int, str]]:
    """Seconds until nothing of the run lives (at most `limit`), and what lives then."""
    started = time.monotonic()
    while family(state) and time.monotonic() - started < limit:
        time.sleep(0.5)
    return time.monotonic() - started, family(state)


def kill_all(pids: dict[int, str]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("broker", ["alive", "killed first"])
def test_nothing_the_run_started_outlives_its_sigkill(tmp_path: Path, broker: str) -> None:
    state = tmp_path / "state"
    run, said = start_run(state)
    try:
        wait_for_run("Spark runs a query", lambda: spark_running(state), run, said, 400)
        if broker == "killed first":
            pid = broker_pid(state)
            assert pid is not None, family(state)
            os.kill(pid, signal.SIGKILL)
            time.sleep(3)  # the runner's consumers now wait for a broker that is gone
        run.send_signal(signal.SIGKILL)
        run.wait(30)
        took, left = left_after(state, LIMIT)
    finally:
        run.kill()
        run.wait()
        kill_all(family(state))
    assert not left, f"alive {LIMIT:.0f}s after the run's SIGKILL: {left}"
    print(f"nothing of the run left {took:.1f}s after its SIGKILL (broker {broker})")
