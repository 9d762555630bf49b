"""Fixtures for tests against a real kube-apiserver: the local control plane and the real kubectl.

The control plane is the one `make devcluster` runs (`distributary.devtools.controlplane`), started
once per session in pytest's temporary folder. The first session on a machine builds kube-apiserver
and its controllers from Go modules (minutes), so its progress lines bypass pytest's
capture. So do those of the Spark operator's controller and kwok (`spark_operator`), built and
started once per session by the first module that needs them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest
from tests.integration.kube.chart_rbac import RBAC_MODES, install_chart_rbac
from tests.integration.kube.operator_harness import Cluster, Operator
from tests.integration.kube.spark_operator_bed import NAMESPACES, SPARK_CRDS

from distributary.devtools.controlplane import ControlPlane
from distributary.devtools.dns import ClusterDNS
from distributary.devtools.sparkoperator import SparkOperatorBed
from distributary.local.broker import EmbeddedBroker

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


class Part(Protocol):
    """What the fixtures start: a part of the test bed with its own start and stop."""

    def start(self) -> object: ...

    def stop(self) -> None: ...


@contextlib.contextmanager
def started(part: Part, pytestconfig: pytest.Config) -> Iterator[None]:
    """`part` started (its progress shown, past pytest's capture: a first start may build for
    minutes), and stopped however the fixture ends."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        part.start()
    try:
        yield
    finally:
        part.stop()


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[ControlPlane]:
    """etcd, kube-apiserver and kube-controllers, running for the whole session."""
    plane = ControlPlane(tmp_path_factory.mktemp("kube"))
    with started(plane, pytestconfig):
        yield plane


@pytest.fixture(scope="session")
def kubectl(control_plane: ControlPlane) -> Kubectl:
    """Run the machine's kubectl against the control plane: `kubectl("get", "ns")`. Raises
    CalledProcessError on failure unless `check=False`; `input` is passed to stdin."""
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is needed on PATH for the Kubernetes integration tests")

    def run(
        *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        command = [binary, "--kubeconfig", str(control_plane.kubeconfig), *args]
        result = subprocess.run(command, input=input, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed:\n{result.stdout}{result.stderr}")
        return result

    return run


@pytest.fixture(scope="session")
def spark_operator(
    control_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
) -> Iterator[SparkOperatorBed]:
    """The Kubeflow Spark operator's real controller and webhook managing the namespaces of
    `spark_operator_bed.NAMESPACES`, with kwok playing one node and the pods on it; its CRDs
    installed from the Go module cache."""
    install_established(Cluster(control_plane.kubeconfig, "default"), SPARK_CRDS)
    bed = SparkOperatorBed(control_plane, NAMESPACES, tmp_path_factory.mktemp("spark-operator"))
    with started(bed, pytestconfig):
        yield bed


@pytest.fixture(scope="session")
def cluster_dns(
    control_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
) -> Iterator[ClusterDNS]:
    """CoreDNS answering the control plane's Service names on a loopback port."""
    dns = ClusterDNS(tmp_path_factory.mktemp("dns"), control_plane.kubeconfig)
    with started(dns, pytestconfig):
        yield dns


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Cluster:
    """The test module's namespace (its `NAMESPACE`), with the project's CRDs installed and the
    CRD files its `EXTRA_CRDS` names (another operator's kinds), all established."""
    kube = Cluster(control_plane.kubeconfig, request.module.NAMESPACE)
    for path in getattr(request.module, "EXTRA_CRDS", ()):
        install_established(kube, path)
    kube.install_crds()
    return kube


def install_established(kube: Cluster, path: Path) -> None:
    """Apply the CRDs of `path` (a file or folder) and wait until they are established: `kubectl
    wait` fails outright on a CRD whose status has no conditions yet, so it is retried."""
    kube.kubectl("apply", "--server-side", "-f", str(path))
    for _ in range(40):
        waited = kube.kubectl(
            "wait", "--for=condition=Established", "-f", str(path), "--timeout=60s", check=False
        )
        if waited.count("condition met") == len(
            kube.kubectl("get", "-f", str(path), "-o", "name").split()
        ):
            return
        time.sleep(0.25)
    raise AssertionError(f"the CRDs of {path} were not established")


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster,
    broker: EmbeddedBroker,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Operator]:
    """`distributary operator` on the module's namespace, with its `OPERATOR_FLAGS`; node-local
    checkpoints allowed unless its `NODE_LOCAL_CHECKPOINTS` is False; as the chart's ServiceAccount
    with the chart's rights for watching this namespace (`chart_rbac`), or every namespace when
    its `OPERATOR_RBAC` is "chart-cluster", or as cluster admin when it is "admin"."""
    flags = tuple(getattr(request.module, "OPERATOR_FLAGS", ()))
    with running_operator(
        cluster,
        broker,
        tmp_path_factory.mktemp("operator"),
        flags,
        rbac=getattr(request.module, "OPERATOR_RBAC", "chart"),
        node_local_checkpoints=getattr(request.module, "NODE_LOCAL_CHECKPOINTS", True),
    ) as running:
        yield running


@contextlib.contextmanager
def running_operator(
    cluster: Cluster,
    broker: EmbeddedBroker,
    folder: Path,
    flags: tuple[str, ...],
    *,
    rbac: str = "chart",
    node_local_checkpoints: bool = True,
) -> Iterator[Operator]:
    """`distributary operator` with `flags`, as the `operator` fixture starts it (a module whose
    flags are known only once its fixtures run starts its own with this)."""
    account = None
    if rbac != "admin":
        assert rbac in RBAC_MODES, f"OPERATOR_RBAC: {rbac!r} is not one of {RBAC_MODES}"
        account = install_chart_rbac(
            cluster,
            folder,
            release=cluster.namespace,
            flags=flags,
            bootstrap_servers=broker.bootstrap_servers,
            watch_all=rbac == "chart-cluster",
        )
    running = Operator(
        cluster,
        broker.bootstrap_servers,
        folder,
        flags,
        node_local_checkpoints=node_local_checkpoints,
        kubeconfig=account.kubeconfig if account else None,
        watch_all=bool(account and account.watch_all),
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()
        stop_local_processes(running.folder / "local")


def stop_local_processes(folder: Path) -> None:
    """Kill what the local runtime left running under `folder` (runners outlive the operator
    by design, so a restarted operator adopts them): one test module's Spark must not slow the
    next."""
    for pid_file in folder.rglob("runner.pid"):
        try:
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if str(pid_file.parent).encode() in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # its own session: the JVM goes with it
