"""A throw-away Redis server for tests and benchmarks: the Debian package's `redis-server`.

It listens on a free loopback port (and, with `pods_at`, on the address a test node's pods reach
the host at), keeps nothing on disk (no snapshots, no append-only
file), so each start is empty, and is asked to die with this process, so a killed test run leaves
no server behind. Its working folder and log are under the given folder.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import socket
from pathlib import Path
from types import TracebackType

from distributary import processes
from distributary.errors import DistributaryError
from distributary.processes import free_port

INSTALL_HINT = "run tools/system-packages.sh (it installs redis-server)"


class RedisError(DistributaryError, RuntimeError):
    """The test Redis could not start; the message says why."""


class RedisServer:
    """A Redis server on 127.0.0.1 (and `pods_at`) without persistence, working in `folder`."""

    def __init__(
        self, folder: Path, port: int | None = None, *, pods_at: str | None = None
    ) -> None:
        self.folder = folder.resolve()
        self._port = port or 0
        self.pods_at = pods_at
        self._process: processes.Supervised | None = None

    @property
    def port(self) -> int:
        """The server's TCP port (chosen at start)."""
        return self._port

    @property
    def url(self) -> str:
        """`redis://127.0.0.1:PORT/0`, for redis-py's `Redis.from_url`."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_file(self) -> Path:
        """The server's log."""
        return self.folder / "redis.log"

    def start(self, timeout: float = 30.0) -> RedisServer:
        """Start the server and return once it answers PING."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisError(f"redis-server is not installed: {INSTALL_HINT}")
        self.folder.mkdir(parents=True, exist_ok=True)
        self._port = self._port or free_port()
        command = [
            binary,
            "--bind",
            *(["127.0.0.1", self.pods_at] if self.pods_at else ["127.0.0.1"]),
            # With an address beside loopback and no password, Redis would refuse its clients.
            "--protected-mode",
            "no" if self.pods_at else "yes",
            "--port",
            str(self._port),
            "--dir",
            str(self.folder),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--logfile",
            str(self.log_file),
        ]
        self._process = processes.start(command)
        atexit.register(self.stop)
        self._wait_until_serving(timeout)
        return self

    def _wait_until_serving(self, timeout: float) -> None:
        assert self._process is not None
        if self._process.wait_until_serving(self._pong, timeout, interval=0.05):
            return
        if self._process.poll() is not None:
            raise RedisError(
                f"redis-server exited with code {self._process.returncode} while starting; "
                f"see {self.log_file}"
            )
        self.kill()
        raise RedisError(f"redis-server did not start within {timeout:.0f}s; see {self.log_file}")

    def _pong(self) -> bool:
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self._port), 0.5) as sock,
        ):
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
        return False

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the server down (SIGTERM), killing it if that takes too long."""
        process, self._process = self._process, None
        if process is None:
            return
        atexit.unregister(self.stop)
        process.stop(timeout)

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        process, self._process = self._process, None
        if process is None:
            return
        atexit.unregister(self.stop)
        process.kill()

    def __enter__(self) -> RedisServer:
        return self.start() if self._process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
