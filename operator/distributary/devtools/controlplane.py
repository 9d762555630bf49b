"""A local Kubernetes control plane: etcd, kube-apiserver and upstream controllers on loopback.

Tests and `make devcluster` need the real API server, since schema and CEL validation, server-side
apply and garbage collection are its own behaviour, and no Docker. The Kubernetes binaries are
built once from the Go modules of one pinned release (`controlplane/` at the repository root), and
etcd from its own (`etcd/`: the release that Kubernetes release is tested with, so the API server
serves the watch progress requests that streamed lists need), each cached under a key of the
release, the machine and a digest of those Go sources and the build flags: editing them builds
afresh, nothing else ever does, and a build is published only when complete. The API server
starts as controller-runtime's envtest starts its (client-certificate authentication, RBAC, the
ServiceAccount admission plugin off unless pods run (`ControlPlane`'s `pods_at`), a
service-account issuer and keys). Beside it runs `kube-controllers`
(`controlplane/cmd/kube-controllers`): the controllers of kube-controller-manager a control
plane needs (the garbage collector, the namespace and EndpointSlice controllers; with pods, the
ServiceAccount controller and the root CA publisher too), upstream's own code wired as
kube-controller-manager wires them (without them owned children would outlive their
owners and deleted namespaces would stay Terminating). Built alone, they compile about 320
packages fewer than the whole kube-controller-manager (13 CPU-seconds instead of 178 on top of
the API server's build). Certificates come from the machine's openssl.
"""

from __future__ import annotations

import atexit
import contextlib
import ssl
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from distributary import processes
from distributary.devtools import gobuild
from distributary.devtools.gobuild import (
    PROGRESS_EVERY,
    GoBuildError,
    GoPrograms,
    checkout_module,
    say,
)
from distributary.devtools.gobuild import elapsed as _elapsed
from distributary.devtools.kube_pki import (
    ControlPlaneError,
    client_kubeconfig,
    issue_certificate,
    kubeconfig,
    write_certificates,
)
from distributary.processes import free_port

__all__ = ["ControlPlane", "ControlPlaneError", "client_kubeconfig", "issue_certificate"]

KUBERNETES_VERSION = "v1.34.4"  # equal to k8s.io/kubernetes in controlplane/go.mod
ETCD_VERSION = "v3.6.4"  # equal to go.etcd.io/etcd/server/v3 in etcd/go.mod
SERVICE_CIDR = "10.0.0.0/24"
DEFAULT_STATE_DIR = Path(".distributary/devcluster")


def _ldflags() -> str:
    """Stripped binaries that report the release, as upstream's build stamps it (else the API
    server's /version says v0.0.0-master, and kubectl cannot pick a matching version)."""
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    stamps = {"gitVersion": KUBERNETES_VERSION, "gitMajor": major, "gitMinor": minor}
    stamps["gitTreeState"] = "clean"
    packages = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
    return " ".join(["-s", "-w", *(f"-X {p}.{k}={v}" for p in packages for k, v in stamps.items())])


GO_BUILD = [*gobuild.GO_BUILD, f"-ldflags={_ldflags()}"]


def _say(message: str) -> None:
    say("control plane", message)


def go_sources() -> Path:
    """`controlplane/` of the checkout this package runs from (an editable install)."""
    try:
        return checkout_module("controlplane")
    except GoBuildError as error:
        raise ControlPlaneError(str(error)) from None


def programs(src: Path) -> GoPrograms:
    """kube-apiserver and kube-controllers, as built from `src`."""
    return GoPrograms(
        part="control plane",
        cache="kube",
        src=src,
        release=KUBERNETES_VERSION,
        binaries=("kube-apiserver", "kube-controllers"),
        go_build=GO_BUILD,
        needs="Go 1.24 or newer",
    )


