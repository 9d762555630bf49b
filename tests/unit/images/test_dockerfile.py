"""The job image's Dockerfile agrees with the project: versions, connector, user and layout.

No container engine is needed: the Dockerfile is read as text and what it pins compared with
pyproject.toml, the lock, artifacts.py and the planners. (`tests/integration/test_images.py`
builds it and runs it.)
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from distributary import artifacts as jars
from distributary import jvm_operators
from distributary.plan.applications import spark
from distributary.plan.pipelines import pipeline

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "spark_images" / "Dockerfile"
CONNECTOR = ROOT / "spark_images" / "connector.sha256"
LOCK = ROOT / "spark_images" / "requirements.lock"
SITE = "/opt/distributary/venv/lib/python3.11/site-packages"


def text() -> str:
    return DOCKERFILE.read_text()


def build_args() -> dict[str, str]:
    """The ARG defaults declared before the first FROM."""
    head = text().split("\nFROM ", 1)[0]
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", head, re.MULTILINE))


def stages() -> list[str]:
    """Each stage's text, in order, starting at its FROM line."""
    return ["FROM " + part for part in text().split("\nFROM ")[1:]]


def pyspark_pin() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (pin,) = [d for d in project["optional-dependencies"]["spark"] if d.startswith("pyspark==")]
    return str(pin).removeprefix("pyspark==")


def pinned_jars() -> dict[str, str]:
    """file name -> sha256 of the connector's jars, from their Maven Central paths."""
    pinned = {}
    for line in CONNECTOR.read_text().splitlines():
        digest, path = line.split()
        pinned[path.rsplit("/", 1)[-1]] = digest
    return pinned


def test_spark_version_is_the_pinned_pyspark_and_the_connectors() -> None:
    version = build_args()["SPARK_VERSION"]
    assert version == pyspark_pin()
    assert version == jars.SPARK_VERSION
    assert version == spark.SPARK_VERSION  # what SparkApplications declare
    assert build_args()["SCALA_BINARY"] == jars.SCALA_BINARY


def test_base_is_debian_and_spark_comes_from_the_hash_lock() -> None:
    """Java and Python are Debian's packages; Spark is pyspark, pinned with its hashes in the
    image's lock at the project's version (no Spark distribution, no registry image of it)."""
    assert build_args()["BASE"] == "debian:bookworm-slim"
    assert [s.splitlines()[0] for s in stages()] == [
        "FROM ${BASE} AS connector",
        "FROM ${BASE} AS operators",
        "FROM ${BASE}",
    ]
    assert "openjdk-17-jre-headless python3 python3-venv tini" in text()
    lock = LOCK.read_text()
    assert f"\npyspark=={pyspark_pin()} \\\n    --hash=sha256:" in lock
    assert "\npy4j==" in lock
    final = stages()[-1]
    assert "COPY spark_images/requirements.lock /tmp/requirements.lock" in final
    venv = "/opt/distributary/venv/bin"
    assert f"{venv}/pip install --quiet --require-hashes -r /tmp/requirements.lock" in final
    assert f"{venv}/pip install --quiet --no-deps /tmp/distributary" in final
    # The code in a step after the dependencies': a change of it alone rebuilds only that.
    assert (
        final.index("--require-hashes") < final.index("COPY operator/") < final.index("--no-deps")
    )
    assert "ARG SOURCE_DATE_EPOCH=0" in final  # hash-checked byte code, not kept in the image


def test_spark_home_is_pysparks_folder_and_holds_the_connector() -> None:
    final = stages()[-1]
    assert f"SPARK_HOME={SITE}/pyspark" in final
    assert f"COPY --from=connector /build/jars/ {SITE}/pyspark/jars/" in final
    assert f'test "$spark_home" = {SITE}/pyspark' in final


def test_pinned_jars_are_the_connector_of_this_spark_version() -> None:
    pinned = pinned_jars()
    suffix = f"_{jars.SCALA_BINARY}-{jars.SPARK_VERSION}.jar"
    assert f"spark-sql-kafka-0-10{suffix}" in pinned
    assert f"spark-token-provider-kafka-0-10{suffix}" in pinned
    assert any(name.startswith("kafka-clients-") for name in pinned)
    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in pinned.values())
    for line in CONNECTOR.read_text().splitlines():
        path = line.split()[1]
        _group, artifact, version, name = path.rsplit("/", 3)
        assert name == f"{artifact}-{version}.jar", path  # a Maven repository's layout
    stage = stages()[0]
    assert "sh /build/fetch_jars.sh /build/connector.sha256 /build/jars" in stage
    fetch = (ROOT / "spark_images" / "fetch_jars.sh").read_text()
    assert "sha256sum --quiet -c" in fetch
    assert "curl --fail" in fetch


