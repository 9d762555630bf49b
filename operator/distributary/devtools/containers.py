"""A container of one of the project's images, run by runc as a node's runtime runs a pod's.

The image comes from the project's buildah storage (`devtools.images`); its root file system is
a buildah working container (the image's layers under a writable one), its process what the image
says (entry point, command, environment, working folder, user) unless the caller says otherwise.
runc runs it in its own PID, IPC, UTS and mount namespaces with the image's user, no added
capabilities and no new privileges, on the host's network (a test broker on loopback is
reachable; a pod has its own network, which the node brings). Process limits are the host's
(runc may not raise one above its hard limit here). Folders of the host can be bound in.

Closing the container kills what still runs in it and deletes it. runc runs in the foreground
under `processes`' keeper, so a parent that exits sends it the keeper's SIGTERM, which runc
passes to the container; that the container dies when its parent is killed with SIGKILL is not
tested yet (the pods of a node, to come, are the kubelet's to stop).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from distributary import processes
from distributary.devtools.images import Image, ImageError, buildah, run

HOSTNAME = "distributary"
# The capabilities of a container with no added ones (runc's default set, as Docker's).
CAPABILITIES = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
]


def image_config(image: Image) -> dict[str, Any]:
    """The image's OCI configuration (Env, Entrypoint, Cmd, User, WorkingDir)."""
    text = run(buildah("inspect", "--type", "image", image.tag), f"reading {image.tag}")
    config = json.loads(text).get("OCIv1", {}).get("config") or {}
    return dict(config)


def user_ids(user: str) -> tuple[int, int]:
    """uid and gid of an image's `USER` given by number (`185`, `10001:10001`)."""
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        raise ImageError(f"USER {user!r}: give the user by number, as runAsNonRoot needs")
    return int(uid), int(gid or uid)


class Container:
    """One container of `image` running `args` (after the image's entry point, unless
    `entrypoint` replaces it), its output in `log`."""

    def __init__(
        self,
        image: Image,
        args: Sequence[str] | None,
        log: Path,
        *,
        entrypoint: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        binds: Mapping[str, str] | None = None,
        user: str | None = None,
    ) -> None:
        config = image_config(image)
        entry = list(entrypoint) if entrypoint is not None else list(config.get("Entrypoint") or [])
        command = list(args) if args is not None else list(config.get("Cmd") or [])
        self.args = entry + command
        self.env = dict(e.split("=", 1) for e in config.get("Env") or [])
        self.env.update(env or {})
        self.user = user_ids(user or str(config.get("User") or "0"))
        self.cwd = str(config.get("WorkingDir") or "/")
        self.binds = dict(binds or {})
        self.image = image
        self.log = log
        self.id = f"distributary-{uuid.uuid4().hex[:12]}"
        self._working: str | None = None
        self._bundle: Path | None = None
        self._process: processes.Supervised | None = None

    def start(self) -> Container:
        """Make the root file system and the bundle, and start runc."""
        self._working = run(buildah("from", self.image.tag), f"a container of {self.image.tag}")
        self._working = self._working.strip()
        root = run(buildah("mount", self._working), "buildah mount").strip()
        self._bundle = Path(tempfile.mkdtemp(prefix="distributary-bundle-"))
        (self._bundle / "config.json").write_text(json.dumps(self.spec(root), indent=1))
        # The container's own name resolves, as in a pod's /etc/hosts (the kubelet's).
        (self._bundle / "hosts").write_text(
            f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n127.0.1.1\t{HOSTNAME}\n"
        )
        # runc's foreground passes signals on to the container; the keeper stops it with its
        # parent.
        self._process = processes.start(
            ["runc", "run", "--bundle", str(self._bundle), self.id], log=self.log
        )
        return self

    def spec(self, root: str) -> dict[str, Any]:
        """The OCI runtime configuration runc reads."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        mounts: list[dict[str, Any]] = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
            },
            {
                "destination": "/dev/pts",
                "type": "devpts",
                "source": "devpts",
                "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
            },
            {
                "destination": "/dev/shm",
                "type": "tmpfs",
                "source": "shm",
                "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
            },
            # The host's network namespace is kept, so /sys is the host's, read-only.
            {
                "destination": "/sys",
                "type": "bind",
                "source": "/sys",
                "options": ["rbind", "nosuid", "noexec", "nodev", "ro"],
            },
            {
                "destination": "/etc/hosts",
                "type": "bind",
                "source": str(self._bundle / "hosts") if self._bundle else "/etc/hosts",
                "options": ["bind", "ro"],
            },
            {
                "destination": "/etc/resolv.conf",
                "type": "bind",
                "source": "/etc/resolv.conf",
                "options": ["bind", "ro"],
            },
        ]
        for source, target in self.binds.items():
            mounts.append(
                {"destination": target, "type": "bind", "source": source, "options": ["rbind"]}
            )
        uid, gid = self.user
        return {
            "ociVersion": "1.0.2",
            "process": {
                "terminal": False,
                "user": {"uid": uid, "gid": gid},
                "args": self.args,
                "env": [f"{k}={v}" for k, v in self.env.items()],
                "cwd": self.cwd,
                "capabilities": dict.fromkeys(("bounding", "effective", "permitted"), CAPABILITIES),
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": hard, "soft": min(soft, hard)}],
                "noNewPrivileges": True,
            },
            "root": {"path": root, "readonly": False},
            "hostname": HOSTNAME,
            "mounts": mounts,
            "linux": {
                "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount")],
                "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
                "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys"],
            },
        }

    def poll(self) -> int | None:
        assert self._process is not None
        return self._process.poll()

    def wait(self, timeout: float) -> int:
        assert self._process is not None
        return self._process.wait(timeout)

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM to the container's first process (tini passes it on), SIGKILL after
        `timeout` seconds; the exit status, None when it had to be killed."""
        if self._process is None or self._process.poll() is not None:
            return None if self._process is None else self._process.returncode
        subprocess.run(["runc", "kill", self.id, "TERM"], capture_output=True, check=False)
        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            subprocess.run(["runc", "kill", self.id, "KILL"], capture_output=True, check=False)
            self._process.wait(30)
            return None

    def close(self) -> None:
        """Kill what still runs and delete the container, its bundle and its working layer."""
        if self._process is not None and self._process.poll() is None:
            subprocess.run(["runc", "kill", self.id, "KILL"], capture_output=True, check=False)
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
        subprocess.run(["runc", "delete", "--force", self.id], capture_output=True, check=False)
        if self._bundle is not None:
            shutil.rmtree(self._bundle, ignore_errors=True)
        if self._working is not None:
            subprocess.run(buildah("rm", self._working), capture_output=True, check=False)
            self._working = None

    def __enter__(self) -> Container:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()
