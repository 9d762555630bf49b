"""What a test node is made of, apart from its processes: the files containerd, the CNI plugins
and the kubelet read, the checks of its pod network against the host's, the image references the
CRI plugin looks up, and the sandbox ("pause") image (`devtools.node` runs them)."""

from __future__ import annotations

import fcntl
import ipaddress
import json
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from distributary.devtools import controlplane, images
from distributary.devtools.dns import CLUSTER_DOMAIN
from distributary.devtools.gobuild import say
from distributary.errors import DistributaryError

NODE_NAME = "distributary-node"
BRIDGE = "distributary0"
POD_CIDR = "10.244.0.0/24"  # not the control plane's SERVICE_CIDR, 10.0.0.0/24
CGROUP_ROOT = "distributary-node"  # under each cgroup v1 hierarchy
CNI_PLUGINS = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
CONTAINERD_NAMESPACE = "k8s.io"  # containerd's namespace of the CRI plugin's images and containers
PAUSE_NAME = "localhost/distributary-pause"


class NodeError(DistributaryError, RuntimeError):
    """The node could not be built or started; the message says why and what to do."""


def _say(message: str) -> None:
    say("node", message)


def gateway(cidr: str) -> str:
    """The first address of `cidr`: the bridge's, the node's own."""
    return str(next(ipaddress.ip_network(cidr).hosts()))


def check_pod_cidr(cidr: str, host_networks: Iterable[str]) -> None:
    """Refuse a pod network that overlaps the service network or one of the host's."""
    pods = ipaddress.ip_network(cidr)
    taken = [controlplane.SERVICE_CIDR, *host_networks]
    for network in taken:
        other = ipaddress.ip_network(network, strict=False)
        if other.version == pods.version and other.overlaps(pods):
            raise NodeError(
                f"the pod network {cidr} overlaps {network} (the services' or the host's): "
                "give the node another POD_CIDR"
            )


def host_networks(exclude: str = BRIDGE) -> list[str]:
    """The IPv4 networks of the host's addresses and routes, the bridge `exclude` left out."""
    found: list[str] = []
    addresses = _ip_json("-4", "addr", "show")
    for link in addresses:
        if link.get("ifname") != exclude:
            found += [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])]
    for route in _ip_json("-4", "route", "show"):
        if route.get("dev") != exclude and route.get("dst") not in (None, "default"):
            found.append(route["dst"] if "/" in route["dst"] else f"{route['dst']}/32")
    return found


def _ip_json(*args: str) -> list[dict[str, Any]]:
    result = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=False)
    return list(json.loads(result.stdout or "[]")) if result.returncode == 0 else []


def containerd_config(state_dir: Path, sandbox_image: str) -> str:
    """containerd's configuration: its files under `state_dir`, the CRI plugin with runc v2 on
    cgroupfs, the node's CNI configuration, no AppArmor or SELinux."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{state_dir / "containerd" / "root"}"
state = "{state_dir / "containerd" / "state"}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{socket_path(state_dir)}"

[ttrpc]
  address = "{socket_path(state_dir)}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{state_dir / "containerd" / "opt"}"

[{cri}]
  sandbox_image = "{sandbox_image}"
  disable_apparmor = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  # No lower OOM score than containerd's own: lowering one is refused here (runc's sandbox with
  # containerd's -998 could not start), as where containerd runs without CAP_SYS_RESOURCE.
  restrict_oom_score_adj = true

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{CNI_PLUGINS}"
  conf_dir = "{state_dir / "cni" / "net.d"}"
  max_conf_num = 1
"""


def socket_path(state_dir: Path) -> Path:
    """containerd's socket."""
    return state_dir / "containerd" / "containerd.sock"


