"""The strimzi topic backend on a real API server with a Strimzi-shaped KafkaTopic CRD.

Strimzi's topic operator is not run here (it is published as a container image only, not as
Maven jars), so the tests write the KafkaTopic's status through the status subresource as it
would: `Ready` True or False with its reason and message, `observedGeneration`, `topicName`.
Everything else is real: the CRDs (from tests/data/strimzi), discovery, server-side apply, the
garbage collector.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.kube.operator_harness import wait_for

from distributary.api.log import Log
from distributary.backends.strimzi import StrimziTopics
from distributary.devtools.controlplane import ControlPlane
from distributary.kube.resources import Kube
from distributary.plan.kafka_topics.topics import desired_topic
from distributary.plan.logs.log_status import LogReconcile, log_status

ROOT = Path(__file__).resolve().parents[3]
STRIMZI_CRDS = ROOT / "tests" / "data" / "strimzi" / "kafkatopic-crd.yaml"
LOG_CRD = ROOT / "crds" / "distributary.dev_logs.yaml"
CRD = "kafkatopics.kafka.strimzi.io"
V1, V1BETA2 = "kafka.strimzi.io/v1", "kafka.strimzi.io/v1beta2"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)

Kubectl = Callable[..., Any]


def serves(kubectl: Kubectl, version: str) -> bool:
    found = kubectl("get", "--raw", f"/apis/kafka.strimzi.io/{version}", check=False)
    return found.returncode == 0 and '"kafkatopics"' in found.stdout


def established(kubectl: Kubectl, crd: str, timeout: float = 60.0) -> None:
    """Wait until `crd` is Established. A CRD just applied may have no conditions yet, which
    `kubectl wait` takes for an error (".status.conditions accessor error") instead of waiting:
    asked again until it has them."""
    deadline = time.monotonic() + timeout
    while True:
        left = max(1, int(deadline - time.monotonic()))
        args = ("wait", "--for=condition=Established", crd, f"--timeout={left}s")
        result = kubectl(*args, check=False)
        if result.returncode == 0:
            return
        if "accessor error" not in result.stderr or time.monotonic() > deadline:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        time.sleep(0.5)


def install_strimzi_crd(kubectl: Kubectl, variant: str) -> None:
    """Install the test CRD `variant` and wait until the server serves exactly its versions."""
    docs = list(yaml.safe_load_all(STRIMZI_CRDS.read_text()))
    crd = next(
        d for d in docs if d["metadata"]["annotations"]["distributary.dev/test-variant"] == variant
    )
    kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=strimzi-tests",
        "-f",
        "-",
        input=json.dumps(crd),
    )
    established(kubectl, f"crd/{CRD}")
    served = {v["name"] for v in crd["spec"]["versions"] if v["served"]}
    wait_for_versions(kubectl, served)


def uninstall_strimzi_crd(kubectl: Kubectl) -> None:
    kubectl("delete", "crd", CRD, "--ignore-not-found", "--timeout=120s")
    wait_for_versions(kubectl, set())


def wait_for_versions(kubectl: Kubectl, served: set[str]) -> None:
    """Wait until discovery shows KafkaTopic at exactly the versions `served`."""

    def shown() -> bool:
        return {v for v in ("v1", "v1beta2") if serves(kubectl, v)} == served

    wait_for(f"KafkaTopic served at exactly {sorted(served)}", shown)


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    """A fresh adapter per test: what it learnt by discovery never leaks into the next test."""
    with Kube(control_plane.kubeconfig) as connection:
        yield connection


@pytest.fixture
def namespace(kube: Kube) -> str:
    name = f"strimzi-{uuid.uuid4().hex[:8]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def make_log(namespace: str, name: str = "clicks", generation: int = 1, **spec: Any) -> Log:
    spec = {"partitions": 6, "replicas": 3, "retention": {"time": "7d"}, **spec}
    metadata = {
        "name": name,
        "namespace": namespace,
        "generation": generation,
        "uid": str(uuid.uuid4()),
    }
    return Log.model_validate({"metadata": metadata, "spec": spec})


def owner_of(log: Log) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "name": log.metadata.name,
        "uid": log.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def apply(topics: StrimziTopics, log: Log) -> LogReconcile:
    return topics.apply(log, desired_topic(log), owner_of(log))


def conditions(result: LogReconcile) -> dict[str, tuple[str, str, str]]:
    status = log_status(result, None, NOW)
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def as_topic_operator(
    kube: Kube, api_version: str, namespace: str, name: str, ready: str, **said: str
) -> None:
    """Write the status Strimzi's topic operator writes after reconciling the current generation."""
    topic = kube.get(api_version, "KafkaTopic", namespace, name)
    assert topic is not None
    condition = {
        "type": "Ready",
        "status": ready,
        "lastTransitionTime": "2026-11-22T11:59:00Z",
        **said,
    }
    status = {
        "conditions": [condition],
        "observedGeneration": topic["metadata"]["generation"],
        "topicName": topic["spec"]["topicName"],
        "topicId": "8sWJ2YQmRLOwqT0hX2HvJg",
    }
    kube.patch_status(api_version, "KafkaTopic", namespace, name, status)


