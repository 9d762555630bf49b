"""Pods on a real node: the kubelet and containerd of `distributary.devtools.node`, beside the
local control plane, run the project's job image in containers (runc), with no registry (the
image is imported from its archive).

- A pod of the job image runs a short command as Spark's user and Succeeds; what it printed is
  read as `kubectl logs` reads it, from the API server, which asks the node's kubelet.
- A pod on the pods' network reaches a TCP port on the host at the node's address, both ways.
- A pod on the host's network reaches the test broker on loopback and gets a Kafka answer.
- A pod on the pods' network writes records to the broker's listener for pods and reads them
  back, and the host reads exactly those records.
- A pod that names no node is placed on the node by the scheduler.
- A pod's in-cluster client reaches the API server through the `kubernetes` Service with its
  ServiceAccount's token: refused as that account until a Role allows it, then answered.
- A pod finds another by its headless Service's name (cluster DNS, the EndpointSlice controller).
- A Service's cluster IP reaches its pod, from a pod by name and from the host (kube-proxy).

The fixtures (`conftest.py`) start the control plane, node and broker for pods; the first run on
a machine builds the node's programs (minutes) and the job image (`make images`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import threading
import time
import urllib.request
import uuid

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.kube.operator_harness import wait_for
from tests.integration.pods.pods import POD_TIMEOUT, create_pod, logs, run_pod

from distributary.devtools.node import POD_CIDR, Node
from distributary.local.broker import EmbeddedBroker

SPARK_UID = 185


def test_a_pod_of_the_job_image_runs_and_its_log_reads_through_the_api_server(
    node: Node, job_image: str
) -> None:
    token = uuid.uuid4().hex
    script = f"import os, pyspark; print({token!r}, os.getuid(), pyspark.__version__)"
    pod = run_pod(node, "job-image", job_image, ["python", "-c", script])
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    said = logs(node, "job-image").split()
    assert said[:2] == [token, str(SPARK_UID)], said
    assert said[2][0].isdigit(), f"no pyspark version: {said}"


def test_a_pod_reaches_a_port_listening_on_the_host(node: Node, job_image: str) -> None:
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
        pod = run_pod(node, "to-the-host", job_image, ["python", "-c", script])
        listener.join(POD_TIMEOUT)
    assert pod["status"]["phase"] == "Succeeded", logs(node, "to-the-host")
    assert received, "nothing connected to the host's port"
    peer, data = received[0]
    assert data == token
    assert ipaddress.ip_address(peer) in ipaddress.ip_network(POD_CIDR), peer
    assert peer == pod["status"]["podIP"]
    assert logs(node, "to-the-host").strip() == f"ack {token.decode()}"


def test_a_pod_on_the_hosts_network_gets_an_answer_from_the_test_broker(
    node: Node, job_image: str, pods_broker: EmbeddedBroker
) -> None:
    host, port = pods_broker.bootstrap_servers.rsplit(":", 1)
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
    pod = run_pod(node, "to-the-broker", job_image, ["python", "-c", script], hostNetwork=True)
    assert pod["status"]["phase"] == "Succeeded", logs(node, "to-the-broker")
    assert logs(node, "to-the-broker").split() == [str(correlation), "0"]


def test_a_pod_finds_another_by_its_headless_service_name(node: Node, job_image: str) -> None:
    """The node's pods resolve names with the cluster DNS (CoreDNS at the node's address): a
    headless Service's name gives its pod's address, which the EndpointSlice controller put in
    the Service's slice, as a Spark executor finds its driver; `kubernetes.default` gives the
    API server's Service address."""
    create_pod(node, "dns-target", job_image, ["sleep", "300"], labels={"app": "dns-target"})
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
    pod = run_pod(node, "dns-client", job_image, ["python", "-c", script])
    assert pod["status"]["phase"] == "Succeeded", logs(node, "dns-client")
    assert logs(node, "dns-client").split() == [pod_ip, kubernetes["spec"]["clusterIP"]]


def test_a_services_cluster_ip_reaches_its_pod_from_pods_and_from_the_host(
    node: Node, job_image: str
) -> None:
    """kube-proxy's rules: a ClusterIP Service's address, port 80, reaches its pod's port 8080,
    from another pod (by the Service's name) and from the host (by its address)."""
    token = uuid.uuid4().hex
    serve = f"import functools, http.server as h; open('/tmp/t', 'w').write({token!r}); "
    serve += "h.test(functools.partial(h.SimpleHTTPRequestHandler, directory='/tmp'), port=8080)"
    create_pod(node, "web", job_image, ["python", "-c", serve], labels={"app": "web"})
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
    pod = run_pod(node, "web-client", job_image, ["python", "-c", fetch])
    assert pod["status"]["phase"] == "Succeeded", logs(node, "web-client")
    assert logs(node, "web-client").strip() == token


