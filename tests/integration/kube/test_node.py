"""Pods on a real node: the kubelet and containerd of `distributary.devtools.node`, beside the
local control plane, run the project's job image in containers (runc), with no registry (the
image is imported from its archive).

- A pod of the job image runs a short command as Spark's user and Succeeds; what it printed is
  read as `kubectl logs` reads it, from the API server, which asks the node's kubelet.
- A pod on the pods' network reaches a TCP port on the host at the node's address, both ways.
- A pod on the host's network reaches the test broker on loopback and gets a Kafka answer (the
  broker listens on 127.0.0.1 alone, which a pod on the pods' network cannot reach).
- A pod finds another by its headless Service's name (cluster DNS, the EndpointSlice controller).
- A Service's cluster IP reaches its pod, from a pod by name and from the host (kube-proxy).

The control plane runs no scheduler: each pod names the node. The first run on a machine builds
the kubelet (minutes) and the job image (`make images`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from typing import Any

import pytest

from distributary.devtools.images import SPARK, build_all, export
from distributary.devtools.node import POD_CIDR, Node
from distributary.local.broker import EmbeddedBroker

SPARK_UID = 185
POD_TIMEOUT = 180.0  # seconds for a pod to finish on a loaded machine


@pytest.fixture(scope="module")
def images(node: Node, pytestconfig: pytest.Config) -> str:
    """The job image, built unless cached and loaded into the node; the reference pods use."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        build_all(["spark"])
        node.load(export(SPARK), SPARK.tag)
    return SPARK.tag


