"""A program of the test node's that runs on the host, beside the node's namespace (kube-proxy,
kube-scheduler): started, ready once its health endpoint answers 200, stopped with the node."""

from __future__ import annotations

import atexit
import contextlib
import ssl
import time
import urllib.request
from pathlib import Path

from distributary import processes
from distributary.devtools.node_files import NodeError


class HostPart:
    """`binary` with `flags`, its log in `log`, ready when `health` (a URL) answers 200."""

    name = "program"

    def __init__(self, binary: Path, flags: list[str], log: Path, health: str) -> None:
        self.binary = binary
        self.flags = flags
        self.log = log
        self.health = health
        self._process: processes.Supervised | None = None

    def start(self, deadline: float) -> HostPart:
        """Start it and return once its health endpoint answers 200 (by `deadline`)."""
        atexit.register(self.stop)
        self._process = processes.start([str(self.binary), *self.flags], log=self.log)
        context = ssl._create_unverified_context()
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                said = f"the end of {self.log}:\n{self.tail()}"
                raise NodeError(f"{self.name} exited while starting; {said}")
            with (
                contextlib.suppress(OSError),  # not listening yet, or not ready (an HTTP error)
                urllib.request.urlopen(self.health, timeout=2, context=context) as answer,
            ):
                if answer.status == 200:
                    return self
            time.sleep(0.25)
        raise NodeError(f"{self.name} was not ready in time; the end of {self.log}:\n{self.tail()}")

    def tail(self, lines: int = 20) -> str:
        """The end of its log."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def exited(self) -> bool:
        """Whether it was started and has exited since."""
        return self._process is not None and self._process.poll() is not None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop it (SIGTERM, then SIGKILL after `timeout` seconds)."""
        atexit.unregister(self.stop)
        if self._process is not None:
            self._process.stop(timeout, what=self.name)
            self._process = None
