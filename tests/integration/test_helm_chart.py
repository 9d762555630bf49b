"""The Helm chart, checked by the real helm: lint, render, and the schema refusing bad values.

helm comes from `tools/helm.sh`, which builds it once from the Go module proxy into the cache, so a
fresh machine needs only Go. Each variant's values are written to a file and rendered with
`helm template`; the objects are then read back as YAML and held to what the operator needs: one
replica replaced with Recreate, probes on kopf's health endpoint, the CLI flags and Kafka
credentials from Secrets, and RBAC that grants exactly the operator's verbs, never a wildcard.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "distributary"
RELEASE, NAMESPACE = "pipelines", "distributary-system"
FULLNAME = f"{RELEASE}-distributary"
SPARK_ACCOUNT = f"{RELEASE}-distributary-spark"  # named after the release
CONNECT_ACCOUNT = f"{RELEASE}-distributary-connect"  # the chart's Kafka Connect (connect.worker)

Rule = tuple[str, str, str]  # (apiGroup, resource, verb)
Manifest = dict[str, Any]

OWN_KINDS = ("logs", "derivedviews", "streamjobs", "sources", "sinks")
# What the operator does, stated independently of the chart's templates.
RESOURCE_RULES: frozenset[Rule] = frozenset(
    {("distributary.dev", kind, verb) for kind in OWN_KINDS for verb in ("get", "list", "watch")}
    | {("distributary.dev", kind, "patch") for kind in OWN_KINDS}  # kopf: finalizers, annotations
    | {("distributary.dev", "logs", "create")}  # a view's output Log, applied server-side
    | {
        ("distributary.dev", f"{kind}/status", verb)
        for kind in OWN_KINDS
        for verb in ("get", "patch")
    }
    | {("distributary.dev", f"{kind}/finalizers", "update") for kind in OWN_KINDS}  # ownerRefs
    | {("", "events", "create"), ("", "events", "patch")}
)
SPARK_RULES: frozenset[Rule] = frozenset(
    {
        ("sparkoperator.k8s.io", "sparkapplications", verb)
        for verb in ("get", "list", "watch", "create", "patch", "delete")
    }
    | {("", "pods", "get")}  # a rewind waits until the old driver pod is gone
    | {("apps", "deployments", v) for v in ("get", "create", "patch")}  # Sinks' processes
    | {("", "configmaps", v) for v in ("get", "create", "patch")}  # their specs
    | {("", "configmaps", "delete")}  # a suspended revision's manifest, once it resumes
)
# A Source's or Sink's password, by name: only where Sources (a Connect) or Sinks (local) run.
SECRET_RULES: frozenset[Rule] = frozenset({("", "secrets", "get")})
KAFKACONNECTOR_RULES: frozenset[Rule] = frozenset(
    ("kafka.strimzi.io", "kafkaconnectors", verb)
    for verb in ("get", "list", "watch", "create", "patch", "delete")
) | {("", "configmaps", "get")}  # the ConfigMaps Strimzi lists the connectors' offsets into
KAFKATOPIC_RULES: frozenset[Rule] = frozenset(
    ("kafka.strimzi.io", "kafkatopics", verb)
    for verb in ("get", "list", "watch", "create", "patch", "delete")
)
CRD_RULES: frozenset[Rule] = frozenset(
    ("apiextensions.k8s.io", "customresourcedefinitions", verb) for verb in ("get", "list", "watch")
)
NAMESPACE_RULES: frozenset[Rule] = frozenset(
    {("", "namespaces", "list"), ("", "namespaces", "watch")}
)
# kube-system alone, by name: its uid names this cluster in topic claims.
KUBE_SYSTEM: Rule = ("", "namespaces:kube-system", "get")


def run_helm(helm: str, args: Iterable[str], values: Manifest, tmp_path: Path) -> Any:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    return subprocess.run(
        [helm, *args, "-f", str(values_file)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def render(helm: str, tmp_path: Path, values: Manifest | None = None) -> list[Manifest]:
    """Every object `helm template` renders for `values`."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    result = run_helm(helm, args, values or {}, tmp_path)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def refusal(helm: str, tmp_path: Path, values: Manifest) -> str:
    """helm's error when it refuses to render `values`."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    result = run_helm(helm, args, values, tmp_path)
    assert result.returncode != 0, f"helm accepted {values}"
    return str(result.stderr)


def one(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container(objects: list[Manifest]) -> Manifest:
    (operator,) = one(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"]
    return dict(operator)


def flags(objects: list[Manifest]) -> dict[str, list[str]]:
    args = container(objects)["args"]
    assert args[0] == "operator"
    parsed: dict[str, list[str]] = {}
    for arg in args[1:]:
        name, _, value = arg.partition("=")
        parsed.setdefault(name, []).append(value)
    return parsed


def plain_env(objects: list[Manifest]) -> dict[str, str]:
    """The container's environment variables that have a value (not from a Secret)."""
    return {item["name"]: item["value"] for item in container(objects)["env"] if "value" in item}