def test_without_strimzi_the_log_waits_and_says_to_install_it(kubectl: Kubectl, kube: Kube) -> None:
    uninstall_strimzi_crd(kubectl)
    result = apply(StrimziTopics(kube, "my-cluster"), make_log("anywhere"))
    assert result.plan is None
    assert result.unreachable is not None
    assert "the KafkaTopic CRD is not installed" in result.unreachable
    assert "install Strimzi, or run the operator with --topic-backend direct" in result.unreachable


def test_a_log_becomes_a_v1_kafka_topic_and_follows_the_topic_operator(
    kubectl: Kubectl, kube: Kube, namespace: str
) -> None:
    install_strimzi_crd(kubectl, "v1-and-v1beta2")
    topics = StrimziTopics(kube, "my-cluster")
    log = make_log(namespace, config={"min.insync.replicas": 2})

    # Applied, and nobody has answered yet: Reconciling.
    result = apply(topics, log)
    found = conditions(result)
    assert found["Reconciling"][0] == "True"
    assert "has no status yet" in found["Reconciling"][2]

    shown = json.loads(kubectl("get", "kafkatopic", "clicks", "-n", namespace, "-o", "json").stdout)
    assert shown["apiVersion"] == V1
    assert shown["metadata"]["labels"]["strimzi.io/cluster"] == "my-cluster"
    assert shown["metadata"]["labels"]["distributary.dev/log-uid"] == log.metadata.uid
    assert shown["metadata"]["annotations"]["distributary.dev/log"] == f"{namespace}/clicks"
    assert "ownerReferences" not in shown["metadata"]  # Retain: a collected KafkaTopic loses data
    assert shown["spec"] == {
        "topicName": "clicks",
        "partitions": 6,
        "replicas": 3,
        "config": {"min.insync.replicas": "2", "retention.ms": "604800000"},
    }

    # The topic operator made the topic: Ready, with the spec's partitions.
    as_topic_operator(kube, V1, namespace, "clicks", "True")
    result = apply(topics, log)
    assert conditions(result) == {
        "Ready": ("True", "TopicReady", "Topic clicks has 6 partition(s).")
    }
    assert result.partitions == 6
    generation = shown["metadata"]["generation"]
    stored = kube.get(V1, "KafkaTopic", namespace, "clicks")
    assert stored is not None
    assert stored["metadata"]["generation"] == generation  # applying the same spec changes nothing

    # The topic operator refuses: Stalled with its reason and message.
    message = "Decreasing partitions not supported"
    as_topic_operator(
        kube, V1, namespace, "clicks", "False", reason="NotSupported", message=message
    )
    found = conditions(apply(topics, log))
    assert found["Stalled"][:2] == ("True", "NotSupported")
    assert message in found["Stalled"][2]
    assert found["Ready"][:2] == ("False", "NotSupported")


