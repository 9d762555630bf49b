"""Everything `make e2e-kind` applies, put to a real API server: `kubectl apply --dry-run=server`.

The kind run cannot run here (no Docker engine); what it would apply is checked against the local
control plane with the real CRDs, field validation strict, so an unknown or misspelt field, a
wrong type, a broken CEL rule or a missing required field fails here:

- Strimzi's Kafka, KafkaNodePool and KafkaUser (`e2e/kind/manifests`), against Strimzi's own
  CRDs at the pinned version, generated here as Strimzi's build generates them (see
  `tests/integration/e2e_kind.py`; Strimzi's chart itself cannot be fetched here);
- the checkpoint claims and the data Jobs, with the ConfigMaps `lib.sh` makes for them;
- the clickstream example as applied, and its views as the run edits them, against the CRDs in
  `crds/`;
- the shop stage's stores, its KafkaConnect with its KafkaUser and the Role that lets Connect
  read the Source's Secret (against Strimzi's KafkaConnect CRD), its Jobs, and the shop example
  as the run applies it (the stores' hosts set), in the shop's namespace;
- Distributary's chart and the Spark operator's chart (v2.3.0), rendered with the run's
  arguments, every object.

Nothing is created but the run's namespaces (dry runs need them) and the CRDs, removed after.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.integration.e2e_kind import (
    E2E,
    ROOT,
    documents,
    filled,
    lib,
    render,
    setting,
    strimzi_crds,
    versions,
)
from tests.integration.kube.conftest import Kubectl

from distributary.api.source import Source
from distributary.plan.sources.source_plan import (
    connector_config,
    connector_name,
    kafka_connector_manifest,
)

# What the run applies of Strimzi's kinds (KafkaTopics are Distributary's to make, and the tier's
# other modules install their own KafkaTopic CRD), and the KafkaConnectors the operator makes for
# Sources (`--connect-cluster`).
STRIMZI_KINDS = ("Kafka", "KafkaNodePool", "KafkaUser", "KafkaConnect", "KafkaConnector")
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "CustomResourceDefinition",
    "Namespace",
}
NAMESPACES = (
    "KAFKA_NAMESPACE",
    "SPARK_NAMESPACE",
    "DISTRIBUTARY_NAMESPACE",
    "PIPELINE_NAMESPACE",
    "SHOP_NAMESPACE",
)


@pytest.fixture(scope="module")
def strimzi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Strimzi's CRDs at the version the run installs; kind -> file."""
    return strimzi_crds(versions()["STRIMZI_VERSION"], tmp_path_factory.mktemp("strimzi-crds"))


@pytest.fixture(scope="module")
def cluster(kubectl: Kubectl, strimzi: dict[str, Path]) -> Iterator[Kubectl]:
    """The control plane with the run's namespaces, Strimzi's CRDs and Distributary's."""
    files = [str(strimzi[kind]) for kind in STRIMZI_KINDS]
    for path in [*files, str(ROOT / "crds")]:
        kubectl("apply", "--server-side", "-f", path)
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    namespaces = [setting(n) for n in NAMESPACES]
    for namespace in namespaces:
        if kubectl("get", "namespace", namespace, check=False).returncode != 0:
            kubectl("create", "namespace", namespace)
    yield kubectl
    kubectl("delete", "namespace", *namespaces, "--wait=false", check=False)
    for path in files:
        kubectl("delete", "-f", path, "--wait=false", check=False)


def dry_run(kubectl: Kubectl, text: str, namespace: str | None = None) -> str:
    """`kubectl apply --dry-run=server` of the manifests in `text`; its output."""
    where = ["--namespace", namespace] if namespace else []
    result = kubectl(
        "apply", "--dry-run=server", "--validate=strict", *where, "-f", "-", input=text, check=False
    )
    assert result.returncode == 0, f"refused:\n{result.stderr}"
    assert "Warning" not in result.stderr, result.stderr
    return result.stdout


def test_the_kafka_cluster_and_its_user_pass_strimzis_crds(
    cluster: Kubectl, strimzi: dict[str, Path]
) -> None:
    served = yaml.safe_load(strimzi["Kafka"].read_text())["spec"]["versions"]
    out = dry_run(cluster, (E2E / "manifests" / "kafka.yaml").read_text())
    assert "kafka.kafka.strimzi.io/clicks created (server dry run)" in out
    assert "kafkanodepool.kafka.strimzi.io/dual-role created (server dry run)" in out
    out = dry_run(cluster, (E2E / "manifests" / "kafka-user.yaml").read_text())
    assert "kafkauser.kafka.strimzi.io/distributary created (server dry run)" in out
    # The manifests speak a version this Strimzi serves.
    for manifest in documents((E2E / "manifests" / "kafka.yaml").read_text()):
        version = manifest["apiVersion"].rsplit("/", 1)[1]
        assert version in [v["name"] for v in served if v["served"]], manifest["kind"]


def test_a_kafka_listener_strimzi_refuses_is_refused_here(cluster: Kubectl) -> None:
    """The dry run has teeth: a listener type Strimzi has not got fails."""
    text = (E2E / "manifests" / "kafka.yaml").read_text().replace("type: internal", "type: plain")
    result = cluster("apply", "--dry-run=server", "-f", "-", input=text, check=False)
    assert result.returncode != 0
    assert "type" in result.stderr


def test_the_claim_the_configmaps_and_the_data_jobs_pass(cluster: Kubectl) -> None:
    for name in ("checkpoints.yaml", "clicks-produce.yaml", "clicks-check.yaml"):
        assert "created (server dry run)" in dry_run(
            cluster, (E2E / "manifests" / name).read_text()
        )
    dry_run(cluster, lib("clicks_configmap"))
    dry_run(cluster, lib("clicks_settings", "PAGE_VIEWS_TOPIC=page-views", "THRESHOLD=1000"))