def test_pinned_jars_are_what_the_local_runtime_resolves_less_what_spark_ships() -> None:
    """The image's connector is the local runtime's (artifacts.py, resolved by Maven with the
    same exclusions), less the jars pyspark already carries: two versions of a class clash."""
    folder = jars.cache_root() / "jars" / jars.SPARK_KAFKA_CONNECTOR.key
    if not (folder / ".complete").exists():
        pytest.skip(f"the connector jars are not cached in {folder} (run the integration tests)")
    pyspark = pytest.importorskip("pyspark")
    shipped = {p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    resolved = {p.name: p for p in folder.glob("*.jar") if p.name not in shipped}
    assert set(pinned_jars()) == set(resolved)
    for name, digest in pinned_jars().items():
        assert hashlib.sha256(resolved[name].read_bytes()).hexdigest() == digest, name


def test_the_operators_are_compiled_against_the_spark_api_jars_spark_ships() -> None:
    """The JVM operators' stage compiles them against Spark's own jars of this version, pinned
    by digest (the same bytes as pyspark's copies), and the jar lands among Spark's jars, where
    the runner finds it before building one (`jvm_operators.operators_jar`)."""
    pinned = {}
    for line in (ROOT / "spark_images" / "operators.sha256").read_text().splitlines():
        digest, path = line.split()
        pinned[path.rsplit("/", 1)[-1]] = digest
    suffix = f"_{jars.SCALA_BINARY}-{jars.SPARK_VERSION}.jar"
    assert {
        f"spark-sql-api{suffix}",
        f"spark-sql{suffix}",
        f"spark-common-utils-java{suffix}",
    } < set(pinned)
    assert any(name.startswith("hadoop-client-api-") for name in pinned)
    pyspark = pytest.importorskip("pyspark")
    shipped = Path(pyspark.__file__).parent / "jars"
    for name, digest in pinned.items():
        assert hashlib.sha256((shipped / name).read_bytes()).hexdigest() == digest, name
    stage = stages()[1]
    assert "sh /build/fetch_jars.sh /build/operators.sha256 /build/classpath" in stage
    assert "openjdk-17-jdk-headless" in stage
    assert 'python3 -m distributary.jvm_operators /build/jar "/build/classpath/*"' in stage
    assert f"COPY --from=operators /build/jar/ {SITE}/pyspark/jars/" in stages()[-1]
    assert f'"{jvm_operators.JAR}"' in (ROOT / "spark_images" / "check.py").read_text()


def test_runs_as_spark_non_root_user() -> None:
    users = re.findall(r"^USER (\S+)$", stages()[-1], re.MULTILINE)
    assert users, "the image must say which user it runs as"
    assert users[-1] == "185"  # Spark's uid, numeric so runAsNonRoot can check it
    assert "useradd --system --uid 185 --gid 185" in stages()[-1]


def test_entry_point_runs_drivers_and_executors_as_spark_on_kubernetes_asks() -> None:
    assert re.search(r'^ENTRYPOINT \["/opt/distributary/entrypoint.sh"\]$', text(), re.M)
    script = (ROOT / "spark_images" / "entrypoint.sh").read_text()
    assert "--deploy-mode client" in script
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in script
    for variable in (
        "SPARK_DRIVER_BIND_ADDRESS",
        "SPARK_DRIVER_URL",
        "SPARK_EXECUTOR_ID",
        "SPARK_EXECUTOR_CORES",
        "SPARK_EXECUTOR_MEMORY",
        "SPARK_APPLICATION_ID",
        "SPARK_EXECUTOR_POD_IP",
        "SPARK_RESOURCE_PROFILE_ID",
        "SPARK_EXECUTOR_POD_NAME",
    ):
        assert "${" + variable + "}" in script, variable
    assert 'exec /usr/bin/tini -s -- "$@"' in script


def test_main_application_file_the_planner_emits_is_in_the_image() -> None:
    path = spark.RUNNER_FILE.removeprefix("local://")
    final = stages()[-1]
    (source,) = [
        line.split()[-2]
        for line in final.splitlines()
        if line.startswith("COPY") and line.endswith(f" {path}")
    ]
    tree = ast.parse((ROOT / source).read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    arguments = {
        (c.func.attr if isinstance(c.func, ast.Attribute) else "", a.value)
        for c in calls
        for a in c.args
        if isinstance(a, ast.Constant)
    }
    assert ("run_module", "distributary.runner") in arguments
    assert (ROOT / "operator" / "distributary" / "runner" / "__main__.py").exists()


def test_default_checkpoint_root_is_writable_by_the_spark_user() -> None:
    root = pipeline.DEFAULT_CHECKPOINT_ROOT.removeprefix("file://")
    final = stages()[-1]
    assert f"mkdir -p {root}" in final
    assert re.search(rf"chown -R 185:185 {re.escape(str(Path(root).parent))}\b", final)


def test_the_entry_point_is_strict_bash_and_passes_shellcheck() -> None:
    script = ROOT / "spark_images" / "entrypoint.sh"
    assert script.read_text().startswith("#!/bin/bash\n")
    assert "\nset -euo pipefail\n" in script.read_text()
    assert os.access(script, os.X_OK), "the Dockerfile copies it with its mode, 0755"
    shellcheck = Path(sys.executable).with_name("shellcheck")
    result = subprocess.run(
        [str(shellcheck), str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_a_drivers_stop_goes_to_the_runner_not_to_spark_submit() -> None:
    """The kubelet's SIGTERM reaches the runner (spark-submit's Python child), which finishes its
    batch; spark-submit, sent it, would exit at once under the runner."""
    script = (ROOT / "spark_images" / "entrypoint.sh").read_text()
    drive = script.split("\n  drive)\n", 1)[1].split("\n    ;;\n", 1)[0]
    assert '"$@" &' in drive
    assert "trap stop TERM INT" in drive
    assert 'pgrep -P "$submit"' in drive