def test_a_spec_change_waits_for_the_topic_operator_and_drops_configs_the_spec_drops(
    kubectl: Kubectl, kube: Kube, namespace: str
) -> None:
    install_strimzi_crd(kubectl, "v1-and-v1beta2")
    topics = StrimziTopics(kube, "my-cluster")
    apply(topics, make_log(namespace, config={"min.insync.replicas": 2}))
    as_topic_operator(kube, V1, namespace, "clicks", "True")

    # Someone edits the KafkaTopic by hand; the next apply takes the field back.
    kubectl(
        "patch",
        "kafkatopic",
        "clicks",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"partitions":9}}',
    )
    result = apply(topics, make_log(namespace, generation=2, partitions=8))
    stored = kube.get(V1, "KafkaTopic", namespace, "clicks")
    assert stored is not None
    assert stored["spec"]["partitions"] == 8
    assert stored["spec"]["config"] == {"retention.ms": "604800000"}  # min.insync.replicas unset
    found = conditions(result)
    assert found["Reconciling"][0] == "True"
    assert "reconciled generation 1" in found["Reconciling"][2]

    as_topic_operator(kube, V1, namespace, "clicks", "True")
    result = apply(topics, make_log(namespace, generation=2, partitions=8))
    assert conditions(result)["Ready"][0] == "True"
    assert result.partitions == 8


def test_where_only_v1beta2_is_served_the_kafka_topic_falls_back_to_it(
    kubectl: Kubectl, kube: Kube, namespace: str
) -> None:
    install_strimzi_crd(kubectl, "v1beta2-only")
    topics = StrimziTopics(kube, "my-cluster")
    assert topics.api_version() == V1BETA2
    log = make_log(namespace)
    assert conditions(apply(topics, log))["Reconciling"][0] == "True"
    stored = kube.get(V1BETA2, "KafkaTopic", namespace, "clicks")
    assert stored is not None
    assert stored["apiVersion"] == V1BETA2
    assert stored["spec"]["partitions"] == 6

    as_topic_operator(kube, V1BETA2, namespace, "clicks", "True")
    assert conditions(apply(topics, log))["Ready"][0] == "True"


def test_a_delete_logs_kafka_topic_goes_with_it_and_a_retain_logs_stays(
    kubectl: Kubectl, kube: Kube, namespace: str
) -> None:
    install_strimzi_crd(kubectl, "v1-and-v1beta2")
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(LOG_CRD))  # as the others
    established(kubectl, "crd/logs.distributary.dev")
    topics = StrimziTopics(kube, "my-cluster")
    for name, policy in (("kept", "Retain"), ("dropped", "Delete")):
        manifest = {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"partitions": 1, "deletionPolicy": policy},
        }
        created = kube.apply(manifest, field_manager="strimzi-tests")
        log = Log.model_validate({**manifest, "metadata": created["metadata"]})
        apply(topics, log)
    dropped = kube.get(V1, "KafkaTopic", namespace, "dropped")
    assert dropped is not None
    assert [o["name"] for o in dropped["metadata"]["ownerReferences"]] == ["dropped"]

    kubectl("delete", "dlog", "kept", "dropped", "-n", namespace, "--timeout=60s")
    wait_for(
        "the Delete Log's KafkaTopic collected",
        lambda: kube.get(V1, "KafkaTopic", namespace, "dropped") is None,
    )
    assert kube.get(V1, "KafkaTopic", namespace, "kept") is not None


def test_in_strimzis_namespace_one_topic_never_serves_two_logs(
    kubectl: Kubectl, kube: Kube, namespace: str
) -> None:
    install_strimzi_crd(kubectl, "v1-and-v1beta2")
    topics = StrimziTopics(
        kube, "my-cluster", namespace=namespace
    )  # the topic operator's namespace
    first = make_log("shop", deletionPolicy="Delete")
    second = make_log("ads")
    apply(topics, first)
    stored = kube.get(V1, "KafkaTopic", namespace, "clicks")
    assert stored is not None
    assert "ownerReferences" not in stored["metadata"]  # owners cannot cross namespaces
    assert stored["metadata"]["labels"]["distributary.dev/log-uid"] == first.metadata.uid

    found = conditions(apply(topics, second))
    assert found["Stalled"][:2] == ("True", "TopicTaken")
    assert "already the topic of Log shop/clicks" in found["Stalled"][2]
    stored_after = kube.get(V1, "KafkaTopic", namespace, "clicks")
    assert stored_after is not None
    assert stored_after["metadata"]["annotations"]["distributary.dev/log"] == "shop/clicks"

    # The Delete Log in another namespace has its KafkaTopic removed on request; never another's.
    assert topics.delete(second, desired_topic(second)) is False
    assert topics.delete(first, desired_topic(first)) is True
    assert kube.get(V1, "KafkaTopic", namespace, "clicks") is None
