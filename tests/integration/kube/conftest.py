"""Fixtures for tests against a real kube-apiserver: the local control plane and the real kubectl.

The control plane is the one `make devcluster` runs (`distributary.kube.controlplane`), started once
per session in pytest's temporary folder. The first session on a machine builds kube-apiserver and
kube-controller-manager from Go modules (minutes), so its progress lines bypass pytest's capture.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest

from distributary.kube.controlplane import ControlPlane

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[ControlPlane]:
    """etcd, kube-apiserver and kube-controller-manager, running for the whole session."""
    plane = ControlPlane(tmp_path_factory.mktemp("kube"))
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        plane.start()
    try:
        yield plane
    finally:
        plane.stop()


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
