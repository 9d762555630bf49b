"""Cluster DNS for the test node: CoreDNS, built from the project's Go module `coredns/`.

Pods find Services by name (`<service>.<namespace>.svc.cluster.local`): a Spark driver reaches the
API server as `kubernetes.default.svc`, executors reach their driver through its Service. CoreDNS's
Kubernetes plugin answers those names from the API server's Services and EndpointSlices, and every
other name is forwarded to the host's resolvers. It runs as a process on the host, listening on
one address (the node's DNS address, which the kubelet writes into each pod's resolv.conf; any
address and port in tests), and is ready once its Kubernetes plugin has read the API server.

`resolve()` asks a DNS server for a name's IPv4 addresses over UDP, so that tests and readiness
checks need no DNS tool on the machine.
"""

from __future__ import annotations

import atexit
import contextlib
import secrets
import socket
import struct
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from distributary import processes
from distributary.devtools import gobuild
from distributary.devtools.gobuild import GoBuildError, GoPrograms, checkout_module
from distributary.errors import DistributaryError
from distributary.processes import free_port

COREDNS_VERSION = "v1.15.0"  # equal to github.com/coredns/coredns in coredns/go.mod
CLUSTER_DOMAIN = "cluster.local"


class ClusterDNSError(DistributaryError, RuntimeError):
    """CoreDNS could not be built or started."""


def coredns_programs() -> GoPrograms:
    """CoreDNS, as built from `coredns/` (its Kubernetes, forward and cache plugins and a few
    more, not every plugin upstream's build has)."""
    try:
        src = checkout_module("coredns")
    except GoBuildError as error:
        raise ClusterDNSError(str(error)) from None
    return GoPrograms(
        part="cluster DNS",
        cache="coredns",
        src=src,
        release=COREDNS_VERSION,
        binaries=("coredns",),
        go_build=(*gobuild.GO_BUILD, "-ldflags=-s -w"),
        needs="Go 1.26 or newer",
    )


def coredns_binary(*, quiet: bool = False) -> Path:
    """CoreDNS, built on first use and cached (about 90 CPU-seconds from an empty Go cache)."""
    try:
        return coredns_programs().build(quiet=quiet) / "coredns"
    except GoBuildError as error:
        raise ClusterDNSError(str(error)) from None


def corefile(
    address: str,
    port: int,
    kubeconfig: Path,
    *,
    health_port: int,
    ready_port: int,
    upstream: str = "/etc/resolv.conf",
    domain: str = CLUSTER_DOMAIN,
) -> str:
    """CoreDNS's configuration: `domain` (and reverse lookups) from the API server that
    `kubeconfig` names, every other name from `upstream`, both on `address`:`port`."""
    return f"""\
{domain}:{port} in-addr.arpa:{port} ip6.arpa:{port} {{
    bind {address}
    errors
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {domain} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
}}
.:{port} {{
    bind {address}
    errors
    forward . {upstream}
    cache 30
}}
"""


class ClusterDNS:
    """CoreDNS serving a cluster's names on `address`:`port` (a free port when 0), its files
    under `state_dir`."""

    def __init__(
        self,
        state_dir: Path,
        kubeconfig: Path,
        *,
        address: str = "127.0.0.1",
        port: int = 0,
        quiet: bool = False,
    ) -> None:
        self.state_dir = state_dir.resolve()
        self.kubeconfig = kubeconfig.resolve()
        self.address = address
        self.port = port or free_port()
        self.quiet = quiet
        self.log = self.state_dir / "coredns.log"
        self._process: processes.Supervised | None = None
        self._ready_port = 0

    def start(self, timeout: float = 60.0) -> ClusterDNS:
        """Build CoreDNS if needed, start it and return once it answers for the cluster."""
        binary = coredns_binary(quiet=self.quiet)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._ready_port = free_port()
        config = self.state_dir / "Corefile"
        config.write_text(
            corefile(
                self.address,
                self.port,
                self.kubeconfig,
                health_port=free_port(),
                ready_port=self._ready_port,
            )
        )
        atexit.register(self.stop)
        self._process = processes.start([str(binary), "-conf", str(config)], log=self.log)
        try:
            self._wait(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, deadline: float) -> None:
        assert self._process is not None
        url = f"http://127.0.0.1:{self._ready_port}/ready"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ClusterDNSError(
                    f"CoreDNS exited with code {self._process.returncode} while starting; the "
                    f"end of {self.log}:\n{self._log_tail()}"
                )
            # 503 until the Kubernetes plugin has read the API server's Services.
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(url, timeout=2) as response,
            ):
                if response.status == 200:
                    return
            time.sleep(0.2)
        raise ClusterDNSError(
            f"CoreDNS was not ready in time; the end of {self.log}:\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """Stop CoreDNS (SIGTERM, then SIGKILL after `timeout` seconds)."""
        atexit.unregister(self.stop)
        if self._process is not None:
            self._process.stop(timeout, what="coredns")
            self._process = None

    def __enter__(self) -> ClusterDNS:
        return self.start() if self._process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class DNSError(DistributaryError, RuntimeError):
    """A DNS server did not answer, or refused the name."""


NXDOMAIN = 3


def query_packet(name: str, ident: int) -> bytes:
    """A recursive query for `name`'s A records."""
    header = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0)
    labels = b"".join(
        bytes([len(part)]) + part.encode("ascii") for part in name.rstrip(".").split(".")
    )
    return header + labels + b"\x00" + struct.pack(">HH", 1, 1)


def _skip_name(packet: bytes, at: int) -> int:
    """The offset after the (possibly compressed) name at `at`."""
    while True:
        length = packet[at]
        if length == 0:
            return at + 1
        if length & 0xC0 == 0xC0:  # a pointer ends the name
            return at + 2
        at += 1 + length


def answers(packet: bytes, ident: int) -> list[str]:
    """The IPv4 addresses in `packet`, the answer to query `ident`; raises `DNSError` when it
    is no such answer or says the name does not exist."""
    if len(packet) < 12:
        raise DNSError("a DNS answer shorter than its header")
    got, flags, questions, count = struct.unpack(">HHHH", packet[:8])
    if got != ident or not flags & 0x8000:
        raise DNSError("a DNS packet that answers another query")
    code = flags & 0x000F
    if code == NXDOMAIN:
        raise DNSError("no such name (NXDOMAIN)")
    if code:
        raise DNSError(f"the server refused the query (response code {code})")
    at = 12
    for _ in range(questions):
        at = _skip_name(packet, at) + 4
    found = []
    for _ in range(count):
        at = _skip_name(packet, at)
        kind, _klass, _ttl, length = struct.unpack(">HHIH", packet[at : at + 10])
        at += 10
        if kind == 1 and length == 4:
            found.append(socket.inet_ntoa(packet[at : at + 4]))
        at += length
    return found


def resolve(name: str, server: str, port: int = 53, timeout: float = 2.0) -> list[str]:
    """`name`'s IPv4 addresses as the DNS server at `server`:`port` answers (UDP)."""
    ident = secrets.randbits(16)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(query_packet(name, ident), (server, port))
        try:
            packet, _ = sock.recvfrom(4096)
        except TimeoutError:
            raise DNSError(f"{server}:{port} did not answer for {name} in {timeout:g}s") from None
    return answers(packet, ident)
