"""A local Kubernetes control plane: etcd, kube-apiserver and two upstream controllers on loopback.

Tests and `make devcluster` need the real API server, since schema and CEL validation, server-side
apply and garbage collection are its own behaviour, and no Docker. The Kubernetes binaries are
built once from the Go modules of one pinned release (`controlplane/` at the repository root), and
etcd from its own (`etcd/`: the release that Kubernetes release is tested with, so the API server
serves the watch progress requests that streamed lists need), each cached under a key of the
release, the machine and a digest of those Go sources and the build flags: editing them builds
afresh, nothing else ever does, and a build is published only when complete. The API server
starts as controller-runtime's envtest starts its (client-certificate authentication, RBAC, the
ServiceAccount admission plugin off because nothing here creates default service accounts, a
service-account issuer and keys). Beside it runs `kube-controllers`
(`controlplane/cmd/kube-controllers`): the two controllers of kube-controller-manager a control
plane without nodes needs, the garbage collector and the namespace controller, upstream's own
code wired as kube-controller-manager wires them (without them owned children would outlive their
owners and deleted namespaces would stay Terminating). Built alone, they compile about 320
packages fewer than the whole kube-controller-manager (13 CPU-seconds instead of 178 on top of
the API server's build). Certificates come from the machine's openssl.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType

import yaml

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
from distributary.errors import DistributaryError
from distributary.processes import free_port

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


class ControlPlaneError(DistributaryError, RuntimeError):
    """The control plane could not be built or started; the message says why and what to do."""


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


_LEAF_CERTS = {  # name: (subject, extensions)
    "apiserver": (
        "CN = kube-apiserver",
        "extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1, DNS:localhost, "
        "IP:10.0.0.1, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc",
    ),
    "admin": ("CN = distributary-admin\nO = system:masters", "extendedKeyUsage = clientAuth"),
    "controller-manager": (
        # In system:masters: the garbage collector deletes every kind, custom ones included.
        "CN = system:kube-controller-manager\nO = system:masters",
        "extendedKeyUsage = clientAuth",
    ),
    # What the API server shows a node's kubelet for logs, exec and port forwarding.
    "apiserver-kubelet-client": (
        "CN = kube-apiserver-kubelet-client\nO = system:masters",
        "extendedKeyUsage = clientAuth",
    ),
}


_NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
_DAYS = ("-days", "3650")


def _openssl(pki: Path, *args: str) -> None:
    result = subprocess.run(["openssl", *args], cwd=pki, capture_output=True, text=True)
    if result.returncode != 0:
        raise ControlPlaneError(f"`openssl {args[0]}` failed in {pki}: {result.stderr.strip()}")


def _openssl_config(pki: Path, name: str, subject: str, extensions: str) -> str:
    (pki / f"{name}.cnf").write_text(
        f"[req]\ndistinguished_name = dn\nprompt = no\n[dn]\n{subject}\n[ext]\n{extensions}\n"
    )
    return f"{name}.cnf"


def write_certificates(pki: Path) -> None:
    """A CA, the API server's serving certificate, client certificates for the admin, the
    controller manager and the API server towards kubelets, and the service-account signing key;
    kept once made (a certificate added since is issued by the CA already there)."""
    if not (pki / ".complete").exists():
        _write_authorities(pki)
    for name, (subject, extensions) in _LEAF_CERTS.items():
        issue_certificate(pki, name, subject, extensions)


def _write_authorities(pki: Path) -> None:
    if shutil.which("openssl") is None:
        raise ControlPlaneError("openssl is needed to make the control plane's certificates")
    pki.mkdir(parents=True, exist_ok=True)
    for stale in pki.glob("*.crt"):  # of a CA that was never completed
        stale.unlink()
    ca_ext = "basicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign, cRLSign"
    config = _openssl_config(pki, "ca", "CN = distributary-control-plane-ca", ca_ext)
    _openssl(pki, "req", "-x509", "-config", config, "-extensions", "ext", *_NEW_KEY, *_DAYS,
             "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    _openssl(pki, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", "service-accounts.key")  # fmt: skip
    _openssl(pki, "pkey", "-in", "service-accounts.key", "-pubout", "-out", "service-accounts.pub")
    for key in pki.glob("*.key"):
        key.chmod(0o600)
    (pki / ".complete").touch()


def issue_certificate(pki: Path, name: str, subject: str, extensions: str) -> Path:
    """`name`.crt and `name`.key in `pki`, signed by the CA there, unless issued already (a node's
    identity: `subject` "CN = system:node:NAME\\nO = system:nodes"); the certificate's path."""
    certificate = pki / f"{name}.crt"
    if certificate.exists():
        return certificate
    leaf = "basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature"
    config = _openssl_config(pki, name, subject, f"{leaf}\n{extensions}")
    _openssl(pki, "req", "-new", "-config", config, *_NEW_KEY,
             "-keyout", f"{name}.key", "-out", f"{name}.csr")  # fmt: skip
    (pki / f"{name}.key").chmod(0o600)
    _openssl(pki, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-set_serial", str(secrets.randbits(63)), *_DAYS, "-extfile", config,
             "-extensions", "ext", "-out", f"{name}.crt.partial")  # fmt: skip
    (pki / f"{name}.crt.partial").replace(certificate)
    return certificate


def _kubeconfig(server: str, pki: Path, user: str, *, embed: bool) -> str:
    def data(kind: str, path: Path) -> dict[str, str]:
        if embed:
            return {f"{kind}-data": base64.b64encode(path.read_bytes()).decode()}
        return {kind: str(path)}

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "distributary",
                "cluster": {"server": server, **data("certificate-authority", pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    **data("client-certificate", pki / f"{user}.crt"),
                    **data("client-key", pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [
            {"name": "distributary", "context": {"cluster": "distributary", "user": user}}
        ],
        "current-context": "distributary",
    }
    return yaml.safe_dump(config, sort_keys=False)


def client_kubeconfig(server: str, pki: Path, user: str) -> str:
    """A kubeconfig for the client certificate `user`.crt (and its key) in `pki`, by path."""
    return _kubeconfig(server, pki, user, embed=False)


def etcd_binary(*, quiet: bool = False) -> Path:
    """etcd, built from `etcd/` if it is not cached yet."""
    try:
        return etcd_programs().build(quiet=quiet) / "etcd"
    except GoBuildError as error:
        raise ControlPlaneError(str(error)) from None


class ControlPlane:
    """etcd, kube-apiserver and kube-controllers on loopback, their state under `state_dir`:
    etcd's data and the certificates are kept, so a second start finds its resources again."""

    def __init__(self, state_dir: Path, *, quiet: bool = False) -> None:
        self.state_dir = state_dir.resolve()
        self.quiet = quiet
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
        write_certificates(self.pki)
        self.ports = {name: free_port() for name in ("etcd", "peer", "apiserver", "kcm")}
        self.kubeconfig.write_text(_kubeconfig(self.server, self.pki, "admin", embed=True))
        kcm_config = self.pki / "controller-manager.kubeconfig"
        kcm_config.write_text(_kubeconfig(self.server, self.pki, "controller-manager", embed=False))
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
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
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
            "--disable-admission-plugins=ServiceAccount",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            f"--service-account-issuer={self.server}/",
            f"--service-account-key-file={pki / 'service-accounts.pub'}",
            f"--service-account-signing-key-file={pki / 'service-accounts.key'}",
        ]

    def _controllers_flags(self, kubeconfig: Path) -> list[str]:
        return [f"--kubeconfig={kubeconfig}", f"--healthz-port={self.ports['kcm']}"]

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
