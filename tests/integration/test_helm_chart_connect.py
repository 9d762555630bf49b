"""The chart's Kafka Connect (`connect.worker`), checked by the real helm.

Its workers are those `distributary run` starts (`local.connect.ConnectWorker`), in pods: the
same worker settings where a pod changes nothing, the chart's Kafka settings (SASL and TLS) for
the worker's own clients and those it makes for connectors, passwords from Secrets and never in
the ConfigMap, a Service the operator is pointed at, and an account that may read Secrets (the
Sources' passwords) and nothing else. (`pods/test_shop_in_pods.py` runs it on a node.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_helm_chart import (
    CONNECT_ACCOUNT,
    FULLNAME,
    NAMESPACE,
    Manifest,
    one,
    refusal,
    render,
    rules_of,
)

from distributary.local.connect import ConnectWorker

WORKER: Manifest = {
    "topicBackend": "direct",
    "kafka": {
        "bootstrapServers": "kafka.kafka.svc:9093",
        "securityProtocol": "SASL_SSL",
        "sasl": {
            "mechanism": "SCRAM-SHA-512",
            "passwordSecret": {"name": "kafka-user"},
            "usernameSecret": {"name": "kafka-user", "key": "user"},
        },
        "tls": {"caSecret": {"name": "cluster-ca"}, "clientSecret": {"name": "kafka-user"}},
    },
    "connect": {"worker": {"create": True, "settings": {"offset.flush.interval.ms": "5000"}}},
}
# Where a pod differs from one machine's worker: its Kafka, its group and topics, its address,
# its providers (Secrets through the Kubernetes API, files mounted from Secrets), its clients'
# security (from the chart's Kafka settings, compared below).
DIFFERENT = {"bootstrap.servers", "group.id", "config.storage.topic", "offset.storage.topic",
             "status.storage.topic", "config.storage.replication.factor",
             "offset.storage.replication.factor", "status.storage.replication.factor",
             "listeners", "rest.advertised.port", "rest.advertised.host.name",
             "config.providers", "config.providers.env.param.allowlist.pattern",
             "session.timeout.ms", "heartbeat.interval.ms"}  # fmt: skip


def properties(text: str) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            assert key not in parsed, f"{key} set twice"
            parsed[key] = value
    return parsed


def worker_properties(objects: list[Manifest]) -> dict[str, str]:
    return properties(one(objects, "ConfigMap", CONNECT_ACCOUNT)["data"]["worker.properties"])


def test_the_workers_settings_are_those_of_the_machines_worker(helm: str, tmp_path: Path) -> None:
    chart = worker_properties(render(helm, tmp_path, {"connect": {"worker": {"create": True}}}))
    machine = ConnectWorker(tmp_path / "w", "b:9092", group_id="g", topic_prefix="t")
    machine.folder.mkdir()
    machine.port = 8083
    local = properties(machine._write_config().read_text())
    same = set(local) - DIFFERENT - {k for k in local if k.startswith("config.providers.")}
    assert {k: chart.get(k) for k in same} == {k: local[k] for k in same}
    assert chart["exactly.once.source.support"] == "enabled"
    assert chart["scheduled.rebalance.max.delay.ms"] == "0"
    assert chart["group.id"] == CONNECT_ACCOUNT
    assert chart["offset.storage.topic"] == f"{CONNECT_ACCOUNT}.offsets"
    assert chart["config.storage.replication.factor"] == "-1"
    assert chart["security.protocol"] == "PLAINTEXT"
    assert chart["config.providers"] == "secrets,env"  # no folder to read without a certificate


def test_the_workers_reach_a_secured_kafka_with_passwords_from_secrets(
    helm: str, tmp_path: Path
) -> None:
    objects = render(helm, tmp_path, WORKER)
    settings = worker_properties(objects)
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="${env:DISTRIBUTARY_CONNECT_KAFKA_USERNAME}" '
            'password="${env:DISTRIBUTARY_CONNECT_KAFKA_PASSWORD}";')  # fmt: skip
    client = "/etc/distributary-connect/kafka/client"
    for prefix in ("", "producer.", "consumer.", "admin."):
        assert settings[f"{prefix}security.protocol"] == "SASL_SSL"
        assert settings[f"{prefix}sasl.mechanism"] == "SCRAM-SHA-512"
        assert settings[f"{prefix}sasl.jaas.config"] == jaas
        assert settings[f"{prefix}ssl.truststore.location"] == (
            "/etc/distributary-connect/kafka/ca/ca.crt"
        )
        assert settings[f"{prefix}ssl.keystore.key"] == f"${{dir:{client}:user.key}}"
        assert settings[f"{prefix}ssl.keystore.certificate.chain"] == f"${{dir:{client}:user.crt}}"
    assert settings["config.providers"] == "secrets,dir,env"
    assert settings["config.providers.dir.param.allowed.paths"] == client
    assert settings["offset.flush.interval.ms"] == "5000"  # the user's, over the chart's
    assert settings["bootstrap.servers"] == "kafka.kafka.svc:9093"
    pod = one(objects, "Deployment", CONNECT_ACCOUNT)["spec"]["template"]["spec"]
    (worker,) = pod["containers"]
    assert worker["image"] == f"distributary-connect:{chart_version(objects)}"
    from_secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in worker["env"]
                    if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]}  # fmt: skip
    assert from_secrets == {
        "DISTRIBUTARY_CONNECT_KAFKA_PASSWORD": {"name": "kafka-user", "key": "password"},
        "DISTRIBUTARY_CONNECT_KAFKA_USERNAME": {"name": "kafka-user", "key": "user"},
    }
    mounts = {m["mountPath"]: m["name"] for m in worker["volumeMounts"]}
    volumes = {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]}
    assert volumes[mounts["/etc/distributary-connect/kafka/ca"]] == "cluster-ca"
    assert volumes[mounts[client]] == "kafka-user"
    assert pod["serviceAccountName"] == CONNECT_ACCOUNT
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert worker["securityContext"]["readOnlyRootFilesystem"] is True


def chart_version(objects: list[Manifest]) -> str:
    return str(
        one(objects, "Deployment", FULLNAME)["metadata"]["labels"]["app.kubernetes.io/version"]
    )


def test_the_operator_uses_the_workers_service_whose_pods_are_not_its_own(
    helm: str, tmp_path: Path
) -> None:
    objects = render(helm, tmp_path, WORKER)
    service = one(objects, "Service", CONNECT_ACCOUNT)
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(8083, "rest")]
    labels = one(objects, "Deployment", CONNECT_ACCOUNT)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    operator = one(objects, "Deployment", FULLNAME)
    # Neither the operator's Deployment nor its metrics Service selects a Connect pod.
    assert not operator["spec"]["selector"]["matchLabels"].items() <= labels.items()
    metrics = one(objects, "Service", f"{FULLNAME}-metrics")
    assert not metrics["spec"]["selector"].items() <= labels.items()


@pytest.mark.parametrize(
    ("values", "scopes"),
    [
        ({}, {("ClusterRole", None): {("", "secrets", "get")}}),
        (
            {
                "watchNamespaces": ["team-a", "team-b"],
                "connect": {"worker": {"secretNames": ["db"]}},
            },
            {("Role", ns): {("", "secrets:db", "get")} for ns in ("team-a", "team-b")},
        ),
    ],
)
def test_the_workers_account_may_read_secrets_and_nothing_else(
    helm: str, tmp_path: Path, values: Manifest, scopes: dict[Any, Any]
) -> None:
    connect = {"worker": {"create": True, **values.get("connect", {}).get("worker", {})}}
    objects = render(helm, tmp_path, {**values, "connect": connect})
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objects if o["kind"] in ("Role", "ClusterRole")}  # fmt: skip
    found: dict[Any, Any] = {}
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if binding["subjects"][0]["name"] != CONNECT_ACCOUNT:
            continue
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": CONNECT_ACCOUNT, "namespace": NAMESPACE}
        ]
        ref, namespace = binding["roleRef"], binding["metadata"].get("namespace")
        found[(ref["kind"], namespace)] = rules_of(roles[(ref["kind"], namespace, ref["name"])])
    assert found == scopes


@pytest.mark.parametrize(
    ("connect", "says"),
    [
        ({"url": "http://connect:8083"}, "leave connect.url and connect.cluster empty"),
        ({"cluster": "cdc"}, "leave connect.url and connect.cluster empty"),
        ({"secrets": "/opt/secrets"}, 'leave connect.secrets at "kubernetes"'),
    ],
)
def test_a_worker_beside_another_connect_is_refused_saying_why(
    helm: str, tmp_path: Path, connect: Manifest, says: str
) -> None:
    error = refusal(helm, tmp_path, {"connect": {**connect, "worker": {"create": True}}})
    assert "connect.worker" in error, error
    assert says in error, error
