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

import contextlib
import subprocess
from pathlib import Path

from distributary.devtools.host_part import HostPart
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


class ServiceProxy(HostPart):
    """kube-proxy for node `node` of the control plane `kubeconfig` names, its log in `log`."""

    name = "kube-proxy"

    def __init__(
        self, binary: Path, kubeconfig: Path, node: str, cluster_cidr: str, address: str, log: Path
    ) -> None:
        self.ports = {"healthz": free_port(), "metrics": free_port()}
        flags = proxy_flags(kubeconfig, node, cluster_cidr, address, self.ports)
        # 503 until its first sync of the rules.
        super().__init__(binary, flags, log, f"http://127.0.0.1:{self.ports['healthz']}/healthz")

    def start(self, deadline: float) -> ServiceProxy:
        """Start kube-proxy and return once its rules are written (its health check passes)."""
        cleanup(self.binary)  # of one killed before it could
        super().start(deadline)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop kube-proxy and remove its rules."""
        running = self._process is not None
        super().stop(timeout)
        if running:
            cleanup(self.binary)
