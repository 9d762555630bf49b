"""The CPU time each integration module costs the machine, beside its wall time.

A suite on two cores is as long as its CPU work allows: wall time alone hides which module is
heavy and which one only waits. Where the kernel's cgroup v1 `cpuacct` controller is writable
(root, as in `make test`), each test worker moves itself into a cgroup of its own, which every
process it starts joins too (brokers, runners, Spark's drivers, PostgreSQL); the cgroup's CPU time
is read around each test's setup, call and teardown, and carried to the summary in the reports'
`user_properties`. The pods of the test node run in the kubelet's cgroups: not counted here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
PROPERTY = "cpu_seconds"


def worker_group(root: Path = CPUACCT) -> Path | None:
    """This process's own cgroup under `root`, joined; None where it cannot be made. Groups left
    by earlier workers (a worker's last processes can end after it) are removed once empty."""
    group = root / "distributary-tests" / str(os.getpid())
    for left in group.parent.glob("*") if group.parent.is_dir() else ():
        if left.name.isdigit() and not Path(f"/proc/{left.name}").exists():
            with contextlib.suppress(OSError):
                left.rmdir()  # the kernel refuses while a process is still in it
    try:
        group.mkdir(parents=True, exist_ok=True)
        (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
    except OSError:
        return None
    return group


class CpuClock:
    """CPU seconds used by a cgroup since the last `lap`."""

    def __init__(self, group: Path) -> None:
        self.usage = group / "cpuacct.usage"
        self.last = self._read()

    def _read(self) -> int:
        return int(self.usage.read_text())

    def lap(self) -> float:
        now = self._read()
        seconds, self.last = (now - self.last) / 1e9, now
        return seconds


_CLOCK: list[CpuClock] = []


def start() -> None:
    """Join a worker cgroup, once per process (`pytest_configure`)."""
    if _CLOCK or not CPUACCT.is_dir():
        return
    group = worker_group()
    if group is not None:
        _CLOCK.append(CpuClock(group))


def stop() -> None:
    """Leave the worker cgroup and remove it (`pytest_unconfigure`); one still holding a process
    left behind stays, and says so by its name."""
    if not _CLOCK:
        return
    group = _CLOCK.pop().usage.parent
    try:
        (CPUACCT / "cgroup.procs").write_text(f"{os.getpid()}\n")
        group.rmdir()
    except OSError:
        pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    outcome = yield
    if _CLOCK:
        report = outcome.get_result()
        report.user_properties = [*report.user_properties, (PROPERTY, _CLOCK[0].lap())]


def seconds_of(report: Any) -> float:
    """The CPU seconds a report carries (0 without accounting)."""
    for name, value in getattr(report, "user_properties", ()):
        if name == PROPERTY:
            return float(value)
    return 0.0