def cni_config(state_dir: Path, cidr: str = POD_CIDR, bridge: str = BRIDGE) -> dict[str, Any]:
    """The pods' network: a bridge with the node's address as gateway, host-local addresses, no
    masquerading (pods reach only this machine)."""
    ipam = {
        "type": "host-local",
        "ranges": [[{"subnet": cidr, "gateway": gateway(cidr)}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": str(state_dir / "cni" / "ipam"),
    }
    plugin = {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False}
    plugin |= {"hairpinMode": True, "ipam": ipam}
    return {"cniVersion": "1.0.0", "name": "distributary", "plugins": [plugin]}


def kubelet_config(
    state_dir: Path,
    pki: Path,
    name: str,
    address: str,
    ports: dict[str, int],
    *,
    cluster_dns: str | None = None,
) -> dict[str, Any]:
    """The kubelet's configuration file: served at `address` with the node's certificate from
    the control plane's CA in `pki`; clients authenticated by that CA and authorized by the API
    server; pods' resolv.conf naming `cluster_dns` (port 53) for `CLUSTER_DOMAIN` when given;
    cgroupfs on cgroups v1 under `CGROUP_ROOT`, no node allocatable enforced, no
    eviction or image garbage collection for a busy disk (a test node's pods stay), its files
    under `state_dir`."""
    never = {"memory.available": "1Mi", "nodefs.available": "0%", "imagefs.available": "0%"}
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address,
        "port": ports["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports["healthz"],
        "tlsCertFile": str(pki / f"node-{name}-serving.crt"),
        "tlsPrivateKeyFile": str(pki / f"node-{name}-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{socket_path(state_dir)}",
        "podLogsDir": str(state_dir / "pod-logs"),
        "volumePluginDir": str(state_dir / "kubelet" / "volume-plugins"),
        "evictionHard": never,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "makeIPTablesUtilChains": False,
        "registerNode": True,
        **({"clusterDNS": [cluster_dns], "clusterDomain": CLUSTER_DOMAIN} if cluster_dns else {}),
    }


def mounts_under(mountinfo: str, folder: Path) -> list[str]:
    """Mount points at or under `folder` in a /proc/PID/mountinfo text, deepest first."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            point = fields[4].encode().decode("unicode_escape")  # \040 for a space
            if point == str(folder) or point.startswith(f"{folder}/"):
                points.append(point)
    return sorted(points, key=lambda p: p.count("/"), reverse=True)


def normalized(reference: str) -> str:
    """An image reference as the CRI plugin looks it up: `name:tag` is docker.io/library's."""
    first, _, rest = reference.partition("/")
    if not rest:
        return f"docker.io/library/{reference}"
    if "." in first or ":" in first or first == "localhost":
        return reference
    return f"docker.io/{reference}"


def pause_archive(*, quiet: bool = False) -> tuple[str, Path]:
    """The sandbox image's reference and OCI archive: the Debian base of `devtools.images` whose
    process is `sleep infinity` (SIGKILL stops a sandbox), made once per base."""
    reference = f"{PAUSE_NAME}:{images.base_key()}"
    archive = images.images_root() / f"distributary-pause-{images.base_key()}.tar"
    if archive.exists():
        return reference, archive
    images.require_tools()
    images.images_root().mkdir(parents=True, exist_ok=True)
    with open(images.images_root() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.exists():
            return reference, archive
        images.make_base()
        if not quiet:
            _say(f"making the sandbox image {reference} ...")
        run = images.run
        container = run(images.buildah("from", "--pull=false", images.BASE_IMAGE), "buildah from")
        container = container.strip()
        try:
            config = ["config", "--entrypoint", '["sleep", "infinity"]', "--cmd", ""]
            run(images.buildah(*config, container), "buildah config")
            commit = ["commit", "--timestamp", str(images.TIMESTAMP), "--rm", container, reference]
            run(images.buildah(*commit), f"committing {reference}")
        except BaseException:
            subprocess.run(images.buildah("rm", container), capture_output=True, check=False)
            raise
        partial = archive.with_suffix(".partial")
        push = images.buildah("push", "--quiet", reference, f"oci-archive:{partial}:{reference}")
        run(push, f"writing {reference} to {partial}")
        partial.replace(archive)
    return reference, archive
