"""A supervised child and what it starts die soon after their parent, whatever killed it.

Real processes, no fakes: a small Python parent starts a shell child that starts a grandchild
(`sleep`), all marked by an environment variable, reaches a moment (the child starting, serving,
or being stopped while it ignores SIGTERM), says so, and is SIGKILLed; no marked process may be
left 30 seconds later (in practice about a second). Found through /proc, so Linux only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from distributary import processes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl")

LIMIT = 30.0  # seconds a child may outlive its parent
# A child with a grandchild; the shell and the sleep ignore SIGTERM when STUBBORN is set.
FAMILY = 'if [ -n "$STUBBORN" ]; then trap "" TERM; fi; sleep 1000 & wait; sleep 1000'

PARENT = """
import sys, threading, time
from distributary import processes
moment = sys.argv[1]
child = None
def begin():
    global child
    child = processes.start(["sh", "-c", {family!r}])
if moment == "thread":  # started from a thread that ends at once
    thread = threading.Thread(target=begin)
    thread.start()
    thread.join()
else:
    begin()
time.sleep(0.5)  # the grandchild has started
print("at", moment, flush=True)
if moment == "starting":
    child.wait_until_serving(lambda: False, 600)
elif moment == "stopping":
    child.stop(600)
time.sleep(600)
"""


def marked(marker: str) -> list[int]:
    """The pids of living processes whose environment carries `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def gone_within(marker: str, limit: float) -> float:
    """Seconds until no process carries `marker`; fails after `limit`."""
    started = time.monotonic()
    while marked(marker):
        assert time.monotonic() - started < limit, f"left alive: {marked(marker)}"
        time.sleep(0.1)
    return time.monotonic() - started


def marked_environment(**more: str) -> tuple[str, dict[str, str]]:
    marker = f"SUPERVISED_TEST={uuid.uuid4().hex}"
    name, value = marker.split("=")
    return marker, {**os.environ, name: value, **more}


@pytest.mark.parametrize("moment", ["starting", "serving", "stopping", "thread"])
def test_child_and_grandchild_die_soon_after_the_parent_is_killed(moment: str) -> None:
    marker, env = marked_environment(**({"STUBBORN": "1"} if moment == "stopping" else {}))
    program = textwrap.dedent(PARENT).format(family=FAMILY)
    parent = subprocess.Popen(
        [sys.executable, "-c", program, moment], env=env, stdout=subprocess.PIPE
    )
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline().decode().strip() == f"at {moment}"
        time.sleep(0.3)  # into the wait, or the stop
        # the parent, the keeper, the shell and the sleep
        assert len(marked(marker)) >= 4, "the family did not start (or died with a thread)"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        took = gone_within(marker, LIMIT)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    assert took < processes.ORPHAN_GRACE + 5


def test_a_stop_of_a_child_that_ignores_sigterm_is_bounded() -> None:
    marker, env = marked_environment(STUBBORN="1")
    child = processes.start(["sh", "-c", FAMILY], env=env)
    time.sleep(0.5)
    said: list[str] = []
    started = time.monotonic()
    code = child.stop(1.0, say=said.append, what="the stubborn child")
    assert time.monotonic() - started < 5
    assert code == -signal.SIGKILL
    assert said == ["the stubborn child did not stop within 1s; killed it"]
    gone_within(marker, 5)


def test_a_graceful_stop_ends_the_child_and_what_it_started() -> None:
    marker, env = marked_environment()
    child = processes.start(["sh", "-c", FAMILY], env=env)
    time.sleep(0.3)
    assert child.stop(10) == -signal.SIGTERM
    gone_within(marker, 5)


def test_what_a_child_leaves_when_it_exits_is_killed() -> None:
    marker, env = marked_environment()
    child = processes.start(["sh", "-c", "sleep 1000 & sleep 0.5; exit 3"], env=env)
    assert child.wait(10) == 3
    gone_within(marker, 5)


def test_pid_output_and_readiness_are_the_childs(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    port = processes.free_port()
    server = f"import socket; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); "
    server += "print('serving', flush=True); import time; time.sleep(60)"
    child = processes.start([sys.executable, "-c", server], log=log)
    try:
        assert child.wait_until_serving(port, 30)
        assert b"-c" in Path(f"/proc/{child.pid}/cmdline").read_bytes()
        assert os.getpgid(child.pid) == child.pid  # it leads its own process group
    finally:
        child.stop(10)
    assert "serving" in log.read_text()


def test_a_child_that_exits_while_starting_is_not_waited_for() -> None:
    child = processes.start(["sh", "-c", "exit 4"])
    started = time.monotonic()
    assert not child.wait_until_serving(lambda: False, 30)
    assert time.monotonic() - started < 5
    assert child.poll() == 4


def test_a_missing_program_raises_as_popen_does() -> None:
    with pytest.raises(FileNotFoundError):
        processes.start(["/nonexistent/program"])


def test_a_child_meant_to_be_adopted_outlives_its_parent() -> None:
    marker, env = marked_environment()
    program = (
        "from distributary import processes; import time; "
        "c = processes.start(['sleep', '1000'], outlive_parent=True); "
        "print(c.pid, flush=True); time.sleep(600)"
    )
    parent = subprocess.Popen([sys.executable, "-c", program], env=env, stdout=subprocess.PIPE)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    parent.stdout.close()
    time.sleep(1.5)
    try:
        assert pid in marked(marker)
    finally:
        os.killpg(pid, signal.SIGKILL)  # its keeper then goes too
    gone_within(marker, 5)


def test_a_thread_that_started_a_child_may_end() -> None:
    """PDEATHSIG follows the thread that forked: the keeper must not be tied to it."""
    children: list[processes.Supervised] = []
    thread = threading.Thread(target=lambda: children.append(processes.start(["sleep", "1000"])))
    thread.start()
    thread.join()
    time.sleep(1.0)
    try:
        assert children[0].poll() is None
    finally:
        children[0].stop(5)
