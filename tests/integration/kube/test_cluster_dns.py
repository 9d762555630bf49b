"""Cluster DNS (`devtools.dns`): CoreDNS, built from the project's Go module, answers Service
names from the real API server, as pods on the test node will ask them.

A Service's name resolves to the cluster IP the API server gave it; `kubernetes.default` to the
API server's own Service; a Service made while CoreDNS runs resolves within seconds (its watch);
a deleted one, or one that never was, is refused (NXDOMAIN) rather than answered from elsewhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from tests.integration.kube.operator_harness import Cluster

from distributary.devtools.dns import ClusterDNS, DNSError, resolve

NAMESPACE = "dns-test"


def service(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def cluster_ip(cluster: Cluster, name: str) -> str:
    found = cluster.get("service", name) or {}
    return str(found["spec"]["clusterIP"])


def eventually(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    pytest.fail(f"not {what} within {timeout:.0f}s")


def answer(dns: ClusterDNS, name: str) -> list[str] | str:
    """The addresses, or what the server said instead."""
    try:
        return resolve(name, dns.address, dns.port)
    except DNSError as error:
        return str(error)


def test_service_names_resolve_to_their_cluster_ips(
    cluster_dns: ClusterDNS, cluster: Cluster
) -> None:
    cluster.apply(service("web"))
    ip = cluster_ip(cluster, "web")
    eventually(
        "web's name resolving",
        lambda: answer(cluster_dns, f"web.{NAMESPACE}.svc.cluster.local") == [ip],
    )
    kubernetes = cluster_ip(Cluster(cluster.kubeconfig, "default"), "kubernetes")
    assert answer(cluster_dns, "kubernetes.default.svc.cluster.local") == [kubernetes]


def test_a_deleted_or_unknown_service_is_no_such_name(
    cluster_dns: ClusterDNS, cluster: Cluster
) -> None:
    assert "NXDOMAIN" in str(answer(cluster_dns, f"nothing.{NAMESPACE}.svc.cluster.local"))
    cluster.apply(service("brief"))
    name = f"brief.{NAMESPACE}.svc.cluster.local"
    eventually("brief's name resolving", lambda: isinstance(answer(cluster_dns, name), list))
    cluster.kubectl("delete", "service", "brief", "-n", NAMESPACE)
    eventually("brief's name gone", lambda: "NXDOMAIN" in str(answer(cluster_dns, name)))
