"""What the test node writes and decides before it starts anything: containerd's, the CNI's and
the kubelet's configuration, the pod network's check against the host's, the image references
the CRI plugin looks up, and which mounts a stop takes down."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from distributary.devtools import controlplane
from distributary.devtools.node import kubelet_programs
from distributary.devtools.node_files import (
    BRIDGE,
    CGROUP_ROOT,
    POD_CIDR,
    NodeError,
    check_pod_cidr,
    cni_config,
    containerd_config,
    gateway,
    kubelet_config,
    mounts_under,
    normalized,
    socket_path,
)

STATE = Path("/var/tmp/node state")  # a space: paths are quoted where written


def test_the_pod_network_may_not_overlap_the_services_or_the_hosts() -> None:
    check_pod_cidr(POD_CIDR, ["192.0.2.0/24", "127.0.0.0/8", "fd00::/64"])
    with pytest.raises(NodeError, match=r"overlaps 10\.0\.0\.0/24"):
        check_pod_cidr("10.0.0.0/16", [])
    with pytest.raises(NodeError, match=r"overlaps 10\.244\.0\.7/32"):
        check_pod_cidr(POD_CIDR, ["192.0.2.0/24", "10.244.0.7/32"])
    with pytest.raises(NodeError, match="another POD_CIDR"):
        check_pod_cidr(POD_CIDR, ["10.0.0.0/8"])


def test_the_node_is_the_gateway_of_its_pods() -> None:
    assert gateway(POD_CIDR) == "10.244.0.1"
    assert gateway("192.168.7.0/24") == "192.168.7.1"


def test_containerd_runs_the_cri_plugin_on_runc_with_cgroupfs_and_its_own_files() -> None:
    config = tomllib.loads(containerd_config(STATE, "localhost/pause:1"))
    assert config["version"] == 2
    assert config["root"] == f"{STATE}/containerd/root"
    assert config["state"] == f"{STATE}/containerd/state"
    assert config["grpc"]["address"] == str(socket_path(STATE))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "localhost/pause:1"
    assert cri["restrict_oom_score_adj"] is True
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"]["SystemdCgroup"] is False
    assert cri["cni"]["conf_dir"] == f"{STATE}/cni/net.d"


def test_pods_are_on_the_nodes_bridge_with_addresses_of_the_pod_network() -> None:
    (bridge,) = cni_config(STATE)["plugins"]
    assert bridge["type"] == "bridge"
    assert bridge["bridge"] == BRIDGE
    assert bridge["ipMasq"] is False  # no rule in the host's tables, no way out of the machine
    (subnet,) = bridge["ipam"]["ranges"][0]
    assert subnet == {"subnet": POD_CIDR, "gateway": "10.244.0.1"}
    assert bridge["ipam"]["dataDir"] == f"{STATE}/cni/ipam"


def test_the_kubelet_serves_at_the_nodes_address_for_clients_of_the_control_planes_ca() -> None:
    pki = Path("/pki")
    ports = {"kubelet": 10250, "healthz": 10248}
    config = kubelet_config(STATE, pki, "n1", "10.244.0.1", ports)
    assert (config["address"], config["port"], config["readOnlyPort"]) == ("10.244.0.1", 10250, 0)
    assert config["tlsCertFile"] == "/pki/node-n1-serving.crt"
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authentication"]["x509"] == {"clientCAFile": "/pki/ca.crt"}
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == f"/{CGROUP_ROOT}"
    assert config["enforceNodeAllocatable"] == []
    assert config["failSwapOn"] is False
    assert config["containerRuntimeEndpoint"] == f"unix://{STATE}/containerd/containerd.sock"
    assert config["podLogsDir"] == f"{STATE}/pod-logs"
    assert "clusterDNS" not in config  # pods get the host's resolvers
    with_dns = kubelet_config(STATE, pki, "n1", "10.244.0.1", ports, cluster_dns="10.244.0.1")
    assert (with_dns["clusterDNS"], with_dns["clusterDomain"]) == (["10.244.0.1"], "cluster.local")


@pytest.mark.parametrize(
    ("reference", "looked_up"),
    [
        ("distributary-spark:0.1.0", "docker.io/library/distributary-spark:0.1.0"),
        ("team/spark:1", "docker.io/team/spark:1"),
        ("localhost/distributary-pause:abc", "localhost/distributary-pause:abc"),
        ("registry.example:5000/spark:1", "registry.example:5000/spark:1"),
    ],
)
def test_image_references_are_named_as_the_cri_plugin_looks_them_up(
    reference: str, looked_up: str
) -> None:
    assert normalized(reference) == looked_up


def test_a_stop_unmounts_what_is_under_the_nodes_state_deepest_first() -> None:
    mountinfo = "\n".join([
        "22 1 8:1 / / rw - ext4 /dev/vda rw",
        "30 22 0:40 / /var/tmp/node\\040state/kubelet rw - tmpfs tmpfs rw",
        "31 30 0:41 / /var/tmp/node\\040state/kubelet/pods/a/volumes/x rw - tmpfs tmpfs rw",
        "32 22 0:42 / /var/tmp/node\\040state-other rw - tmpfs tmpfs rw",
        "33 22 0:43 / /var/tmp/node\\040state rw - tmpfs tmpfs rw",
    ])  # fmt: skip
    assert mounts_under(mountinfo, STATE) == [
        f"{STATE}/kubelet/pods/a/volumes/x",
        f"{STATE}/kubelet",
        str(STATE),
    ]


def test_the_kubelet_is_built_beside_the_control_plane_with_its_build_tag() -> None:
    kubelet, plane = kubelet_programs(), controlplane.programs(controlplane.go_sources())
    assert kubelet.src == plane.src
    assert "kubelet" not in plane.binaries  # a control plane alone does not compile it
    assert [*kubelet.go_build] == [*plane.go_build, "-tags=kubelet"]
    assert kubelet.target() != plane.target()