def etcd_programs() -> GoPrograms:
    """etcd, as built from `etcd/`."""
    try:
        src = checkout_module("etcd")
    except GoBuildError as error:
        raise ControlPlaneError(str(error)) from None
    return GoPrograms(
        part="control plane",
        cache="etcd",
        src=src,
        release=ETCD_VERSION,
        binaries=("etcd",),
        go_build=(*gobuild.GO_BUILD, "-ldflags=-s -w"),
        needs="Go 1.24 or newer",
    )


def binaries_dir(src: Path) -> Path:
    """Where the binaries built from `src` are cached, keyed by version, machine, sources, flags."""
    return programs(src).target()


def build(*, quiet: bool = False) -> Path:
    """The folder holding kube-apiserver and kube-controllers, building them on first use
    (the first build downloads about 700 MB of Go modules and compiles for several minutes)."""
    try:
        return programs(go_sources()).build(quiet=quiet)
    except GoBuildError as error:
        raise ControlPlaneError(str(error)) from None


def etcd_binary(*, quiet: bool = False) -> Path:
    """etcd, built from `etcd/` if it is not cached yet."""
    try:
        return etcd_programs().build(quiet=quiet) / "etcd"
    except GoBuildError as error:
        raise ControlPlaneError(str(error)) from None


class ControlPlane:
    """etcd, kube-apiserver and kube-controllers on loopback, their state under `state_dir`:
    etcd's data and the certificates are kept, so a second start finds its resources again.

    With `pods_at` (the address a node's pods reach the host at: `devtools.node`'s bridge
    gateway), a control plane for pods that run: the API server listens on every address and
    advertises that one (the endpoint of the `kubernetes` Service, which kube-proxy routes a
    pod's in-cluster client to), names it in its certificate, and admits pods with the
    ServiceAccount admission plugin (each gets its account's token, the CA and its namespace
    mounted); the controllers add the ServiceAccount controller (`default` accounts) and the
    root CA publisher. Anyone who can reach the machine can then reach the API server's port;
    it admits only the control plane's certificates and tokens."""

    def __init__(self, state_dir: Path, *, quiet: bool = False, pods_at: str | None = None) -> None:
        self.state_dir = state_dir.resolve()
        self.quiet = quiet
        self.pods_at = pods_at
        self.pki = self.state_dir / "pki"
        self.logs = self.state_dir / "logs"
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.ports: dict[str, int] = {}
        self._processes: list[tuple[str, processes.Supervised]] = []

    @property
    def server(self) -> str:
        """The API server's URL."""
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def start(self, timeout: float = 180.0) -> ControlPlane:
        """Build the binaries if needed, start all three and return once the API server is ready."""
        binaries = build(quiet=self.quiet)
        etcd = etcd_binary(quiet=self.quiet)
        started = time.monotonic()
        self.logs.mkdir(parents=True, exist_ok=True)
        self._check_not_running()
        write_certificates(self.pki, self.pods_at)
        self.ports = {name: free_port() for name in ("etcd", "peer", "apiserver", "kcm")}
        self.kubeconfig.write_text(kubeconfig(self.server, self.pki, "admin", embed=True))
        kcm_config = self.pki / "controller-manager.kubeconfig"
        kcm_config.write_text(kubeconfig(self.server, self.pki, "controller-manager", embed=False))
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        try:
            self._launch(str(etcd), self._etcd_flags())
            self._wait("etcd", f"http://127.0.0.1:{self.ports['etcd']}/health", deadline)
            self._launch(str(binaries / "kube-apiserver"), self._apiserver_flags())
            self._wait("kube-apiserver", f"{self.server}/readyz", deadline)
            kcm_flags = self._controllers_flags(kcm_config)
            self._launch(str(binaries / "kube-controllers"), kcm_flags)
            self._wait(
                "kube-controllers", f"http://127.0.0.1:{self.ports['kcm']}/healthz", deadline
            )
        except BaseException:
            self.stop()
            raise
        if not self.quiet:
            _say(f"ready in {_elapsed(started)} at {self.server}; kubeconfig {self.kubeconfig}")
        return self

    def _etcd_flags(self) -> list[str]:
        client, peer = (f"http://127.0.0.1:{self.ports[p]}" for p in ("etcd", "peer"))
        return [
            "--name=default",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync=true",  # as envtest: a test cluster trades durability for speed
            "--log-level=warn",
        ]

    def _apiserver_flags(self) -> list[str]:
        pki = self.pki
        return [  # envtest's flags, with our own certificates
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            f"--bind-address={'0.0.0.0' if self.pods_at else '127.0.0.1'}",
            f"--advertise-address={self.pods_at or '127.0.0.1'}",
            f"--secure-port={self.ports['apiserver']}",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            # A node's kubelet (devtools.node), for logs and exec: at its node's address.
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            "--authorization-mode=RBAC",
            *([] if self.pods_at else ["--disable-admission-plugins=ServiceAccount"]),
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            f"--service-account-issuer={self.server}/",
            f"--service-account-key-file={pki / 'service-accounts.pub'}",
            f"--service-account-signing-key-file={pki / 'service-accounts.key'}",
        ]

    def _controllers_flags(self, kubeconfig: Path) -> list[str]:
        flags = [f"--kubeconfig={kubeconfig}", f"--healthz-port={self.ports['kcm']}"]
        if self.pods_at:
            flags += ["--pods", f"--root-ca-file={self.pki / 'ca.crt'}"]
        return flags

    def _launch(self, binary: str, flags: list[str]) -> None:
        name = Path(binary).name
        if not self.quiet:
            _say(f"starting {name} ...")
        # A session of its own: Ctrl-C reaches Python alone, which stops the parts in order.
        process = processes.start([binary, *flags], log=self.logs / f"{name}.log")
        self._processes.append((name, process))
        pids = " ".join(str(p.pid) for _, p in self._processes)
        (self.state_dir / "pids").write_text(pids + "\n")

    def _wait(self, name: str, url: str, deadline: float) -> None:
        process = dict(self._processes)[name]
        context = ssl.create_default_context(cafile=self.pki / "ca.crt")
        context.load_cert_chain(self.pki / "admin.crt", self.pki / "admin.key")
        started, last = time.monotonic(), time.monotonic()
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with code {process.returncode} while starting; the end of "
                    f"{self.logs / f'{name}.log'}:\n{self._log_tail(name)}"
                )
            # OSError covers URLError, and HTTPError: a 500 until every check passes.
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(url, timeout=2, context=context) as response,
            ):
                if response.status == 200:
                    return
            time.sleep(0.25)
            if not self.quiet and time.monotonic() - last >= PROGRESS_EVERY:
                last = time.monotonic()
                _say(f"waiting for {name} to be ready ({_elapsed(started)})")
        raise ControlPlaneError(
            f"{name} was not ready in time; the end of {self.logs / f'{name}.log'}:\n"
            f"{self._log_tail(name)}"
        )

    def _log_tail(self, name: str, lines: int = 20) -> str:
        log = self.logs / f"{name}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def _check_not_running(self) -> None:
        pids = self.state_dir / "pids"
        for pid in pids.read_text().split() if pids.exists() else []:
            cmdline = Path(f"/proc/{pid}/cmdline")
            with contextlib.suppress(OSError):
                if str(self.state_dir).encode() in cmdline.read_bytes():
                    raise ControlPlaneError(
                        f"a control plane is already running from {self.state_dir} (pid {pid}): "
                        f"stop it (kill {' '.join(pids.read_text().split())}) or choose another "
                        "state folder"
                    )

    def running(self) -> list[str]:
        """The parts that have exited (empty while all run)."""
        return [name for name, process in self._processes if process.poll() is not None]

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the controllers, the API server and etcd in that order (SIGTERM, then
        SIGKILL for whatever does not stop within `timeout` seconds)."""
        atexit.unregister(self.stop)
        while self._processes:
            name, process = self._processes.pop()
            process.stop(timeout, say=_say, what=name)
        (self.state_dir / "pids").unlink(missing_ok=True)

    def __enter__(self) -> ControlPlane:
        return self.start() if not self._processes else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
