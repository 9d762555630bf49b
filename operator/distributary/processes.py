"""One supervised child process: how every child server (broker, Connect, PostgreSQL, Redis, the
control plane, the Spark operator beds, the runners, the Sink processes) is started and stopped.

The promise is that no child outlives its parent by more than 30 seconds, whatever killed the
parent (SIGKILL runs no clean-up), and that a graceful stop is bounded. Linux's
`prctl(PR_SET_PDEATHSIG)` alone does not keep it: it fires when the *thread* that forked dies (the
operator starts children from worker threads), and it reaches only the direct child, not the JVM a
runner or a script starts. So each child runs under a small keeper, this very file run as a script
(standard library only, `python -I -S`, about 20 ms):

    parent --pipe--> keeper (own session) --fork/exec--> child (own process group) -> its children

- The keeper holds the read end of a pipe whose write end only the parent holds (not inherited:
  other children never get it). The kernel closes it when the parent process dies, by any cause
  and whichever thread started the child: the keeper reads end-of-file, stops the child as a stop
  would, with at most `ORPHAN_GRACE` seconds of grace (also when the parent dies during a longer
  stop), and goes. Only the operator's local runners, which its successor adopts by their pid
  files, are started to `outlive_parent`.
- The child leads its own process group, which its children join (pyspark's JVM, spark-submit's);
  the keeper signals and kills that whole group, and kills what is left of it as soon as the child
  exits, so nothing it started stays behind.
- A stop is a line written to the pipe (the grace in seconds): the keeper sends the stop signal
  (SIGTERM, or what the launcher asks for) to the group, or to the child alone when its own
  shutdown needs its children alive (the runner stops its queries through its JVM), and SIGKILLs
  the group at the deadline. The parent waits a little longer and kills the group itself if the
  keeper is gone or stuck.
- The keeper is forked from the parent but forks the child from its own single thread, so the
  child's PDEATHSIG (SIGKILL) is tied to the keeper for good: a keeper that is itself killed takes
  its child along (though not the child's own children: the keeper is only ever killed with them).
- Why a process and not a thread of the parent: a thread dies with the parent, and the parent's
  death is exactly when someone must act.

`pid` is the child's own (runners write it in their files); the exit code is the child's, a child
killed by a signal shows as a negative code, as with `subprocess.Popen`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

ORPHAN_GRACE = 10.0  # seconds a child is given to stop once its parent is gone
KEEPER_START = 30.0  # seconds to wait for the keeper to say the child's pid
PR_SET_PDEATHSIG = 1  # prctl(2)


class Supervised:
    """A child process running under its keeper; see the module's docstring."""

    def __init__(self, keeper: subprocess.Popen[bytes], pid: int, watch: int, report: int) -> None:
        self._keeper = keeper
        self.pid = pid  # the child's
        self._watch = watch  # write end of the pipe the keeper watches
        self._report = report  # read end of the keeper's reports

    @property
    def returncode(self) -> int | None:
        """The child's exit code (negative: the signal that killed it); None while it runs."""
        return self._keeper.returncode

    def poll(self) -> int | None:
        """The child's exit code once it has exited, else None."""
        code = self._keeper.poll()
        if code is not None:
            self._close()
        return code

    def wait(self, timeout: float | None = None) -> int:
        """Wait until the child has exited (raises `subprocess.TimeoutExpired` after `timeout`)."""
        code = self._keeper.wait(timeout)
        self._close()
        return code

    def wait_until_serving(
        self, ready: Callable[[], bool] | int, timeout: float, interval: float = 0.2
    ) -> bool:
        """Wait until `ready()` is true (given a port: until it accepts connections on loopback);
        False if the child exits first or `timeout` seconds pass (`poll()` tells which)."""
        check = ready if callable(ready) else (lambda: port_open(ready))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.poll() is not None:
                return False
            if check():
                return True
            time.sleep(interval)
        return False

    def stop(
        self, timeout: float = 30.0, *, say: Callable[[str], None] | None = None, what: str = ""
    ) -> int:
        """Stop the child (its stop signal, then SIGKILL to its whole process group after
        `timeout` seconds); its exit code. When it had to be killed and `what` names it, `say`
        is told (by default stderr)."""
        if self._keeper.poll() is None:
            self.ask_to_stop(timeout)
            try:
                self._keeper.wait(timeout + 5)
            except subprocess.TimeoutExpired:
                self._kill_all()
        if b"killed" in self._reports() and what:
            message = f"{what} did not stop within {timeout:.0f}s; killed it"
            (say or (lambda line: print(line, file=sys.stderr)))(message)
        return self.wait()

    def ask_to_stop(self, timeout: float = 30.0) -> None:
        """Begin `stop` without waiting (`stop` then waits), to stop several at once."""
        with contextlib.suppress(OSError):
            os.write(self._watch, f"{timeout}\n".encode())

    def kill(self) -> int:
        """Kill the child and its process group at once (SIGKILL), as a crash would."""
        if self._keeper.poll() is None:
            self._kill_all()
        return self.wait()

    def _kill_all(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self._keeper.kill()
        self._keeper.wait()

    def _reports(self) -> bytes:
        with contextlib.suppress(OSError):
            if self._report >= 0 and select.select([self._report], [], [], 0)[0]:
                return os.read(self._report, 4096)
        return b""

    def _close(self) -> None:
        for fd in (self._watch, self._report):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._watch = self._report = -1


def start(
    command: Sequence[str],
    *,
    log: Path | None = None,
    stdout: int | IO[bytes] | None = subprocess.DEVNULL,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stop_signal: int = signal.SIGTERM,
    whole_group: bool = True,
    user: tuple[int, int] | None = None,
    outlive_parent: bool = False,
) -> Supervised:
    """Start `command` supervised; its output appended to `log` (else to `stdout`). A stop sends
    `stop_signal` to its process group (or to it alone when not `whole_group`); `user` (uid,
    gid) is who it runs as. Only a child meant to be adopted by the parent's successor (the
    operator's local runners) may `outlive_parent`. Raises OSError as `subprocess.Popen` does
    when it cannot run."""
    watch_read, watch = os.pipe()
    report, report_write = os.pipe()
    owner = user or (-1, -1)
    orphan = int(not outlive_parent)
    keeper_args = [watch_read, report_write, int(stop_signal), int(whole_group), orphan, *owner]
    keeper_command = [sys.executable, "-I", "-S", __file__, *map(str, keeper_args), "--"]
    out = open(log, "ab") if log is not None else None  # noqa: SIM115 - closed below
    try:
        keeper = subprocess.Popen(
            [*keeper_command, *command],
            stdin=subprocess.DEVNULL,
            stdout=out if out is not None else stdout,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            pass_fds=(watch_read, report_write),
            start_new_session=True,
        )
    finally:
        if out is not None:
            out.close()
        os.close(watch_read)
        os.close(report_write)
    said = _read_line(report, KEEPER_START)
    if said.startswith(b"!") or not said.strip().isdigit():
        keeper.kill()
        keeper.wait()
        os.close(watch)
        os.close(report)
        number = int(said[1:] or 0) if said[1:].strip().isdigit() else 0
        raise OSError(number, os.strerror(number) if number else "could not start", command[0])
    return Supervised(keeper, int(said), watch, report)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on `host:port`."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), 0.5):
        return True
    return False


def _read_line(fd: int, timeout: float) -> bytes:
    """One line from `fd` (less at end of file or after `timeout` seconds)."""
    data, deadline = b"", time.monotonic() + timeout
    while not data.endswith(b"\n") and time.monotonic() < deadline:
        if select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            chunk = os.read(fd, 1)
            if not chunk:
                break
            data += chunk
    return data


# The keeper: everything below runs in its own process, with the standard library only.


def _exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (so its process group id stays ours)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _signal(pid: int, signum: int, group: bool) -> None:
    with contextlib.suppress(OSError):
        (os.killpg if group else os.kill)(pid, signum)


def _exec_child(
    command: list[str],
    closing: list[int],
    errors: int,
    user: tuple[int, int],
    handlers: dict[signal.Signals, Any],
) -> None:
    """In the forked child: own process group, the user asked for, death with the keeper, the
    signal dispositions the keeper was given (SIGPIPE and SIGXFSZ: default, as Popen does)."""
    try:
        os.setpgid(0, 0)
        if user[0] >= 0:
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for signum, handler in handlers.items():
            if handler is not None:
                signal.signal(signum, handler)
        for signum in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        for fd in closing:
            os.close(fd)
        os.execvp(command[0], command)
    except OSError as error:
        os.write(errors, str(error.errno or 0).encode())
    os._exit(127)


def _keep(argv: list[str]) -> None:
    """Run the command after `--` as the supervised child; see the module's docstring."""
    watch, report, stop_signal, whole_group, orphan, uid, gid = map(int, argv[: argv.index("--")])
    command = argv[argv.index("--") + 1 :]
    asked: list[float] = []
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    signal.signal(signal.SIGTERM, lambda *_: asked.append(ORPHAN_GRACE))
    for ignored in (signal.SIGINT, signal.SIGHUP):
        signal.signal(ignored, signal.SIG_IGN)
    errors_read, errors = os.pipe()
    pid = os.fork()
    if pid == 0:
        _exec_child(command, [watch, report, errors_read], errors, (uid, gid), handlers)
    os.close(errors)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)
    failure = os.read(errors_read, 64)
    if failure:
        os.waitpid(pid, 0)
        os.write(report, b"!" + failure + b"\n")
        os._exit(127)
    os.write(report, f"{pid}\n".encode())
    pending = b""
    watched = [watch]
    while not _exited(pid) and not asked:
        if select.select(watched, [], [], 0.2)[0]:
            chunk = os.read(watch, 64)
            pending += chunk
            if not chunk and not orphan:  # the parent is gone, its successor adopts the child
                watched = []
            elif not chunk:  # the parent is gone
                print(f"[keeper] parent gone; stopping {command[0]}", file=sys.stderr, flush=True)
                asked.append(ORPHAN_GRACE)
            elif b"\n" in pending:
                asked.append(float(pending.split(b"\n")[0] or ORPHAN_GRACE))
    if asked and not _exited(pid):
        _signal(pid, stop_signal, bool(whole_group))
        deadline = time.monotonic() + asked[0]
        while not _exited(pid) and time.monotonic() < deadline:
            if select.select(watched, [], [], 0.05)[0] and not os.read(watch, 64):
                watched = []  # the parent died during the stop: a shorter grace
                deadline = min(deadline, time.monotonic() + ORPHAN_GRACE) if orphan else deadline
        if not _exited(pid):
            with contextlib.suppress(OSError):
                os.write(report, b"killed\n")
    _signal(pid, signal.SIGKILL, True)  # whatever is left of its process group
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):  # die of the same signal, so the parent reads the same code
        with contextlib.suppress(OSError, ValueError):
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


if __name__ == "__main__":
    _keep(sys.argv[1:])