def rules_of(role: Manifest) -> set[Rule]:
    triples: set[Rule] = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                named = [f"{resource}:{name}" for name in rule.get("resourceNames", [])]
                for each in named or [resource]:
                    triples.update((group, each, verb) for verb in rule["verbs"])
    return triples


def granted(objects: list[Manifest]) -> dict[tuple[str, str | None], set[Rule]]:
    """What the operator's service account may do, by scope: ("cluster", None) or
    ("namespace", ns). Follows each binding to its role, so an unbound role grants nothing."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("ClusterRole", "Role")
    }
    scopes: dict[tuple[str, str | None], set[Rule]] = {}
    operator = {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if binding["subjects"] != [operator]:  # the Spark drivers' (test_helm_chart_spark)
            assert binding["subjects"][0]["name"] in (SPARK_ACCOUNT, CONNECT_ACCOUNT), binding
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace")
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else None, ref["name"])]
        scope = (
            ("cluster", None)
            if binding["kind"] == "ClusterRoleBinding"
            else ("namespace", namespace)
        )
        scopes.setdefault(scope, set()).update(rules_of(role))
    return scopes


VARIANTS = [
    pytest.param({}, id="defaults"),
    pytest.param(
        {"topicBackend": "direct", "kafka": {"bootstrapServers": "kafka.kafka.svc:9092"}},
        id="direct+spark-operator",
    ),
    pytest.param(
        {"sparkRuntime": "local", "strimzi": {"cluster": "events", "namespace": "kafka"}},
        id="strimzi+local",
    ),
    pytest.param(
        {
            "topicBackend": "direct",
            "sparkRuntime": "local",
            "kafka": {"bootstrapServers": "b1:9092,b2:9092"},
            "watchNamespaces": ["team-a", "team-b"],
        },
        id="direct+local+namespaces",
    ),
    pytest.param(
        {"watchNamespaces": ["team-a"], "strimzi": {"namespace": "kafka"}},
        id="strimzi+spark-operator+namespace",
    ),
    pytest.param({"checkpoints": {"root": "s3a://bucket/checkpoints"}}, id="object-store"),
    pytest.param(
        {"checkpoints": {"claim": {"create": False, "name": "shared-checkpoints"}}},
        id="existing-claim",
    ),
    pytest.param({"connect": {"url": "http://connect.kafka.svc:8083"}}, id="connect-url"),
    pytest.param(
        {"connect": {"cluster": "cdc"}, "watchNamespaces": ["team-a"]},
        id="strimzi-connect-beside",
    ),
    pytest.param({"connect": {"cluster": "cdc", "namespace": "kafka"}}, id="strimzi-connect"),
    pytest.param({"connect": {"worker": {"create": True}}}, id="connect-worker"),
    pytest.param(
        {
            "connect": {"worker": {"create": True, "secretNames": ["shop-db"]}},
            "watchNamespaces": ["team-a", "team-b"],
        },
        id="connect-worker-namespaces",
    ),
]


def test_lint_passes_strictly_without_warnings(helm: str, tmp_path: Path) -> None:
    result = run_helm(helm, ["lint", "--strict", str(CHART)], {}, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout
    assert "[ERROR]" not in result.stdout


@pytest.mark.parametrize("values", VARIANTS)
def test_lint_passes_for_each_variant(helm: str, tmp_path: Path, values: Manifest) -> None:
    result = run_helm(helm, ["lint", "--strict", str(CHART)], values, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values", VARIANTS)
def test_one_replica_replaced_by_recreate_with_probes(
    helm: str, tmp_path: Path, values: Manifest
) -> None:
    objects = render(helm, tmp_path, values)
    deployment = one(objects, "Deployment", FULLNAME)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == FULLNAME
    assert one(objects, "ServiceAccount", FULLNAME)["metadata"]["namespace"] == NAMESPACE
    operator = container(objects)
    ports = {port["name"]: port["containerPort"] for port in operator["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    for probe in ("livenessProbe", "readinessProbe"):
        assert operator[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert operator["image"] == "distributary-operator:0.1.0"


@pytest.mark.parametrize("values", VARIANTS)
def test_rbac_grants_exactly_what_the_operator_needs(
    helm: str, tmp_path: Path, values: Manifest
) -> None:
    objects = render(helm, tmp_path, values)
    backend = values.get("topicBackend", "strimzi")
    local = values.get("sparkRuntime", "spark-operator") == "local"
    connect = values.get("connect", {})
    runtime_rules = set() if local else set(SPARK_RULES)
    if local or connect.get("url") or connect.get("cluster") or connect.get("worker"):
        runtime_rules |= SECRET_RULES
    if connect.get("cluster") and not connect.get("namespace"):
        runtime_rules |= KAFKACONNECTOR_RULES
    watched = values.get("watchNamespaces", [])
    expected: dict[tuple[str, str | None], set[Rule]] = {}
    if watched:
        expected[("cluster", None)] = set(CRD_RULES | NAMESPACE_RULES | {KUBE_SYSTEM})
        for namespace in watched:
            expected[("namespace", namespace)] = set(RESOURCE_RULES | runtime_rules)
    else:
        expected[("cluster", None)] = set(
            CRD_RULES | RESOURCE_RULES | runtime_rules | {KUBE_SYSTEM}
        )
    if backend == "strimzi":
        strimzi_namespace = values.get("strimzi", {}).get("namespace") or NAMESPACE
        expected.setdefault(("namespace", strimzi_namespace), set()).update(KAFKATOPIC_RULES)
    if connect.get("cluster") and connect.get("namespace"):
        connect_namespace = connect["namespace"]
        expected.setdefault(("namespace", connect_namespace), set()).update(KAFKACONNECTOR_RULES)
    assert granted(objects) == expected


@pytest.mark.parametrize("values", VARIANTS)
def test_rbac_has_no_wildcards(helm: str, tmp_path: Path, values: Manifest) -> None:
    for role in render(helm, tmp_path, values):
        if role["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{role['metadata']['name']}: {rule}"
            assert "nonResourceURLs" not in rule
            if "resourceNames" in rule:  # kube-system's get, or Secrets Connect may read
                narrowed = rules_of({"rules": [rule]})
                assert narrowed == {KUBE_SYSTEM} or narrowed == {("", "secrets:shop-db", "get")}, (
                    rule
                )


def test_defaults_render_the_cli_contract(helm: str, tmp_path: Path) -> None:
    objects = render(helm, tmp_path)
    assert flags(objects) == {
        "--topic-backend": ["strimzi"],
        "--strimzi-cluster": ["my-cluster"],
        "--bootstrap-servers": [f"my-cluster-kafka-bootstrap.{NAMESPACE}.svc:9092"],
        "--spark-runtime": ["spark-operator"],
        "--image": ["distributary-spark:0.1.0"],
        "--checkpoint-root": ["file:///var/lib/distributary/checkpoints"],
        "--observe-interval": ["30"],
        "--metrics-port": ["9090"],
        "--health-port": ["8080"],
    }
    assert plain_env(objects) == {
        "DISTRIBUTARY_STRIMZI_NAMESPACE": NAMESPACE,
        "DISTRIBUTARY_SPARK_SERVICE_ACCOUNT": SPARK_ACCOUNT,
        "DISTRIBUTARY_CHECKPOINT_CLAIM": f"{FULLNAME}-checkpoints",
        "DISTRIBUTARY_CHECKPOINT_MOUNT_PATH": "/var/lib/distributary/checkpoints",
        "DISTRIBUTARY_RESTART_DELAY": "10",
        "DISTRIBUTARY_MAX_RESTART_DELAY": "300",
        "DISTRIBUTARY_STABLE_AFTER": "600",
        "DISTRIBUTARY_FAILURE_WINDOW": "1800",
        "DISTRIBUTARY_FAILURES_BEFORE_STALLED": "5",
        "DISTRIBUTARY_LOG_LEVEL": "info",
        "DISTRIBUTARY_TOPIC_NAMES": "{name}",
        "DISTRIBUTARY_PROGRESS_TOPIC": "distributary.progress",
        "DISTRIBUTARY_CLAIMS_TOPIC": "distributary.claims",
        "DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT",
    }


def test_direct_local_and_namespaces_become_flags(helm: str, tmp_path: Path) -> None:
    values = {
        "topicBackend": "direct",
        "sparkRuntime": "local",
        "kafka": {"bootstrapServers": "b1:9092,b2:9092"},
        "watchNamespaces": ["team-a", "team-b"],
        "spark": {"jobImage": "registry.example/spark:1", "driverServiceAccount": {"name": "x"}},
        "checkpoints": {"root": "s3a://bucket/checkpoints"},
        "intervals": {"observeSeconds": 2.5},
        "restarts": {
            "delaySeconds": 2,
            "maxDelaySeconds": 60,
            "stableAfterSeconds": 120,
            "failureWindowSeconds": 600,
            "failuresBeforeStalled": 3,
        },
        "logLevel": "debug",
    }
    objects = render(helm, tmp_path, values)
    parsed = flags(objects)
    assert "--strimzi-cluster" not in parsed
    assert parsed["--topic-backend"] == ["direct"]
    assert parsed["--bootstrap-servers"] == ["b1:9092,b2:9092"]
    assert parsed["--spark-runtime"] == ["local"]
    assert parsed["--namespace"] == ["team-a", "team-b"]
    assert parsed["--image"] == ["registry.example/spark:1"]
    assert parsed["--checkpoint-root"] == ["s3a://bucket/checkpoints"]
    assert parsed["--observe-interval"] == ["2.5"]
    env = plain_env(objects)
    assert "DISTRIBUTARY_STRIMZI_NAMESPACE" not in env
    assert "DISTRIBUTARY_SPARK_SERVICE_ACCOUNT" not in env  # the local runtime runs no drivers
    assert env["DISTRIBUTARY_LOG_LEVEL"] == "debug"
    restarts = {k: env[k] for k in env if "RESTART" in k or "STABLE" in k or "FAILURE" in k}
    assert restarts == {
        "DISTRIBUTARY_RESTART_DELAY": "2",
        "DISTRIBUTARY_MAX_RESTART_DELAY": "60",
        "DISTRIBUTARY_STABLE_AFTER": "120",
        "DISTRIBUTARY_FAILURE_WINDOW": "600",
        "DISTRIBUTARY_FAILURES_BEFORE_STALLED": "3",
    }


def test_shared_kafka_topic_settings_become_environment(helm: str, tmp_path: Path) -> None:
    topics = {
        "names": "{namespace}.{name}",
        "progressTopic": "distributary.blue.progress",
        "claimsTopic": "distributary.claims",
    }
    env = plain_env(render(helm, tmp_path, {"topics": topics}))
    assert env["DISTRIBUTARY_TOPIC_NAMES"] == "{namespace}.{name}"
    assert env["DISTRIBUTARY_PROGRESS_TOPIC"] == "distributary.blue.progress"
    assert env["DISTRIBUTARY_CLAIMS_TOPIC"] == "distributary.claims"


def test_kafka_credentials_come_from_secret_references(helm: str, tmp_path: Path) -> None:
    values = {
        "kafka": {
            "securityProtocol": "SASL_SSL",
            "sasl": {
                "mechanism": "SCRAM-SHA-512",
                "usernameSecret": {"name": "alice", "key": "user"},
                "passwordSecret": {"name": "alice", "key": "password"},
            },
            "tls": {
                "caSecret": {"name": "my-cluster-cluster-ca-cert", "key": "ca.crt"},
                "clientSecret": {"name": "alice-tls"},
            },
        }
    }
    objects = render(helm, tmp_path, values)
    operator = container(objects)
    env = {item["name"]: item for item in operator["env"]}
    assert env["DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
    assert env["DISTRIBUTARY_KAFKA_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"
    assert env["DISTRIBUTARY_KAFKA_SASL_USERNAME"]["valueFrom"] == {
        "secretKeyRef": {"name": "alice", "key": "user"}
    }
    assert env["DISTRIBUTARY_KAFKA_SASL_PASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "alice", "key": "password"}
    }
    assert not any("value" in item and "PASSWORD" in name for name, item in env.items())
    # Each file location in the environment is a key of a Secret mounted at that folder.
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in operator["volumeMounts"]}
    locations = {
        "DISTRIBUTARY_KAFKA_SSL_CA_LOCATION": ("my-cluster-cluster-ca-cert", "ca.crt"),
        "DISTRIBUTARY_KAFKA_SSL_CERTIFICATE_LOCATION": ("alice-tls", "user.crt"),
        "DISTRIBUTARY_KAFKA_SSL_KEY_LOCATION": ("alice-tls", "user.key"),
    }
    for name, (secret, key) in locations.items():
        folder, _, file = env[name]["value"].rpartition("/")
        volume = volumes[mounts[folder]]["secret"]
        assert volume["secretName"] == secret
        assert {"key": key, "path": file} in volume["items"]


def test_no_credentials_no_secret_volumes(helm: str, tmp_path: Path) -> None:
    objects = render(helm, tmp_path)
    env = container(objects)["env"]
    assert not [item for item in env if "valueFrom" in item or "_SASL_" in item["name"]]
    assert not [item for item in env if "_SSL_" in item["name"]]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert not any("secret" in volume for volume in pod["volumes"])


def test_metrics_service_and_optional_service_monitor(helm: str, tmp_path: Path) -> None:
    objects = render(helm, tmp_path)
    service = one(objects, "Service", f"{FULLNAME}-metrics")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert not [o for o in objects if o["kind"] == "ServiceMonitor"]
    monitored = render(helm, tmp_path, {"metrics": {"serviceMonitor": {"enabled": True}}})
    monitor = one(monitored, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )


def test_template_leaves_the_crds_to_helm_install(helm: str, tmp_path: Path) -> None:
    # Helm installs crds/ itself before the templates; `template` shows them only when asked.
    assert not [o for o in render(helm, tmp_path) if o["kind"] == "CustomResourceDefinition"]
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds"]
    result = run_helm(helm, args, {}, tmp_path)
    assert result.returncode == 0, result.stderr
    crds = [
        d
        for d in yaml.safe_load_all(result.stdout)
        if d and d["kind"] == "CustomResourceDefinition"
    ]
    assert {crd["metadata"]["name"] for crd in crds} == {
        "logs.distributary.dev",
        "derivedviews.distributary.dev",
        "streamjobs.distributary.dev",
        "sources.distributary.dev",
        "sinks.distributary.dev",
    }


def claims(objects: list[Manifest]) -> list[Manifest]:
    return [o for o in objects if o["kind"] == "PersistentVolumeClaim"]


def checkpoint_env(objects: list[Manifest]) -> dict[str, str]:
    return {name: v for name, v in plain_env(objects).items() if "CHECKPOINT" in name}


def test_by_default_checkpoints_go_to_a_claim_the_chart_makes_and_keeps(
    helm: str, tmp_path: Path
) -> None:
    objects = render(helm, tmp_path)
    (claim,) = claims(objects)
    name = f"{FULLNAME}-checkpoints"
    assert claim["metadata"]["name"] == name
    assert claim["metadata"]["namespace"] == NAMESPACE
    assert claim["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["resources"] == {"requests": {"storage": "10Gi"}}
    assert "storageClassName" not in claim["spec"]  # the cluster's default class
    env = checkpoint_env(objects)
    assert env == {
        "DISTRIBUTARY_CHECKPOINT_CLAIM": name,
        "DISTRIBUTARY_CHECKPOINT_MOUNT_PATH": "/var/lib/distributary/checkpoints",
    }
    # The root lies under the mount path, so the operator accepts it.
    root = flags(objects)["--checkpoint-root"][0]
    assert root.removeprefix("file://").startswith(env["DISTRIBUTARY_CHECKPOINT_MOUNT_PATH"])


def test_the_claim_is_made_in_each_watched_namespace_with_its_settings(
    helm: str, tmp_path: Path
) -> None:
    values = {
        "watchNamespaces": ["team-a", "team-b"],
        "checkpoints": {
            "root": "file:///mnt/ck/root",
            "claim": {"mountPath": "/mnt/ck", "size": "200Gi", "storageClassName": "nfs"},
        },
    }
    objects = render(helm, tmp_path, values)
    made = claims(objects)
    assert sorted(c["metadata"]["namespace"] for c in made) == ["team-a", "team-b"]
    for claim in made:
        assert claim["spec"]["storageClassName"] == "nfs"
        assert claim["spec"]["resources"] == {"requests": {"storage": "200Gi"}}
    assert checkpoint_env(objects)["DISTRIBUTARY_CHECKPOINT_MOUNT_PATH"] == "/mnt/ck"
    assert flags(objects)["--checkpoint-root"] == ["file:///mnt/ck/root"]


def test_an_object_store_root_needs_no_claim(helm: str, tmp_path: Path) -> None:
    objects = render(helm, tmp_path, {"checkpoints": {"root": "gs://bucket/checkpoints"}})
    assert claims(objects) == []
    assert checkpoint_env(objects) == {}
    assert flags(objects)["--checkpoint-root"] == ["gs://bucket/checkpoints"]


def test_an_existing_claim_is_mounted_and_not_made(helm: str, tmp_path: Path) -> None:
    values = {"checkpoints": {"claim": {"create": False, "name": "shared-checkpoints"}}}
    objects = render(helm, tmp_path, values)
    assert claims(objects) == []
    assert checkpoint_env(objects)["DISTRIBUTARY_CHECKPOINT_CLAIM"] == "shared-checkpoints"


def test_node_local_checkpoints_only_when_allowed(helm: str, tmp_path: Path) -> None:
    values: Manifest = {"checkpoints": {"claim": {"create": False}}}
    assert checkpoint_env(render(helm, tmp_path, values)) == {}
    values["checkpoints"]["allowNodeLocal"] = True
    objects = render(helm, tmp_path, values)
    assert claims(objects) == []
    assert checkpoint_env(objects) == {"DISTRIBUTARY_ALLOW_NODE_LOCAL_CHECKPOINTS": "true"}


def test_the_local_runtime_makes_and_mounts_no_claim(helm: str, tmp_path: Path) -> None:
    values = {"sparkRuntime": "local", "checkpoints": {"claim": {"storageClassName": "nfs"}}}
    objects = render(helm, tmp_path, values)
    assert claims(objects) == []
    assert checkpoint_env(objects) == {}


SCHEMA_ERROR = "values don't meet the specifications of the schema"


@pytest.mark.parametrize(
    ("values", "field"),
    [
        pytest.param({"topicBackend": "foo"}, "/topicBackend", id="unknown-backend"),
        pytest.param({"sparkRuntime": "yarn"}, "/sparkRuntime", id="unknown-runtime"),
        pytest.param({"topicBackend": "direct"}, "/kafka/bootstrapServers", id="direct-no-brokers"),
        pytest.param(
            {"kafka": {"securityProtocol": "TLS"}}, "/kafka/securityProtocol", id="protocol"
        ),
        pytest.param(
            {"kafka": {"securityProtocol": "SASL_SSL"}},
            "/kafka/sasl/mechanism",
            id="sasl-no-mechanism",
        ),
        pytest.param({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0", id="bad-namespace"),
        pytest.param(
            {"restarts": {"failuresBeforeStalled": 0}},
            "/restarts/failuresBeforeStalled",
            id="restarts",
        ),
        pytest.param(
            {"intervals": {"observeSeconds": 0.5}}, "/intervals/observeSeconds", id="interval"
        ),
        pytest.param({"topicBakend": "direct"}, "topicBakend", id="misspelt-key"),
        pytest.param(
            {"checkpoints": {"claim": {"mountPath": "checkpoints"}}},
            "/checkpoints/claim/mountPath",
            id="relative-mount-path",
        ),
        pytest.param(
            {"checkpoints": {"claim": {"size": "lots"}}}, "/checkpoints/claim/size", id="size"
        ),
        pytest.param(
            {"checkpoints": {"root": "/var/lib/checkpoints"}}, "/checkpoints/root", id="root"
        ),
        pytest.param({"topics": {"names": "{namespace}"}}, "/topics/names", id="topic-names"),
        pytest.param(
            {"topics": {"progressTopic": "progress"}}, "/topics/progressTopic", id="progress"
        ),
        pytest.param({"topics": {"claimsTopic": "claims"}}, "/topics/claimsTopic", id="claims"),
    ],
)
def test_schema_refuses_bad_values(helm: str, tmp_path: Path, values: Manifest, field: str) -> None:
    error = refusal(helm, tmp_path, values)
    assert SCHEMA_ERROR in error
    assert field in error


@pytest.mark.parametrize(
    ("connect", "env"),
    [
        (
            {"url": "http://connect.kafka.svc:8083", "secrets": "/opt/kafka/secrets"},
            {
                "DISTRIBUTARY_CONNECT_URL": "http://connect.kafka.svc:8083",
                "DISTRIBUTARY_CONNECT_SECRETS": "/opt/kafka/secrets",
            },
        ),
        (
            {"cluster": "cdc", "namespace": "kafka"},
            {
                "DISTRIBUTARY_CONNECT_CLUSTER": "cdc",
                "DISTRIBUTARY_CONNECT_NAMESPACE": "kafka",
                "DISTRIBUTARY_CONNECT_SECRETS": "kubernetes",
            },
        ),
        (
            {"worker": {"create": True}},
            {
                "DISTRIBUTARY_CONNECT_URL": f"http://{CONNECT_ACCOUNT}.{NAMESPACE}.svc:8083",
                "DISTRIBUTARY_CONNECT_SECRETS": "kubernetes",
            },
        ),
    ],
)
def test_a_connect_becomes_the_operators_environment(
    helm: str, tmp_path: Path, connect: Manifest, env: dict[str, str]
) -> None:
    found = plain_env(render(helm, tmp_path, {"connect": connect}))
    assert {k: v for k, v in found.items() if k.startswith("DISTRIBUTARY_CONNECT_")} == env
    assert {"DISTRIBUTARY_CONNECT_URL", "DISTRIBUTARY_CONNECT_CLUSTER"} & set(env)
    # Every variable the chart sets is one the operator reads.
    from distributary.cli.operator import operator as command

    known = {p.envvar for p in command.params if getattr(p, "envvar", None)}
    assert set(env) <= known
