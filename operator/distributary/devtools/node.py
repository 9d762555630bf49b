"""A real Kubernetes node beside the local control plane: the kubelet and containerd (runc), so that
pods run for real, in containers, on this machine.

The kubelet is upstream's, built with the control plane from `controlplane/` (`cmd/kubelet`,
behind the build tag `kubelet`, so that a control plane alone does not compile its 327 packages
more); containerd 1.6 (its CRI plugin, the runc v2 shim, cgroupfs on cgroups v1) and the CNI
plugins are Debian's (`tools/system-packages.sh`). No registry is reachable: the images are
imported from the OCI archives `devtools.images` writes, and the sandbox ("pause") image is the
project's Debian base with `sleep infinity` as its process (`pause_archive`): one more image
configuration over a layer that the job and operator images carry anyway, so importing it costs
nothing, and no Go program or registry image is needed.

What a stop must not leave behind decides the shape. containerd and the kubelet are children of
a small first process (`INIT`) of a PID and mount namespace of their own (`unshare --pid
--mount --fork --kill-child`). The shims daemonize out of any process group, but not out of a
PID namespace, whose end the kernel brings to every process in it, containers included; they
reparent to that first process, which reaps them. Every mount the two make (container roots,
network namespaces, pod volumes) lives in that mount namespace and goes with it. The kubelet is
that process's child rather than joined to the namespaces by `nsenter`: orphaned, a process
whose parent is outside waits for the host's first process to reap it, and holds the
namespace's end back until then. So a parent killed with SIGKILL (the `processes` keeper then
stops the namespace) leaves no process and no mount; what stays on the host (the bridge, empty
cgroups, the host folders made as mount points) is removed by the next start as by a stop.

Pods are on a bridge (`BRIDGE`, `POD_CIDR`, checked against the host's networks at start) whose
gateway is the node's address: the kubelet listens there, the API server reaches it there for
logs and exec (with its kubelet client certificate, `controlplane.write_certificates`), and pods
reach the host's services listening there (not those on 127.0.0.1, which is the pod's own). The
node's identity is a client certificate of the control plane's CA (CN system:node:NAME, group
system:nodes), bound to the `system:node` role since the API server authorizes with RBAC alone.

Beside the namespace, on the host: CoreDNS at the node's address, port 53, which the kubelet
writes into every pod's resolv.conf (`devtools.dns`); kube-proxy, whose rules make Services'
cluster IPs reach their pods (`devtools.service_proxy`); and kube-scheduler, which places the pods
that name no node (`devtools.scheduler`). All stop with the node. For pods that talk to the API
server (in-cluster clients: the operator, a Spark driver), the control plane is started with
`pods_at` the node's address (`gateway(POD_CIDR)`): see `ControlPlane`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import yaml

from distributary import processes
from distributary.artifacts import cache_root
from distributary.devtools import controlplane
from distributary.devtools.controlplane import ControlPlane, client_kubeconfig, issue_certificate
from distributary.devtools.dns import ClusterDNS, coredns_binary
from distributary.devtools.gobuild import PROGRESS_EVERY, GoBuildError, GoPrograms, elapsed, say
from distributary.devtools.host_part import HostPart
from distributary.devtools.node_files import (
    CNI_PLUGINS,
    CONTAINERD_NAMESPACE,
    NODE_NAME,
    POD_CIDR,
    NodeError,
    check_pod_cidr,
    cni_config,
    containerd_config,
    gateway,
    host_networks,
    kubelet_config,
    normalized,
    pause_archive,
    socket_path,
)
from distributary.devtools.node_host import (
    INIT,
    MADE_FOLDERS,
    clean_host,
    descendant,
    take_machine,
    up_bridge_and_cgroups,
)
from distributary.devtools.scheduler import Scheduler
from distributary.devtools.service_proxy import ServiceProxy
from distributary.processes import free_port

# Host folders the kubelet and containerd write to whatever their flags say: in their mount
# namespace each is a folder of the node's state (or a tmpfs), so nothing is left in the host's.
HOST_FOLDERS = {
    "/run/containerd": None,  # the shims' sockets
    "/var/lib/cni": "cni",  # the CNI results cache
    "/var/log/containers": "container-logs",  # the kubelet's links to the pods' logs
}
TOOLS = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "unshare", "mount", "ip")


def _say(message: str) -> None:
    say("node", message)


def kubelet_programs() -> GoPrograms:
    """The kubelet, kube-proxy and kube-scheduler (with the control plane's two programs,
    relinked), built from `controlplane/` with the build tag `kubelet`."""
    return GoPrograms(
        part="node",
        cache="kubelet",
        src=controlplane.go_sources(),
        release=controlplane.KUBERNETES_VERSION,
        binaries=("kubelet", "kube-proxy", "kube-scheduler"),
        go_build=[*controlplane.GO_BUILD, "-tags=kubelet"],
        needs="Go 1.24 or newer",
    )


def kubelet_binary(*, quiet: bool = False) -> Path:
    """The kubelet, built if it is not cached yet."""
    try:
        return kubelet_programs().build(quiet=quiet) / "kubelet"
    except GoBuildError as error:
        raise NodeError(str(error)) from None


class Node:
    """containerd and the kubelet of one node of `plane`, their state under `state_dir`; one node
    a machine at a time (the bridge and cgroups are the machine's)."""

    def __init__(
        self,
        plane: ControlPlane,
        state_dir: Path,
        *,
        name: str = NODE_NAME,
        dns: bool = True,
        services: bool = True,
        scheduler: bool = True,
        quiet: bool = False,
    ) -> None:
        self.plane = plane
        self.name = name
        self.state_dir = state_dir.resolve()
        self.quiet = quiet
        self.address = gateway(POD_CIDR)
        self.logs = self.state_dir / "logs"
        self.ports: dict[str, int] = {}
        self._namespace: processes.Supervised | None = None  # unshare: containerd, kubelet
        self._kubelet_pid: int | None = None
        self._lock: IO[str] | None = None
        # The pods' DNS server, at the node's address (port 53, as resolv.conf allows).
        self.services = services  # kube-proxy: Services' cluster IPs reach their pods
        self.scheduler = scheduler  # kube-scheduler: pods that name no node are placed on it
        self._host_parts: list[HostPart] = []  # kube-proxy, kube-scheduler: stopped with it
        self.dns: ClusterDNS | None = None
        if dns:
            where = self.state_dir / "dns"
            self.dns = ClusterDNS(where, plane.kubeconfig, address=self.address, port=53)

    def start(self, timeout: float = 240.0) -> Node:
        """Build the kubelet if needed, start containerd and the kubelet, load the sandbox
        image and return once the Node is Ready."""
        kubelet = kubelet_binary(quiet=self.quiet)
        self._require_tools()
        sandbox, sandbox_archive = pause_archive(quiet=self.quiet)
        if self.dns is not None:
            # Built (or waited for, while the suite's background builds make it) before the
            # clock starts: `timeout` is for starting the node, not for compiling its parts.
            coredns_binary(quiet=self.quiet)
        started = time.monotonic()
        deadline = started + timeout
        self._lock = take_machine(self.state_dir)
        atexit.register(self.stop)
        try:
            self._clean_host()
            check_pod_cidr(POD_CIDR, host_networks())
            self._write_files(sandbox)
            up_bridge_and_cgroups(self.address, POD_CIDR)
            if self.dns is not None:
                self.dns.start(max(1.0, deadline - time.monotonic()))
            self._bind_node_role()
            self._start_namespace(kubelet)
            self._wait("containerd", self._containerd_serves, deadline)
            self.load(sandbox_archive, sandbox)
            self._wait("kubelet", self.ready, deadline)
            self._start_host_parts(kubelet.parent, deadline)
        except BaseException:
            self.stop()
            raise
        if not self.quiet:
            _say(f"{self.name} Ready in {elapsed(started)} at {self.address}")
        return self

    def _start_host_parts(self, binaries: Path, deadline: float) -> None:
        parts: list[HostPart] = []
        if self.services:
            log = self.logs / "kube-proxy.log"
            proxy = binaries / "kube-proxy"
            kubeconfig = self.plane.kubeconfig
            parts.append(ServiceProxy(proxy, kubeconfig, self.name, POD_CIDR, self.address, log))
        if self.scheduler:
            parts.append(Scheduler(binaries / "kube-scheduler", self.plane, self.state_dir))
        for part in parts:
            self._host_parts.append(part)
            part.start(deadline)

    def _require_tools(self) -> None:
        missing = [tool for tool in TOOLS if shutil.which(tool) is None]
        missing += [] if (CNI_PLUGINS / "bridge").exists() else ["the CNI plugins"]
        if missing:
            raise NodeError(
                f"{', '.join(missing)} not found: run tools/system-packages.sh (Debian's "
                "containerd, containernetworking-plugins, runc, util-linux, iproute2)"
            )
        if os.geteuid() != 0:
            raise NodeError("a node runs containers and makes a bridge: run it as root")

    def _write_files(self, sandbox: str) -> None:
        state = self.state_dir
        for folder in ("logs", "cni/net.d", "kubelet", "pod-logs", "container-logs"):
            (state / folder).mkdir(parents=True, exist_ok=True)
        shutil.rmtree(state / "cni" / "ipam", ignore_errors=True)  # reservations of pods gone
        (state / "containerd.toml").write_text(containerd_config(state, sandbox))
        conflist = json.dumps(cni_config(state), indent=1)
        (state / "cni" / "net.d" / "10-distributary.conflist").write_text(conflist)
        self._write_identity()
        self.ports = {"kubelet": free_port(), "healthz": free_port()}
        dns = self.address if self.dns is not None else None
        config = kubelet_config(
            state, self.plane.pki, self.name, self.address, self.ports, cluster_dns=dns
        )
        (state / "kubelet.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    def _write_identity(self) -> None:
        """The kubelet's client certificate (its node's identity) and serving certificate,
        issued by the control plane's CA into its folder, and the kubelet's kubeconfig."""
        subject = f"CN = system:node:{self.name}\nO = system:nodes"
        serving = f"serverAuth\nsubjectAltName = IP:{self.address}, DNS:{self.name}"
        for kind, usage in (("client", "clientAuth"), ("serving", serving)):
            name = f"node-{self.name}-{kind}"
            issue_certificate(self.plane.pki, name, subject, f"extendedKeyUsage = {usage}")
        kubeconfig = client_kubeconfig(
            self.plane.server, self.plane.pki, f"node-{self.name}-client"
        )
        (self.state_dir / "kubelet.kubeconfig").write_text(kubeconfig)

    def _start_namespace(self, kubelet: Path) -> None:
        """containerd and the kubelet under `INIT`, the first process of a PID and mount
        namespace of their own, with the host folders they write to replaced in it."""
        mounts = []
        for folder, own in HOST_FOLDERS.items():
            path = Path(folder)
            if not path.exists():  # made here, removed by a stop (or the next start)
                path.mkdir(parents=True)
                with open(cache_root() / MADE_FOLDERS, "a") as made:
                    made.write(f"{path}\n")
            if own is None:
                mounts.append(["mount", "-t", "tmpfs", "-o", "mode=0711", "tmpfs", folder])
            else:
                mounts.append(["mount", "--bind", str(self.state_dir / own), folder])
        state = self.state_dir
        kubelet_flags = [
            f"--config={state / 'kubelet.yaml'}",
            f"--kubeconfig={state / 'kubelet.kubeconfig'}",
            f"--root-dir={state / 'kubelet'}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.address}",
        ]
        plan = {
            "mounts": mounts,
            "containerd": ["containerd", "--config", str(state / "containerd.toml")],
            "kubelet": [str(kubelet), *kubelet_flags],
            "socket": str(socket_path(state)),
            "logs": str(self.logs),
        }
        unshare = ["unshare", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc"]
        init = [sys.executable, "-I", "-S", "-c", INIT, json.dumps(plan)]
        if not self.quiet:
            _say("starting containerd and the kubelet ...")
        log = self.logs / "namespace.log"
        self._namespace = processes.start([*unshare, *init], log=log)

    def _containerd_serves(self) -> bool:
        return self.ctr("version", check=False).returncode == 0

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`ctr` against the node's containerd, in the CRI plugin's namespace."""
        address = str(socket_path(self.state_dir))
        command = ["ctr", "--address", address, "-n", CONTAINERD_NAMESPACE, *args]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
        if check and result.returncode != 0:
            raise NodeError(f"`ctr {' '.join(args)}` failed: {result.stderr.strip()[-2000:]}")
        return result

    def load(self, archive: Path, reference: str) -> None:
        """Import an OCI archive (`devtools.images.export`) into the node, named `reference` as
        the pods name it (`name:tag` is docker.io/library's, as for any node)."""
        started = time.monotonic()
        if not self.quiet:
            _say(f"loading {reference} from {archive} ...")
        # A base name keeps the archive's own reference (a partial one would be dropped).
        result = self.ctr("images", "import", "--base-name", reference, str(archive))
        full = normalized(reference)
        if full != reference:
            self.ctr("images", "tag", "--force", reference, full)
            self.ctr("images", "rm", reference)
        listed = self.ctr("images", "ls", "-q").stdout.split()
        if full not in listed:
            raise NodeError(
                f"{archive} holds no image {reference}: ctr imported\n{result.stdout.strip()}"
            )
        if not self.quiet:
            _say(f"{full} loaded in {elapsed(started)}")

    def _bind_node_role(self) -> None:
        """The kubelet's rights, as the Node authorizer would give them: the `system:node` role."""
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"distributary:node:{self.name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": f"system:node:{self.name}",
                }
            ],
        }
        try:
            self.api("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
        except urllib.error.HTTPError as error:
            if error.code != 409:  # bound by an earlier start
                raise

    def ready(self) -> bool:
        """Whether the API server has the Node Ready."""
        with contextlib.suppress(OSError, ValueError):
            node = self.api("GET", f"/api/v1/nodes/{self.name}")
            conditions = (node.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return False

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request to the API server as its admin; the answer's JSON."""
        pki = self.plane.pki
        context = ssl.create_default_context(cafile=pki / "ca.crt")
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        request = urllib.request.Request(
            self.plane.server + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return json.loads(response.read() or b"{}")

    def _wait(self, name: str, ready: Callable[[], bool], deadline: float) -> None:
        started = last = time.monotonic()
        while time.monotonic() < deadline:
            if exited := self.exited():
                part = exited[0]
                tail = self.log_tail(part) or self.log_tail("namespace")  # its mounts failed
                raise NodeError(
                    f"{part} exited while starting; the end of {self.logs / f'{part}.log'}:\n{tail}"
                )
            if ready():
                return
            time.sleep(0.5)
            if not self.quiet and time.monotonic() - last >= PROGRESS_EVERY:
                last = time.monotonic()
                _say(f"waiting for {name} ({elapsed(started)})")
        raise NodeError(
            f"{name} was not ready in time; the end of {self.logs / f'{name}.log'}:\n"
            f"{self.log_tail(name)}"
        )

    def log_tail(self, name: str, lines: int = 25) -> str:
        """The last lines of a part's log (containerd, kubelet)."""
        log = self.logs / f"{name}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def exited(self) -> list[str]:
        """The parts that have exited (empty while all run)."""
        if self._namespace is None:
            return []
        if gone := [part.name for part in self._host_parts if part.exited()]:
            return gone
        if self._namespace.poll() is not None:
            return ["containerd"]  # the namespace ends with it
        if self._kubelet_pid is None:
            self._kubelet_pid = descendant(self._namespace.pid, "kubelet")
        elif not Path(f"/proc/{self._kubelet_pid}").exists():
            return ["kubelet"]
        return []

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the kubelet, remove the pods' containers, stop containerd (which ends every
        process and mount of its namespaces), and remove the bridge and the cgroups."""
        atexit.unregister(self.stop)
        while self._host_parts:
            self._host_parts.pop().stop()
        if self._namespace is not None:
            if self._namespace.poll() is None:  # containerd runs
                self._stop_kubelet(timeout)
                with contextlib.suppress(NodeError, subprocess.SubprocessError):
                    self._remove_containers()
            self._namespace.stop(timeout, say=_say, what="containerd")
            self._namespace = self._kubelet_pid = None
        if self.dns is not None:
            self.dns.stop()
        if self._lock is not None:
            self._clean_host()
            self._lock.close()
            self._lock = None

    def remove_images(self) -> None:
        """After a stop, delete containerd's files: the images loaded and the containers'
        layers (gigabytes once the job image is in). The logs stay."""
        if self._namespace is not None:
            raise NodeError(f"node {self.name} is running: stop it before removing its images")
        shutil.rmtree(self.state_dir / "containerd", ignore_errors=True)

    def _stop_kubelet(self, timeout: float) -> None:
        assert self._namespace is not None
        pid = self._kubelet_pid or descendant(self._namespace.pid, "kubelet")
        if pid is None:
            return
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            if Path(f"/proc/{pid}").exists():
                _say(f"the kubelet did not stop within {timeout:.0f}s; killed it")
                os.kill(pid, signal.SIGKILL)

    def _remove_containers(self) -> None:
        for container in self.ctr("containers", "ls", "-q").stdout.split():
            self.ctr("tasks", "delete", "--force", container, check=False)
            self.ctr("containers", "delete", container, check=False)

    def _clean_host(self) -> None:
        """What a node leaves on the host once its processes are gone (or a killed one left):
        mounts under its state, the bridge, the cgroups."""
        clean_host(self.state_dir)

    def __enter__(self) -> Node:
        return self.start() if self._namespace is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
