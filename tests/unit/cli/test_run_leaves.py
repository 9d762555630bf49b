"""`distributary run` leaves within a bound once its children are stopped, even when something
in the process would keep it alive (a thread that never ends, a client's teardown that blocks)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

# A process whose exit would wait forever on a thread that never ends.
STUCK = """
import threading, time
{arm}
threading.Thread(target=time.sleep, args=(3600,), name="stuck").start()
print("work done", flush=True)
"""


def run(arm: str, timeout: float) -> subprocess.CompletedProcess[str]:
    code = STUCK.format(arm=arm)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )


def test_a_process_that_would_hang_on_exit_leaves_and_shows_its_threads() -> None:
    started = time.monotonic()
    done = run("from distributary.cli.run import leave_within; leave_within(1.0)", timeout=60)
    assert time.monotonic() - started < 30
    assert done.returncode == 1
    assert done.stdout == "work done\n"
    assert "most recent call first" in done.stderr  # each thread's stack, for a bug report
    assert "threading.py" in done.stderr


def test_without_the_bound_the_same_process_hangs() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        run("", timeout=5)
