"""kube-proxy's flags on the test node: its node, NodePorts on the node's address only, and the
host's conntrack and route_localnet settings left as they are."""

from __future__ import annotations

from pathlib import Path

from distributary.devtools.service_proxy import proxy_flags


def test_the_flags_keep_kube_proxy_to_the_node_and_off_the_hosts_settings() -> None:
    ports = {"healthz": 10256, "metrics": 10249}
    flags = proxy_flags(Path("/k/config"), "n1", "10.244.0.0/24", "10.244.0.1", ports)
    assert flags[:5] == [
        "--kubeconfig=/k/config",
        "--hostname-override=n1",
        "--proxy-mode=iptables",
        "--cluster-cidr=10.244.0.0/24",
        "--nodeport-addresses=10.244.0.1/32",
    ]
    assert "--iptables-localhost-nodeports=false" in flags
    assert "--conntrack-max-per-core=0" in flags
    assert "--healthz-bind-address=127.0.0.1:10256" in flags
    assert "--metrics-bind-address=127.0.0.1:10249" in flags
    assert not [flag for flag in flags if "0.0.0.0" in flag]
