"""Services' cluster IPs on the test node: upstream's kube-proxy, built with the kubelet.

A Service's cluster IP is an address no interface has; kube-proxy makes it reach the Service's
ready pods (from their EndpointSlices) with rules in the host's iptables (the `nat` table's
`KUBE-*` chains), which the pods' traffic crosses on its way out of their bridge and the host's
own traffic on its way out. It runs on the host, beside the node's namespace, with NodePorts on
the node's address only, and leaves the host's settings (conntrack, route_localnet) as they are.
Its rules outlive it: a stop removes them (`kube-proxy --cleanup`, and the firewall chain that
leaves), and so does the next start after a process that was killed.
"""

from __future__ import annotations

import atexit
import contextlib
import subprocess
import time
import urllib.request
from pathlib import Path

from distributary import processes
from distributary.devtools.node_files import NodeError
from distributary.processes import free_port

MODE = "iptables"


def proxy_flags(
    kubeconfig: Path, node: str, cluster_cidr: str, address: str, ports: dict[str, int]
) -> list[str]:
    """kube-proxy's flags: the node `node` (pods in `cluster_cidr`, NodePorts on `address`),
    health and metrics on loopback, the host's conntrack and sysctls left alone."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={node}",
        f"--proxy-mode={MODE}",
        f"--cluster-cidr={cluster_cidr}",
        f"--nodeport-addresses={address}/32",
        "--iptables-localhost-nodeports=false",  # would set route_localnet on the host
        "--conntrack-max-per-core=0",  # the host's conntrack table as it is
        "--conntrack-tcp-timeout-established=0",
        "--conntrack-tcp-timeout-close-wait=0",
        f"--healthz-bind-address=127.0.0.1:{ports['healthz']}",
        f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
    ]


# kube-proxy's copy of the kubelet's firewall chain, which its cleanup leaves (the node's kubelet
# makes none: `makeIPTablesUtilChains: false`).
FIREWALL_CHAIN = "KUBE-FIREWALL"


def cleanup(binary: Path) -> None:
    """Remove every rule and chain kube-proxy made (of a stopped or killed one)."""
    command = [str(binary), "--cleanup", f"--proxy-mode={MODE}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise NodeError(f"`{' '.join(command)}` failed: {result.stderr.strip()[-2000:]}")
    for tool in ("iptables", "ip6tables"):
        steps = [["-D", parent, "-j", FIREWALL_CHAIN] for parent in ("INPUT", "OUTPUT")]
        for step in [*steps, ["-F", FIREWALL_CHAIN], ["-X", FIREWALL_CHAIN]]:
            with contextlib.suppress(OSError):  # no such rule or chain, or no such tool
                subprocess.run([tool, "-t", "filter", *step], capture_output=True, check=False)


class ServiceProxy:
    """kube-proxy for node `node` of the control plane `kubeconfig` names, its log in `log`."""

    def __init__(
        self, binary: Path, kubeconfig: Path, node: str, cluster_cidr: str, address: str, log: Path
    ) -> None:
        self.binary = binary
        self.log = log
        self.ports = {"healthz": free_port(), "metrics": free_port()}
        self.flags = proxy_flags(kubeconfig, node, cluster_cidr, address, self.ports)
        self._process: processes.Supervised | None = None

    def start(self, deadline: float) -> ServiceProxy:
        """Start kube-proxy and return once its rules are written (its health check passes)."""
        cleanup(self.binary)  # of one killed before it could
        atexit.register(self.stop)
        self._process = processes.start([str(self.binary), *self.flags], log=self.log)
        url = f"http://127.0.0.1:{self.ports['healthz']}/healthz"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                said = f"the end of {self.log}:\n{self._tail()}"
                raise NodeError(f"kube-proxy exited while starting; {said}")
            # 503 until its first sync of the rules.
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return self
            time.sleep(0.25)
        raise NodeError(f"kube-proxy was not ready in time; the end of {self.log}:\n{self._tail()}")

    def _tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """Stop kube-proxy and remove its rules."""
        atexit.unregister(self.stop)
        if self._process is not None:
            self._process.stop(timeout, what="kube-proxy")
            self._process = None
            cleanup(self.binary)