def test_the_example_and_its_edit_pass_distributarys_crds(cluster: Kubectl) -> None:
    pipeline = setting("PIPELINE_NAMESPACE")
    example = ROOT / "examples" / "clickstream"
    out = dry_run(cluster, (example / "logs.yaml").read_text(), pipeline)
    assert "log.distributary.dev/page-views created (server dry run)" in out
    out = dry_run(cluster, (example / "views.yaml").read_text(), pipeline)
    assert out.count("created (server dry run)") == 3
    out = dry_run(cluster, lib("edited_views"), pipeline)
    assert out.count("created (server dry run)") == 3


@pytest.mark.parametrize(
    ("args_function", "namespace"),
    [
        ("distributary_chart_args", "DISTRIBUTARY_NAMESPACE"),
        ("spark_operator_chart_args", "SPARK_NAMESPACE"),
    ],
)
def test_every_object_of_the_charts_the_run_installs_passes(
    cluster: Kubectl, helm: str, args_function: str, namespace: str
) -> None:
    rendered = render(helm, args_function)
    assert len(rendered) > 5
    for manifest in rendered:  # as `helm install --namespace` places them
        if manifest["kind"] not in CLUSTER_SCOPED:
            manifest["metadata"].setdefault("namespace", setting(namespace))
    out = dry_run(cluster, yaml.safe_dump_all(rendered))
    assert out.count("(server dry run)") == len(rendered), out


@pytest.mark.parametrize("revision", [1, 2])
@pytest.mark.parametrize("paused", [False, True])
def test_the_operators_kafka_connectors_pass_strimzis_crd(
    cluster: Kubectl, strimzi: dict[str, Path], revision: int, paused: bool
) -> None:
    """A Source's connector as the operator applies it (`StrimziConnectors`): each revision's,
    running or paused, its offsets listed into a ConfigMap (`spec.listOffsets`)."""
    (found,) = [
        d for d in documents((ROOT / "examples" / "shop" / "source.yaml").read_text())
        if d["kind"] == "Source"
    ]  # fmt: skip
    found["metadata"]["namespace"] = setting("PIPELINE_NAMESPACE")
    source = Source.model_validate(found)
    topics = {t.name: f"shop-orders.r{revision}" for t in source.spec.tables}
    config = connector_config(source, topics, "${secrets:shop/shop-db:password}", revision)
    served = yaml.safe_load(strimzi["KafkaConnector"].read_text())["spec"]["versions"]
    assert "v1" in [v["name"] for v in served if v["served"]]
    manifest = kafka_connector_manifest(
        "kafka.strimzi.io/v1",
        connector_name(source, revision),
        setting("KAFKA_NAMESPACE"),
        "shop-connect",
        config,
        paused,
        None,
    )
    assert manifest["spec"]["listOffsets"] == {
        "toConfigMap": {"name": f"{connector_name(source, revision)}-offsets"}
    }
    out = dry_run(cluster, yaml.safe_dump(manifest))
    assert f"kafkaconnector.kafka.strimzi.io/{manifest['metadata']['name']} created" in out


def test_the_shop_stage_passes(cluster: Kubectl) -> None:
    """shop.sh's stores, Connect and Jobs as `manifest` renders them, and the example as the
    run applies it."""
    out = dry_run(cluster, filled("shop-stores.yaml", "POSTGRES_IMAGE", "REDIS_IMAGE"))
    assert out.count("created (server dry run)") == 5
    connect = filled("shop-connect.yaml", "CONNECT_IMAGE", KAFKA_VERSION="4.1.1")
    out = dry_run(cluster, connect)
    assert f"kafkaconnect.kafka.strimzi.io/{setting('CONNECT_CLUSTER')} created" in out
    assert f"kafkauser.kafka.strimzi.io/{setting('CONNECT_CLUSTER')} created" in out
    assert out.count("created (server dry run)") == 4
    for command in ("prepare", "orders", "check"):
        job = filled("shop-job.yaml", COMMAND=command)
        assert f"job.batch/shop-{command} created (server dry run)" in dry_run(cluster, job)
    dry_run(cluster, lib("shop_configmap"))
    dry_run(cluster, lib("shop_settings", "EXISTING=500", "FIRST=501", "COUNT=3000"))
    out = dry_run(cluster, lib("shop_resources"), setting("SHOP_NAMESPACE"))
    assert "source.distributary.dev/shop created (server dry run)" in out
    assert out.count("created (server dry run)") == 4


def test_a_kafka_connect_strimzi_refuses_is_refused_here(cluster: Kubectl) -> None:
    """The dry run has teeth for the KafkaConnect too: Connect's own topics belong in its
    spec, where Strimzi's v1 API wants them."""
    connect = filled("shop-connect.yaml", "CONNECT_IMAGE", KAFKA_VERSION="4.1.1")
    text = connect.replace("  groupId: shop-connect\n", "")
    assert text != connect
    result = cluster("apply", "--dry-run=server", "-f", "-", input=text, check=False)
    assert result.returncode != 0
    assert "groupId" in result.stderr


def test_every_manifest_of_the_run_is_checked_here() -> None:
    """A manifest added to e2e/kind/manifests is one more for the tests above to apply."""
    checked = {"kafka.yaml", "kafka-user.yaml", "checkpoints.yaml"}
    checked |= {"clicks-produce.yaml", "clicks-check.yaml"}
    checked |= {"shop-stores.yaml", "shop-connect.yaml", "shop-job.yaml"}
    assert {p.name for p in (E2E / "manifests").glob("*.yaml")} == checked
    for path in (E2E / "manifests").glob("*.yaml"):
        assert documents(path.read_text()), path.name
