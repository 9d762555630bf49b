"""`distributary run` in the background for tests that kill it and run it again: its stderr in a
file, SIGKILL for it (and its Connect worker), SIGINT to stop it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.integration.spark_pipelines import wait_for_run

from distributary.local.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]


class Run:
    """A `distributary run` in the background, its stderr in a file."""

    def __init__(self, folders: dict[str, Path], broker: EmbeddedBroker, pipeline: Path) -> None:
        self.state = folders["state"]
        self.said = folders["state"].parent / f"run-{time.monotonic_ns()}.err"
        err = self.said.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "distributary.cli", "run", str(pipeline),
             "--bootstrap-servers", broker.bootstrap_servers,
             "--state-dir", str(folders["state"]), "--secrets", str(folders["secrets"]),
             "--cores", "1"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=ROOT,
            start_new_session=True,
        )  # fmt: skip
        err.close()  # the run writes through its own copy

    def wait(self, what: str, probe: Any, timeout: float = 240) -> None:
        wait_for_run(what, probe, self.process, self.said, timeout)

    def kill(self, worker: bool = True) -> None:
        """SIGKILL for the run and what it started in its process group; and for its Connect
        worker too, unless `worker` is False (it is then told to stop when its parent dies)."""
        pid_file = self.state / "connect" / "worker.pid"
        pid = int(pid_file.read_text()) if worker and pid_file.exists() else 0
        os.killpg(self.process.pid, signal.SIGKILL)
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> str:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(120)
        return self.said.read_text()
