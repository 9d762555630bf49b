"""Fixtures for tests on a real node: pods that run in containers and talk to the cluster.

One control plane, one node and one broker for the session, all for pods
(`ControlPlane(pods_at=...)`, `EmbeddedBroker(pods_at=...)`): the API server is reachable from
pods through the `kubernetes` Service and admits each pod with its ServiceAccount's token; the
broker has a listener on the node's address. The modules of this folder run one after another on
one test worker (`tests/integration/conftest.py`), since a machine runs one node at a time. The
first run on a machine builds the kubelet, kube-proxy and kube-scheduler (minutes) and the job
image (`make images`).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.kube.conftest import install_established, started
from tests.integration.kube.operator_harness import Cluster
from tests.integration.kube.spark_operator_bed import SPARK_CRDS
from tests.integration.pods.pods import JVM_OPTIONS, PIPELINES, RELEASE, SYSTEM

from distributary.devtools.controlplane import ControlPlane
from distributary.devtools.images import IMAGES, build_all, export
from distributary.devtools.node import POD_CIDR, Node
from distributary.devtools.node_files import gateway
from distributary.devtools.postgres import PostgresServer
from distributary.devtools.sparkoperator import SparkOperatorBed
from distributary.local.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def pods_plane(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[ControlPlane]:
    """A control plane whose API server pods reach (at the node's address, `gateway(POD_CIDR)`)."""
    plane = ControlPlane(tmp_path_factory.mktemp("kube"), pods_at=gateway(POD_CIDR))
    with started(plane, pytestconfig):
        yield plane


@pytest.fixture(scope="session")
def node(
    pods_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
) -> Iterator[Node]:
    """A real node of `pods_plane` (`distributary.devtools.node`: containerd, the kubelet,
    kube-proxy, kube-scheduler and cluster DNS), Ready. A machine runs one node at a time."""
    running = Node(pods_plane, tmp_path_factory.mktemp("node"))
    try:
        with started(running, pytestconfig):
            yield running
    finally:
        running.remove_images()  # about 2 GB a session once the job image is loaded


@pytest.fixture(scope="session")
def pods_broker(tmp_path_factory: pytest.TempPathFactory, node: Node) -> Iterator[EmbeddedBroker]:
    """A broker with a listener for the node's pods (`pods_bootstrap_servers`)."""
    with EmbeddedBroker(tmp_path_factory.mktemp("kafka"), pods_at=node.address) as running:
        yield running


@pytest.fixture(scope="session")
def pods_postgres(tmp_path_factory: pytest.TempPathFactory, node: Node) -> Iterator[PostgresServer]:
    """A PostgreSQL that the node's pods reach at the node's address (password logins)."""
    folder = tmp_path_factory.mktemp("postgres")
    server = PostgresServer(folder, pods_at=node.address, pods_cidr=POD_CIDR)
    with server as running:
        yield running


@pytest.fixture(scope="session")
def job_image(node: Node, pytestconfig: pytest.Config) -> str:
    """The job image, built unless cached and loaded into the node; the reference pods use."""
    return loaded(node, pytestconfig, "spark")


@pytest.fixture(scope="session")
def connect_image(node: Node, pytestconfig: pytest.Config) -> str:
    """The Connect image (Kafka Connect with Debezium), built unless cached and loaded."""
    return loaded(node, pytestconfig, "connect")


@pytest.fixture(scope="session")
def operator_image(node: Node, pytestconfig: pytest.Config) -> str:
    """The operator image, built unless cached and loaded into the node."""
    return loaded(node, pytestconfig, "operator")


def loaded(node: Node, pytestconfig: pytest.Config, name: str) -> str:
    """The image `name` (of `IMAGES`), built unless cached (progress shown) and loaded into the
    node; its reference."""
    image = IMAGES[name]
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        build_all([name])
        node.load(export(image), image.tag)
    return image.tag


@pytest.fixture(scope="session")
def spark_operator_on_node(
    pods_plane: ControlPlane,
    node: Node,
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
) -> Iterator[SparkOperatorBed]:
    """The Kubeflow Spark operator's real controller and webhook managing `PIPELINES`, its
    drivers and executors run on the node (no kwok)."""
    install_established(Cluster(pods_plane.kubeconfig, "default"), SPARK_CRDS)
    state = tmp_path_factory.mktemp("spark-operator")
    bed = SparkOperatorBed(pods_plane, [PIPELINES], state, kwok=False)
    with started(bed, pytestconfig):
        yield bed


@pytest.fixture(scope="session")
def checkpoint_volume(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the host that backs the volume the chart's checkpoint claim binds to."""
    folder = tmp_path_factory.mktemp("checkpoint-volume")
    folder.chmod(0o777)  # the drivers and executors run as Spark's user
    return folder


@pytest.fixture(scope="session")
def installed(
    helm: str,
    pods_plane: ControlPlane,
    pods_broker: EmbeddedBroker,
    operator_image: str,
    job_image: str,
    connect_image: str,
    spark_operator_on_node: SparkOperatorBed,
    checkpoint_volume: Path,
) -> Iterator[Cluster]:
    """The chart installed with helm (its CRDs with it) as its defaults say but for the topics,
    made directly on the test broker at its listener for pods: the operator watches
    `PIPELINES`, runs views as SparkApplications of the job image, checkpoints on the chart's
    claim, bound to a volume of the node (a folder of the host) made beforehand as a cluster's
    administrator would, and runs Sources on the chart's Kafka Connect (`connect.worker`, one
    worker of the Connect image, its topics on the test broker). Uninstalled at the end; the
    claim and the volume are kept, as the chart keeps them."""
    kube = Cluster(pods_plane.kubeconfig, PIPELINES)
    kube.kubectl("create", "namespace", PIPELINES)
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "checkpoints"},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(checkpoint_volume), "type": "Directory"},
        },
    }
    kube.apply(volume)
    values = {
        "topicBackend": "direct",
        "kafka.bootstrapServers": pods_broker.pods_bootstrap_servers,
        "watchNamespaces[0]": PIPELINES,
        "intervals.observeSeconds": "5",
        "connect.worker.create": "true",
        "connect.worker.replicationFactor": "1",
        "connect.worker.javaOptions": f"-Xms128m -Xmx384m {JVM_OPTIONS}",
    }
    settings = [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]
    try:
        helm_run(helm, pods_plane, "install", RELEASE, str(ROOT / "charts" / "distributary"),
                 "--namespace", SYSTEM, "--create-namespace", *settings,
                 "--wait", "--timeout", "5m")  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{unready(kube)}") from None
    try:
        yield kube
    finally:
        helm_run(helm, pods_plane, "uninstall", RELEASE, "--namespace", SYSTEM, "--wait")


def unready(kube: Cluster) -> str:
    """What the release's pods that are not ready say: their state and their logs' last lines."""
    said = [kube.kubectl("get", "pods", "-n", SYSTEM, "-o", "wide", check=False)]
    found = json.loads(kube.kubectl("get", "pods", "-n", SYSTEM, "-o", "json", check=False) or "{}")
    for pod in found.get("items", []):
        statuses = pod["status"].get("containerStatuses") or []
        if statuses and all(s.get("ready") for s in statuses):
            continue
        name = pod["metadata"]["name"]
        said.append(f"{name}: {json.dumps(statuses)[:1500]}")
        log = kube.kubectl("logs", "-n", SYSTEM, name, "--tail=40", check=False)
        said.append(f"{name} log:\n{log}")
    return "\n".join(said)


def helm_run(helm: str, plane: ControlPlane, *args: str) -> str:
    """helm against the control plane; its output, or a failure with its error."""
    command = [helm, "--kubeconfig", str(plane.kubeconfig), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stderr[-3000:]}"
    return result.stdout
