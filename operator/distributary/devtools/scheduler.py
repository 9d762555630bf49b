"""Pods that name no node are placed on the test node: upstream's kube-scheduler, built with the
kubelet (`controlplane/cmd/kube-scheduler`, build tag `kubelet`).

A Spark driver's pod and the executors it asks for name no node: the scheduler binds each to a
node that fits it (here the one node, once its resources allow). It runs on the host beside the
node's namespace, as the control plane's `system:kube-scheduler` user (a client certificate of
the control plane's CA, which the API server's default RBAC roles authorize), one replica with
no leader election, its health on loopback. The scheduler is the API server's client alone: it
keeps nothing on the host, so a stop (or a kill) leaves nothing behind.
"""

from __future__ import annotations

from pathlib import Path

from distributary.devtools.controlplane import ControlPlane, client_kubeconfig, issue_certificate
from distributary.devtools.host_part import HostPart
from distributary.processes import free_port

USER = "kube-scheduler"  # the certificate's name in the control plane's pki folder


def scheduler_kubeconfig(plane: ControlPlane, path: Path) -> Path:
    """A kubeconfig at `path` for the control plane's scheduler user, its certificate issued
    unless it was already."""
    subject = "CN = system:kube-scheduler"
    issue_certificate(plane.pki, USER, subject, "extendedKeyUsage = clientAuth")
    path.write_text(client_kubeconfig(plane.server, plane.pki, USER))
    return path


class Scheduler(HostPart):
    """kube-scheduler for the control plane `plane`, its kubeconfig and log in `folder`."""

    name = "kube-scheduler"

    def __init__(self, binary: Path, plane: ControlPlane, folder: Path) -> None:
        kubeconfig = scheduler_kubeconfig(plane, folder / "scheduler.kubeconfig")
        port = free_port()
        flags = [
            f"--kubeconfig={kubeconfig}",
            # Whom to trust for its own endpoints (/healthz is always allowed).
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
        ]
        log = folder / "logs" / "kube-scheduler.log"
        super().__init__(binary, flags, log, f"https://127.0.0.1:{port}/healthz")