def test_a_pod_that_names_no_node_is_placed_on_the_node(node: Node, job_image: str) -> None:
    pod = run_pod(node, "unplaced", job_image, ["true"], placed=False)
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    assert pod["spec"]["nodeName"] == node.name
    scheduled = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert [c["status"] for c in scheduled] == ["True"], pod["status"]["conditions"]


def test_a_pod_writes_to_and_reads_from_the_brokers_listener_for_pods(
    node: Node, job_image: str, pods_broker: EmbeddedBroker
) -> None:
    """The pod (on the pods' network, where the broker's loopback listeners are out of reach)
    bootstraps from `pods_bootstrap_servers`, is sent the pods' listener as the partition
    leader, writes 200 keyed records and reads them back; the host reads exactly those."""
    topic = f"from-a-pod-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": pods_broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result()
    sent = {f"k{i}": f"v{i}" for i in range(200)}
    script = f"""
from confluent_kafka import Consumer, Producer
servers, topic, sent = {pods_broker.pods_bootstrap_servers!r}, {topic!r}, {sent!r}
producer = Producer({{"bootstrap.servers": servers, "enable.idempotence": True}})
for key, value in sent.items():
    producer.produce(topic, key=key, value=value)
assert producer.flush(60) == 0, "records left unsent"
consumer = Consumer({{"bootstrap.servers": servers, "group.id": "pod", "auto.offset.reset":
    "earliest", "enable.auto.commit": False}})
consumer.subscribe([topic])
read = {{}}
for _ in range(120):
    for message in consumer.consume(500, 1.0):
        assert message.error() is None, message.error()
        read[message.key().decode()] = message.value().decode()
    if len(read) >= len(sent):
        break
consumer.close()
print(len(read), read == sent)
"""
    pod = run_pod(node, "kafka-client", job_image, ["python", "-c", script])
    assert pod["status"]["phase"] == "Succeeded", logs(node, "kafka-client")
    said = logs(node, "kafka-client")  # the client's warnings first, if any
    assert said.splitlines()[-1].split() == ["200", "True"], said
    consumer = Consumer(
        {
            "bootstrap.servers": pods_broker.bootstrap_servers,
            "group.id": "host",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    read: list[tuple[str, str]] = []
    deadline = time.monotonic() + 60
    while len(read) < len(sent) and time.monotonic() < deadline:
        for message in consumer.consume(500, 1.0):
            assert message.error() is None, message.error()
            read.append((message.key().decode(), message.value().decode()))
    consumer.close()
    assert sorted(read) == sorted(sent.items())


# What a pod's in-cluster client does (as the Kubernetes client libraries do): the account's
# token, CA and namespace from the mounted volume, the API server by the `kubernetes` Service's
# name. Prints the Service host the kubelet gave, the answer's status and the pod's uid or the
# refusal's message.
IN_CLUSTER = """
import json, os, ssl, urllib.error, urllib.request
folder = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(folder + "/token").read()
namespace = open(folder + "/namespace").read()
context = ssl.create_default_context(cafile=folder + "/ca.crt")
url = f"https://kubernetes.default.svc/api/v1/namespaces/{namespace}/pods/{os.environ['HOSTNAME']}"
request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
try:
    with urllib.request.urlopen(request, context=context, timeout=20) as answer:
        status, body = answer.status, json.load(answer)
except urllib.error.HTTPError as refused:
    status, body = refused.code, json.load(refused)
said = body.get("metadata", {}).get("uid") or body.get("message")
print(json.dumps([os.environ["KUBERNETES_SERVICE_HOST"], status, said]))
"""


def test_a_pods_in_cluster_client_reaches_the_api_server_as_its_service_account(
    node: Node, job_image: str
) -> None:
    namespace = f"in-cluster-{uuid.uuid4().hex[:6]}"
    node.api("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    kubernetes = node.api("GET", "/api/v1/namespaces/default/services/kubernetes")
    cluster_ip = kubernetes["spec"]["clusterIP"]

    refused = run_pod(node, "refused", job_image, ["python", "-c", IN_CLUSTER], namespace=namespace)
    assert refused["status"]["phase"] == "Succeeded", logs(node, "refused", namespace)
    host, status, message = json.loads(logs(node, "refused", namespace))
    assert (host, status) == (cluster_ip, 403), message
    assert f"system:serviceaccount:{namespace}:default" in message

    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    node.api("POST", f"{rbac}/roles", {"metadata": {"name": "read-pods"}, "rules": [rule]})
    binding = {
        "metadata": {"name": "read-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-pods"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
    }
    node.api("POST", f"{rbac}/rolebindings", binding)
    allowed = run_pod(node, "allowed", job_image, ["python", "-c", IN_CLUSTER], namespace=namespace)
    assert allowed["status"]["phase"] == "Succeeded", logs(node, "allowed", namespace)
    assert json.loads(logs(node, "allowed", namespace)) == [
        cluster_ip,
        200,
        allowed["metadata"]["uid"],
    ]
    node.api("DELETE", f"/api/v1/namespaces/{namespace}")
