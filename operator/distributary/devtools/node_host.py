"""What the test node does on the host (`devtools.node`): the first process of its namespace,
the cgroup hierarchies, its processes found by name, and what a stopped or killed node leaves."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import subprocess
from pathlib import Path
from typing import IO

from distributary.artifacts import cache_root
from distributary.devtools.gobuild import say
from distributary.devtools.node_files import BRIDGE, CGROUP_ROOT, NodeError, mounts_under

MADE_FOLDERS = "node-folders"  # in the cache: the host folders a node made as mount points


def take_machine(state_dir: Path) -> IO[str]:
    """The machine's node lock (one node a machine: the bridge and cgroups are the machine's),
    held until the file returned is closed; a NodeError naming the holder if another has it."""
    lock_path = cache_root() / "node.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(lock_path, "a+")  # noqa: SIM115 - held until the node stops
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise NodeError(
            f"a node is already running on this machine ({holder}): stop it first"
        ) from None
    lock.truncate(0)
    lock.write(f"pid {os.getpid()}, state {state_dir}\n")
    lock.flush()
    return lock


def up_bridge_and_cgroups(address: str, pod_cidr: str) -> None:
    """The pods' bridge, with the node's `address` in `pod_cidr`, and the node's cgroups."""
    prefix = ipaddress.ip_network(pod_cidr).prefixlen
    for command in (
        ["ip", "link", "add", BRIDGE, "type", "bridge"],
        ["ip", "addr", "add", f"{address}/{prefix}", "dev", BRIDGE],
        ["ip", "link", "set", BRIDGE, "up"],
    ):
        run(command, f"making the pods' bridge {BRIDGE}")
    for hierarchy in cgroup_hierarchies():
        folder = hierarchy / CGROUP_ROOT
        folder.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":  # a new cpuset has no CPUs nor memory nodes
            for name in ("cpuset.cpus", "cpuset.mems"):
                (folder / name).write_text((hierarchy / name).read_text())


def clean_host(state_dir: Path) -> None:
    """What a node whose state is `state_dir` leaves on the host once its processes are gone (or
    a killed one left): mounts under its state, the bridge, the cgroups, the folders it made."""
    mountinfo = Path("/proc/self/mountinfo").read_text()
    for point in mounts_under(mountinfo, state_dir):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        run(["ip", "link", "delete", BRIDGE], f"removing the bridge {BRIDGE}")
    for hierarchy in cgroup_hierarchies(unified=True):
        root = hierarchy / CGROUP_ROOT
        for folder in sorted(root.glob("**/"), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):  # still holds a process: said below
                folder.rmdir()
        if root.exists():
            say("node", f"{root} still holds processes; remove it once they are gone")
    made = cache_root() / MADE_FOLDERS
    for name in made.read_text().split() if made.exists() else []:
        with contextlib.suppress(OSError):
            Path(name).rmdir()
    made.unlink(missing_ok=True)


# The namespace's first process (standard library only): makes its mounts, starts containerd and,
# once containerd serves, the kubelet, each writing its log; reaps whatever ends up its child
# (the shims daemonize to it); exits when containerd does, which ends the namespace, and with it
# every process and mount in it.
INIT = """
import json, os, socket, subprocess, sys, time
plan = json.loads(sys.argv[1])
for mount in plan["mounts"]:
    subprocess.run(mount, check=True)
def spawn(name):
    pid = os.fork()
    if pid == 0:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        log = os.open(os.path.join(plan["logs"], name + ".log"), flags, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.execvp(plan[name][0], plan[name])
    return pid
def serving():
    with socket.socket(socket.AF_UNIX) as client:
        return client.connect_ex(plan["socket"]) == 0
containerd = spawn("containerd")
while not serving():
    if os.waitpid(containerd, os.WNOHANG)[0]:
        sys.exit("containerd exited while starting")
    time.sleep(0.1)
spawn("kubelet")
while True:
    pid, status = os.wait()
    if pid == containerd:
        os._exit(os.waitstatus_to_exitcode(status) & 255)
"""


def cgroup_hierarchies(*, unified: bool = False) -> list[Path]:
    """The cgroup v1 hierarchies (cpu, memory, pids, name=systemd, ...), and with `unified` the
    cgroup v2 one beside them (runc makes its containers' cgroups there too)."""
    kinds = ("cgroup", "cgroup2") if unified else ("cgroup",)
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] in kinds:
            found.append(Path(fields[1]))
    return found


def descendant(pid: int, name: str) -> int | None:
    """The process named `name` among the descendants of `pid`, if there is one yet."""
    pending = [pid]
    while pending:
        parent = pending.pop()
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
            for child in map(int, children):
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{child}/comm").read_text().strip() == name:
                        return child
                pending.append(child)
    return None


def run(command: list[str], what: str) -> None:
    """Run `command`; a NodeError saying `what` failed, and why, if it fails."""
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise NodeError(f"{what}: `{' '.join(command)}` failed: {result.stderr.strip()}")