def create_pod(
    node: Node,
    name: str,
    image: str,
    command: list[str],
    *,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> None:
    """Create a pod on the node that runs `command` once."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {
            "nodeName": node.name,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": image, "args": command}],
            **spec,
        },
    }
    node.api("POST", "/api/v1/namespaces/default/pods", pod)


def run_pod(node: Node, name: str, image: str, command: list[str], **spec: Any) -> dict[str, Any]:
    """Create a pod on the node that runs `command` once; the pod once it has finished."""
    create_pod(node, name, image, command, **spec)
    deadline = time.monotonic() + POD_TIMEOUT
    while time.monotonic() < deadline:
        found: dict[str, Any] = node.api("GET", f"/api/v1/namespaces/default/pods/{name}")
        if found.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return found
        time.sleep(0.5)
    raise AssertionError(f"pod {name} did not finish in {POD_TIMEOUT:.0f}s: {found.get('status')}")


def logs(node: Node, name: str) -> str:
    """The pod's log as `kubectl logs` reads it: the API server asks the kubelet."""
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is needed on PATH"
    command = [kubectl, "--kubeconfig", str(node.plane.kubeconfig), "logs", name]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"kubectl logs {name} failed: {result.stderr}"
    return result.stdout


def test_a_pod_of_the_job_image_runs_and_its_log_reads_through_the_api_server(
    node: Node, images: str
) -> None:
    token = uuid.uuid4().hex
    script = f"import os, pyspark; print({token!r}, os.getuid(), pyspark.__version__)"
    pod = run_pod(node, "job-image", images, ["python", "-c", script])
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    said = logs(node, "job-image").split()
    assert said[:2] == [token, str(SPARK_UID)], said
    assert said[2][0].isdigit(), f"no pyspark version: {said}"


def test_a_pod_reaches_a_port_listening_on_the_host(node: Node, images: str) -> None:
    token = uuid.uuid4().hex.encode()
    received: list[tuple[str, bytes]] = []
    with socket.create_server((node.address, 0)) as server:
        server.settimeout(POD_TIMEOUT)
        port = server.getsockname()[1]

        def answer() -> None:
            with contextlib.suppress(TimeoutError):  # the asserts below say so
                connection, (peer, _) = server.accept()
                with connection:
                    received.append((peer, connection.recv(100)))
                    connection.sendall(b"ack " + token)

        listener = threading.Thread(target=answer)
        listener.start()
        script = (
            f"import socket; s = socket.create_connection(({node.address!r}, {port}), 10); "
            f"s.sendall({token!r}); print(s.recv(100).decode())"
        )
        pod = run_pod(node, "to-the-host", images, ["python", "-c", script])
        listener.join(POD_TIMEOUT)
    assert pod["status"]["phase"] == "Succeeded", logs(node, "to-the-host")
    assert received, "nothing connected to the host's port"
    peer, data = received[0]
    assert data == token
    assert ipaddress.ip_address(peer) in ipaddress.ip_network(POD_CIDR), peer
    assert peer == pod["status"]["podIP"]
    assert logs(node, "to-the-host").strip() == f"ack {token.decode()}"


def test_a_pod_on_the_hosts_network_gets_an_answer_from_the_test_broker(
    node: Node, images: str, broker: EmbeddedBroker
) -> None:
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    correlation = 4242
    # Kafka's ApiVersions request, version 0: the broker answers with the correlation id and
    # error code 0 (then the versions it serves).
    script = f"""
import socket, struct
request = struct.pack(">hhih", 18, 0, {correlation}, 4) + b"node"
with socket.create_connection(({host!r}, {port}), 10) as s:
    s.sendall(struct.pack(">i", len(request)) + request)
    answer = s.recv(4 + 4 + 2)
size, correlation, error = struct.unpack(">iih", answer)
print(correlation, error)
"""
    pod = run_pod(node, "to-the-broker", images, ["python", "-c", script], hostNetwork=True)
    assert pod["status"]["phase"] == "Succeeded", logs(node, "to-the-broker")
    assert logs(node, "to-the-broker").split() == [str(correlation), "0"]


def wait_for(what: str, probe: Any, timeout: float = POD_TIMEOUT) -> Any:
    """`probe()`'s first truthy answer, polled until `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"not {what} within {timeout:.0f}s")


def test_a_pod_finds_another_by_its_headless_service_name(node: Node, images: str) -> None:
    """The node's pods resolve names with the cluster DNS (CoreDNS at the node's address): a
    headless Service's name gives its pod's address, which the EndpointSlice controller put in
    the Service's slice, as a Spark executor finds its driver; `kubernetes.default` gives the
    API server's Service address."""
    create_pod(node, "dns-target", images, ["sleep", "300"], labels={"app": "dns-target"})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "dns-target", "namespace": "default"},
        "spec": {"clusterIP": "None", "selector": {"app": "dns-target"}, "ports": [{"port": 80}]},
    }
    node.api("POST", "/api/v1/namespaces/default/services", service)
    slices = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
    selector = "?labelSelector=kubernetes.io%2Fservice-name%3Ddns-target"

    def target_address() -> str | None:
        for piece in node.api("GET", slices + selector).get("items", []):
            for endpoint in piece.get("endpoints") or []:
                if (endpoint.get("conditions") or {}).get("ready"):
                    return str(endpoint["addresses"][0])
        return None

    address = wait_for("the target pod in its Service's EndpointSlice", target_address)
    pod_ip = node.api("GET", "/api/v1/namespaces/default/pods/dns-target")["status"]["podIP"]
    assert address == pod_ip
    kubernetes = node.api("GET", "/api/v1/namespaces/default/services/kubernetes")
    script = (
        "import socket; print(socket.gethostbyname('dns-target'), "
        "socket.gethostbyname('kubernetes.default'))"
    )
    pod = run_pod(node, "dns-client", images, ["python", "-c", script])
    assert pod["status"]["phase"] == "Succeeded", logs(node, "dns-client")
    assert logs(node, "dns-client").split() == [pod_ip, kubernetes["spec"]["clusterIP"]]


def test_a_services_cluster_ip_reaches_its_pod_from_pods_and_from_the_host(
    node: Node, images: str
) -> None:
    """kube-proxy's rules: a ClusterIP Service's address, port 80, reaches its pod's port 8080,
    from another pod (by the Service's name) and from the host (by its address)."""
    token = uuid.uuid4().hex
    serve = f"import functools, http.server as h; open('/tmp/t', 'w').write({token!r}); "
    serve += "h.test(functools.partial(h.SimpleHTTPRequestHandler, directory='/tmp'), port=8080)"
    create_pod(node, "web", images, ["python", "-c", serve], labels={"app": "web"})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    created = node.api("POST", "/api/v1/namespaces/default/services", service)
    cluster_ip = created["spec"]["clusterIP"]

    def from_the_host() -> str | None:
        url = f"http://{cluster_ip}/t"
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as answer:
            return str(answer.read().decode())
        return None

    assert wait_for(f"the host reaching {cluster_ip}:80", from_the_host) == token
    fetch = (
        "import urllib.request as u; print(u.urlopen('http://web/t', timeout=10).read().decode())"
    )
    pod = run_pod(node, "web-client", images, ["python", "-c", fetch])
    assert pod["status"]["phase"] == "Succeeded", logs(node, "web-client")
    assert logs(node, "web-client").strip() == token
