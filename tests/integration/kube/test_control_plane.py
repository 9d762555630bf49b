"""The local control plane is a real Kubernetes API server: the machine's kubectl works against it,
the project's CRDs install (the server checks they are structural and their CEL rules compile) and
are enforced with their own messages, and the garbage collector and namespace controller run."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from distributary.devtools.controlplane import KUBERNETES_VERSION, ControlPlane
from distributary.kube import resources

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

REPO = Path(__file__).resolve().parents[3]
CRDS = REPO / "crds"
INVALID = REPO / "tests" / "data" / "invalid"


@pytest.fixture(scope="module")
def crds(kubectl: Kubectl) -> list[str]:
    """The project's CRDs, applied server-side and Established."""
    kubectl("apply", "--server-side", "-f", str(CRDS))
    names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in sorted(CRDS.glob("*.yaml"))]
    kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names))
    return names


@pytest.fixture(scope="module")
def namespace(kubectl: Kubectl, crds: list[str]) -> Iterator[str]:
    """A namespace of the module's own."""
    kubectl("create", "namespace", "control-plane-tests")
    yield "control-plane-tests"
    kubectl("delete", "namespace", "control-plane-tests", "--wait=false")


def apply(kubectl: Kubectl, namespace: str, manifest: str, check: bool = True) -> str:
    """`kubectl apply --server-side` of one manifest; kubectl's stderr."""
    result = kubectl(
        "apply", "--server-side", "-n", namespace, "-f", "-", input=manifest, check=check
    )
    return result.stderr


def test_go_module_pins_the_release_and_every_staging_module() -> None:
    go_mod = (REPO / "controlplane" / "go.mod").read_text()
    assert f"\tk8s.io/kubernetes {KUBERNETES_VERSION}\n" in go_mod
    staging = "v0." + KUBERNETES_VERSION.split(".", 1)[1]  # v1.34.4 -> v0.34.4
    replaces = re.findall(r"^\t(k8s\.io/\S+) => (\S+) (\S+)$", go_mod, flags=re.MULTILINE)
    assert len(replaces) >= 29
    for module, target, version in replaces:
        assert (target, version) == (module, staging), module


def test_kubectl_lists_the_default_namespace(kubectl: Kubectl) -> None:
    names = kubectl("get", "namespaces", "-o", "name").stdout.split()
    assert "namespace/default" in names
    assert "namespace/kube-system" in names


def test_server_reports_the_pinned_release(kubectl: Kubectl, control_plane: ControlPlane) -> None:
    version = json.loads(kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert version["gitVersion"] == KUBERNETES_VERSION
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    assert config["clusters"][0]["cluster"]["server"] == control_plane.server


def test_crds_install_server_side_and_are_established(kubectl: Kubectl, crds: list[str]) -> None:
    for name in crds:
        crd = json.loads(kubectl("get", f"crd/{name}", "-o", "json").stdout)
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions["Established"] == "True", name
        assert conditions["NamesAccepted"] == "True", name
        assert "NonStructuralSchema" not in conditions, name
    served = kubectl("api-resources", "--api-group=distributary.dev", "-o", "name").stdout.split()
    assert sorted(served) == sorted(crds)


def _cases() -> list[Path]:
    return sorted(INVALID.glob("*.yaml"))


def _expected(path: Path, key: str) -> str:
    for line in path.read_text().splitlines():
        if line.startswith(f"# {key}:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"{path} has no '# {key}:' line")


@pytest.mark.parametrize("path", _cases(), ids=lambda p: p.stem)
def test_invalid_resource_is_rejected_with_the_crds_message(
    path: Path, kubectl: Kubectl, namespace: str
) -> None:
    field, message = _expected(path, "field"), _expected(path, "message")
    *accepted, rejected = re.split(r"^---\n", path.read_text(), flags=re.MULTILINE)
    for manifest in accepted:
        apply(kubectl, namespace, manifest)
    error = apply(kubectl, namespace, rejected, check=False)
    assert "is invalid" in error, error
    # The field and the rule's message, together in one of the server's field errors.
    assert re.search(f"{re.escape(field)}: [^\n]*{re.escape(message)}", error), error


def test_every_invalid_example_says_what_it_expects() -> None:
    assert len(_cases()) >= 10
    for path in _cases():
        assert _expected(path, "field").startswith("spec.")
        assert _expected(path, "message")


def test_garbage_collector_deletes_what_a_deleted_resource_owned(
    kubectl: Kubectl, namespace: str
) -> None:
    apply(
        kubectl,
        namespace,
        "apiVersion: distributary.dev/v1alpha1\nkind: Log\nmetadata:\n  name: owner\n",
    )
    uid = kubectl("get", "log/owner", "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
    owner = {"apiVersion": "distributary.dev/v1alpha1", "kind": "Log", "name": "owner", "uid": uid}
    for name, owners in (("owned", [owner]), ("unowned", [])):
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "ownerReferences": owners},
            "data": {"owner": "owner" if owners else ""},
        }
        apply(kubectl, namespace, json.dumps(configmap))
    kubectl("delete", "log/owner", "-n", namespace)
    # The collector rediscovers resources every 30 s, so it may learn of Logs only after this.
    kubectl("wait", "--for=delete", "configmap/owned", "-n", namespace, "--timeout=120s")
    assert kubectl("get", "configmap/unowned", "-n", namespace, check=False).returncode == 0


def test_namespace_controller_removes_a_deleted_namespace_and_its_resources(
    kubectl: Kubectl, crds: list[str]
) -> None:
    kubectl("create", "namespace", "short-lived")
    apply(
        kubectl,
        "short-lived",
        "apiVersion: distributary.dev/v1alpha1\nkind: Log\nmetadata:\n  name: doomed\n",
    )
    kubectl("delete", "namespace", "short-lived", "--timeout=90s")
    assert kubectl("get", "namespace", "short-lived", check=False).returncode != 0


def test_a_restarted_control_plane_keeps_its_resources(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    def kubectl_of(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
        command = ["kubectl", "--kubeconfig", str(plane.kubeconfig), *args]
        return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)

    with ControlPlane(tmp_path / "plane", quiet=True) as plane:
        kubectl_of(plane, "create", "namespace", "kept")
    with ControlPlane(tmp_path / "plane", quiet=True) as plane:
        assert "namespace/kept" in kubectl_of(plane, "get", "namespaces", "-o", "name").stdout
    assert not (tmp_path / "plane" / "pids").exists()


def test_the_client_lists_in_pages_without_managed_fields(
    kubectl: Kubectl, namespace: str, control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(5):
        configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"page-{i}"}}
        apply(kubectl, namespace, json.dumps(configmap))
    monkeypatch.setattr(resources, "LIST_PAGE", 2)  # five objects in three pages
    with resources.Kube(control_plane.kubeconfig) as kube:
        found = kube.list("v1", "ConfigMap", namespace)
    names = sorted(
        i["metadata"]["name"] for i in found if i["metadata"]["name"].startswith("page-")
    )
    assert names == [f"page-{i}" for i in range(5)]
    assert all("managedFields" not in i["metadata"] for i in found)
    assert {(i["apiVersion"], i["kind"]) for i in found} == {("v1", "ConfigMap")}
