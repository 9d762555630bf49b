"""A Sink's process in a cluster: the ConfigMap and Deployment that run it, and what its
Deployment's status says."""

from __future__ import annotations

import json
from typing import Any

from distributary.backends.sink_workloads import deployment_state
from distributary.plan.access.kafka_connection import KafkaSecurity, SecretReference
from distributary.plan.access.kafka_secrets import KafkaSecretMounts
from distributary.plan.sinks.sink_plan import SinkRun, sink_manifests, sink_workload_name

OWNER = {"apiVersion": "distributary.dev/v1alpha1", "kind": "Sink", "name": "revenue-table",
         "uid": "u-1", "controller": True}  # fmt: skip


def _run(**update: Any) -> SinkRun:
    run = SinkRun(name="shop/revenue-table", group="distributary.shop.revenue-table.sink",
                  bootstrap_servers="kafka:9093", topic="customer-revenue.r1",
                  columns=[("customer", "STRING"), ("revenue", "DECIMAL(12,2)")],
                  key=["customer"], table="public.customer_revenue", host="db", port=5432,
                  database="shop", user="serving")  # fmt: skip
    return run.model_copy(update=update)


def _manifests(**options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    config, deployment = sink_manifests(
        _run(**options.pop("run", {})), namespace="shop", name="revenue-table",
        image="registry.example/spark:1", owner=OWNER, **options,
    )  # fmt: skip
    return config, deployment


def test_the_process_runs_from_its_configmap_with_the_password_mounted() -> None:
    config, deployment = _manifests(password=("serving-db", "password"))
    assert config["kind"] == "ConfigMap"
    assert deployment["kind"] == "Deployment"
    for made in (config, deployment):
        assert made["metadata"]["name"] == "distributary-sink-revenue-table"
        assert made["metadata"]["namespace"] == "shop"
        assert made["metadata"]["ownerReferences"] == [OWNER]
    spec = json.loads(config["data"]["spec.json"])
    assert spec["topic"] == "customer-revenue.r1"
    assert spec["password_file"] == "/etc/distributary/store/password"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/spark:1"
    assert container["command"][1:] == ["-m", "distributary.sinks", "--spec",
                                        "/etc/distributary/sink/spec.json"]  # fmt: skip
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["spec"]["configMap"]["name"] == "distributary-sink-revenue-table"
    assert volumes["store"]["secret"] == {
        "secretName": "serving-db",
        "items": [{"key": "password", "path": "password"}],
    }
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_a_changed_spec_rolls_the_pod_and_a_store_without_password_mounts_none() -> None:
    _, first = _manifests(password=None)
    _, second = _manifests(password=None, run={"topic": "customer-revenue.r2"})
    hashes = [d["spec"]["template"]["metadata"]["annotations"] for d in (first, second)]
    assert hashes[0] != hashes[1]
    assert {v["name"] for v in first["spec"]["template"]["spec"]["volumes"]} == {"spec"}


def test_kafka_credentials_come_from_the_operators_secrets_never_their_values() -> None:
    security = KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                             sasl_username="sink", ssl_ca_location="/etc/kafka/ca.crt",
                             sasl_password=SecretReference(file="/etc/kafka/password"))  # fmt: skip
    mounts = KafkaSecretMounts(password_secret="kafka-user", ca_secret="kafka-ca")
    config, deployment = _manifests(password=None, kafka=mounts, run={"kafka_security": security})
    spec = json.loads(config["data"]["spec.json"])
    assert spec["kafka_security"]["ssl_ca_location"] == "/etc/distributary/kafka/ca/ca.crt"
    assert spec["kafka_security"]["sasl_password"]["env"] == "DISTRIBUTARY_KAFKA_SASL_PASSWORD"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["env"] == [{"name": "DISTRIBUTARY_KAFKA_SASL_PASSWORD", "valueFrom": {
        "secretKeyRef": {"name": "kafka-user", "key": "password"}}}]  # fmt: skip
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["kafka-ca"]["secret"] == {"secretName": "kafka-ca"}


def test_a_long_name_is_shortened_to_a_label_with_a_digest() -> None:
    name = "a" * 70
    made = sink_workload_name(name)
    assert len(made) == 63
    assert made != sink_workload_name("a" * 71)


def test_the_deployment_status_says_running_or_what_it_waits_for() -> None:
    assert deployment_state(None).waiting == "its Deployment is being made"
    rolling = {"metadata": {"generation": 2}, "status": {"observedGeneration": 1}}
    assert deployment_state(rolling).waiting == "its Deployment is being rolled out"
    available = {"metadata": {"generation": 1},
                 "status": {"observedGeneration": 1, "availableReplicas": 1}}  # fmt: skip
    assert deployment_state(available).running
    failing = {
        "metadata": {"generation": 1},
        "status": {
            "observedGeneration": 1,
            "conditions": [{"type": "ReplicaFailure", "status": "True",
                            "message": "pods is forbidden: exceeded quota"},
                           {"type": "Available", "status": "False",
                            "message": "Deployment does not have minimum availability."}],
        },
    }  # fmt: skip
    assert deployment_state(failing).waiting == "Deployment does not have minimum availability."
    pending = {"metadata": {"generation": 1}, "status": {"observedGeneration": 1}}
    assert deployment_state(pending).waiting == "its pod is not available yet"
