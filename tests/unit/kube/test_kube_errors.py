"""The Kubernetes adapter's own judgement, without an API server: how it is configured, how it
names apiVersions, and what its errors tell a person to do."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from distributary.kube.errors import KubeError
from distributary.kube.resources import Kube, _api_version

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {{server: "{server}", insecure-skip-tls-verify: true}}
users:
- name: test
  user: {{token: not-a-secret}}
contexts:
- name: test
  context: {{cluster: test, user: test}}
current-context: test
"""


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(server=server))
    return path


def status_error(status: int, message: str, details: dict[str, str] | None = None) -> ApiException:
    body = {"kind": "Status", "status": "Failure", "message": message, "code": status}
    if details is not None:
        body["details"] = details
    return ApiException(status=status, reason="Failure", body=json.dumps(body))


@pytest.fixture
def kube(tmp_path: Path) -> Kube:
    return Kube(kubeconfig(tmp_path, f"https://127.0.0.1:{closed_port()}"))


def test_candidates_may_be_bare_versions_or_api_versions_of_the_group() -> None:
    assert _api_version("kafka.strimzi.io", "v1") == "kafka.strimzi.io/v1"
    assert (
        _api_version("kafka.strimzi.io", "kafka.strimzi.io/v1beta2") == "kafka.strimzi.io/v1beta2"
    )
    assert _api_version("", "v1") == "v1"  # the core group


def test_a_candidate_of_another_group_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match=r"not in API group 'kafka\.strimzi\.io'"):
        _api_version("kafka.strimzi.io", "sparkoperator.k8s.io/v1beta2")


def test_a_kubeconfig_is_read_without_calling_the_server(tmp_path: Path) -> None:
    with Kube(kubeconfig(tmp_path, "https://127.0.0.1:6443")) as kube:
        assert kube.server == "https://127.0.0.1:6443"


def test_a_missing_kubeconfig_says_which_file(tmp_path: Path) -> None:
    with pytest.raises(KubeError, match=r"cannot load the kubeconfig .*nowhere"):
        Kube(tmp_path / "nowhere")


def test_outside_a_cluster_no_kubeconfig_says_to_pass_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(KubeError, match=r"in-cluster config.*pass --kubeconfig"):
        Kube()


def test_a_server_that_does_not_answer_is_unreachable_not_a_crash(kube: Kube) -> None:
    with pytest.raises(KubeError, match="cannot be reached") as caught:
        kube.get("v1", "ConfigMap", "default", "anything")
    assert caught.value.status is None
    assert kube.server in str(caught.value)


def test_forbidden_names_the_object_and_asks_for_rbac(kube: Kube) -> None:
    error = kube._failure(
        status_error(403, 'kafkatopics.kafka.strimzi.io "clicks" is forbidden'),
        "applying",
        "KafkaTopic kafka/clicks",
        "kafka.strimzi.io/v1",
    )
    assert error.status == 403
    assert "applying KafkaTopic kafka/clicks is forbidden" in str(error)
    assert "service account" in str(error)


def test_a_missing_namespace_says_to_create_it(kube: Kube) -> None:
    error = kube._failure(
        status_error(404, 'namespaces "kafka" not found', {"name": "kafka", "kind": "namespaces"}),
        "applying",
        "KafkaTopic kafka/clicks",
        "kafka.strimzi.io/v1",
    )
    assert 'namespaces "kafka" not found' in str(error)
    assert "create the namespace first" in str(error)


def test_a_version_no_longer_served_says_so(kube: Kube) -> None:
    error = kube._failure(
        status_error(404, "the server could not find the requested resource"),
        "applying",
        "KafkaTopic kafka/clicks",
        "kafka.strimzi.io/v1beta2",
    )
    assert "no longer serves kafka.strimzi.io/v1beta2" in str(error)


def test_an_invalid_object_quotes_the_server(kube: Kube) -> None:
    message = 'KafkaTopic.kafka.strimzi.io "clicks" is invalid: spec.partitions: Invalid value: 0'
    error = kube._failure(
        status_error(422, message), "applying", "KafkaTopic kafka/clicks", "kafka.strimzi.io/v1"
    )
    assert "the API server rejects KafkaTopic kafka/clicks" in str(error)
    assert "spec.partitions: Invalid value: 0" in str(error)
