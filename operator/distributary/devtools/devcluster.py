"""`make devcluster`: the local control plane, and with `--node` a real node beside it, until
Ctrl-C.

    python -m distributary.devtools.devcluster [--state-dir DIR] [--node]

The control plane (`devtools.controlplane`: etcd, kube-apiserver, the garbage collector, the
namespace and EndpointSlice controllers) keeps its resources for the next start. `--node` adds
the test node (`devtools.node`: the kubelet, containerd, kube-proxy, kube-scheduler, cluster DNS;
as root, one node a machine), on which pods run for real, and makes the API server reachable from
them with their ServiceAccounts' tokens (`ControlPlane`'s `pods_at`); images are loaded with
`Node.load` from the archives `make images` writes.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from distributary.devtools.controlplane import (
    DEFAULT_STATE_DIR,
    KUBERNETES_VERSION,
    ControlPlane,
    ControlPlaneError,
)
from distributary.devtools.gobuild import say
from distributary.devtools.node import Node
from distributary.devtools.node_files import POD_CIDR, NodeError, gateway


def _usage(plane: ControlPlane, node: Node | None) -> str:
    lines = [
        f"\nA Kubernetes {KUBERNETES_VERSION} control plane is running at {plane.server}"
        f" (state and logs in {plane.state_dir}).",
    ]
    if node is not None:
        lines.append(
            f"Node {node.name} is Ready at {node.address} (state and logs in {node.state_dir})."
        )
    lines += [
        " In another shell:\n",
        f"    export KUBECONFIG={plane.kubeconfig}",
        "    kubectl get ns" + (",nodes" if node is not None else ""),
        "    kubectl apply --server-side -f crds/\n",
        "Press Ctrl-C to stop it; its resources are kept for the next start.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Start the control plane (and the node), say how to use it, run until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m distributary.devtools.devcluster",
        description="Run a local Kubernetes control plane, and a node with --node, until Ctrl-C.",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help=f"etcd's data, certificates, kubeconfig and logs (default {DEFAULT_STATE_DIR})",
    )
    parser.add_argument(
        "--node",
        action="store_true",
        help="add a real node: kubelet, containerd, kube-proxy, kube-scheduler, DNS (as root)",
    )
    args = parser.parse_args(argv)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    plane = ControlPlane(args.state_dir, pods_at=gateway(POD_CIDR) if args.node else None)
    node: Node | None = None
    try:
        plane.start()
        if args.node:
            node = Node(plane, args.state_dir / "node").start()
        print(_usage(plane, node), flush=True)
        while not (exited := [*plane.running(), *(node.exited() if node else [])]):
            time.sleep(1)
        say("control plane", f"{', '.join(exited)} exited; see {plane.logs}")
        return 1
    except (ControlPlaneError, NodeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        say("control plane", "stopping ...")
        return 0
    finally:
        # A second Ctrl-C (or SIGTERM) must not cut the stop short: the node's bridge and
        # cgroups would be left until its next start.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        if node is not None:
            node.stop()
        plane.stop()


if __name__ == "__main__":
    sys.exit(main())
