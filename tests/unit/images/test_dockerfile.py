"""The job image's Dockerfile agrees with the project: versions, connector, user and layout.

No Docker engine is needed: the Dockerfile is read as text, its build arguments substituted, and
what it pins compared with pyproject.toml, artifacts.py and the planners.
"""

from __future__ import annotations

import ast
import hashlib
import re
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from distributary import artifacts as jars
from distributary.plan.applications import spark
from distributary.plan.pipelines import pipeline

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "spark_images" / "Dockerfile"
POM_NS = "{http://maven.apache.org/POM/4.0.0}"


def text() -> str:
    return DOCKERFILE.read_text()


def build_args() -> dict[str, str]:
    """The ARG defaults declared before the first FROM."""
    head = text().split("\nFROM ", 1)[0]
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", head, re.MULTILINE))


def substituted(value: str) -> str:
    args = build_args()
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], value)


def stages() -> list[str]:
    """Each stage's text, in order, starting at its FROM line."""
    return ["FROM " + part for part in text().split("\nFROM ")[1:]]


def heredoc(opening: str, stage: str | None = None) -> str:
    """The body of the heredoc opened on the line that contains `opening`."""
    source = stage if stage is not None else text()
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if opening in line)
    delimiter = re.search(r"<<'?(\w+)'?", lines[start])
    assert delimiter is not None, f"no heredoc on the line with {opening!r}"
    end = lines.index(delimiter.group(1), start + 1)
    return "\n".join(lines[start + 1 : end]) + "\n"


def dependencies() -> list[str]:
    """The `spark` extra: what the runner needs beyond the base install."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [str(d) for d in project["optional-dependencies"]["spark"]]


def pyspark_pin() -> str:
    (pin,) = [d for d in dependencies() if d.startswith("pyspark==")]
    return pin.removeprefix("pyspark==")


def pinned_jars() -> dict[str, str]:
    body = heredoc("/build/jars.sha256", stages()[1])
    return {name: digest for digest, name in (line.split() for line in body.splitlines())}


def test_spark_version_is_the_pinned_pyspark_and_the_connectors() -> None:
    version = build_args()["SPARK_VERSION"]
    assert version == pyspark_pin()
    assert version == jars.SPARK_VERSION
    assert version == spark.SPARK_VERSION  # what SparkApplications declare


def test_scala_binary_is_the_connectors() -> None:
    assert build_args()["SCALA_BINARY"] == jars.SCALA_BINARY


def test_base_is_the_official_spark_python_image_of_that_version() -> None:
    first = stages()[0].splitlines()[0]
    image = substituted(first.split()[1])
    assert image == (
        f"apache/spark:{jars.SPARK_VERSION}-scala{jars.SCALA_BINARY}-java17-python3-ubuntu"
    )
    assert stages()[-1].splitlines()[0] == f"FROM {first.split()[-1]}"  # the image built on it


def test_connector_resolves_the_coordinates_of_the_local_bundle() -> None:
    script = heredoc("RUN <<'EOF'", stages()[1])
    pom = substituted(script.split("<<POM\n", 1)[1].split("\nPOM\n", 1)[0])
    root = ET.fromstring(pom)
    found, excluded = [], []
    for dependency in root.iter(f"{POM_NS}dependency"):
        parts = (dependency.find(f"{POM_NS}{tag}") for tag in ("groupId", "artifactId", "version"))
        found.append(":".join(p.text or "" for p in parts if p is not None))
        for exclusion in dependency.iter(f"{POM_NS}exclusion"):
            group, artifact = (
                exclusion.findtext(f"{POM_NS}{t}") for t in ("groupId", "artifactId")
            )
            excluded.append(f"{group}:{artifact}")
    assert tuple(found) == jars.SPARK_KAFKA_CONNECTOR.artifacts
    assert tuple(excluded) == jars.SPARK_KAFKA_CONNECTOR.exclusions
    assert re.search(r"\bmvn .*-C\b", script), "Maven must fail on a checksum mismatch (-C)"
    assert "sha256sum -c /build/jars.sha256" in script


def test_pinned_jars_are_the_connector_of_this_spark_version() -> None:
    pinned = pinned_jars()
    suffix = f"_{jars.SCALA_BINARY}-{jars.SPARK_VERSION}.jar"
    assert f"spark-sql-kafka-0-10{suffix}" in pinned
    assert f"spark-token-provider-kafka-0-10{suffix}" in pinned
    assert any(name.startswith("kafka-clients-") for name in pinned)
    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in pinned.values())


def test_pinned_digests_equal_the_jars_maven_gave_the_local_runtime() -> None:
    folder = jars.cache_root() / "jars" / jars.SPARK_KAFKA_CONNECTOR.key
    if not (folder / ".complete").exists():
        pytest.skip(f"the connector jars are not cached in {folder} (run the integration tests)")
    for name, digest in pinned_jars().items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


def test_runs_as_spark_non_root_user() -> None:
    users = re.findall(r"^USER (\S+)$", stages()[-1], re.MULTILINE)
    assert users, "the image must say which user it runs as"
    assert users[-1] == "185"  # Spark's uid, numeric so runAsNonRoot can check it


def test_main_application_file_the_planner_emits_is_in_the_image() -> None:
    path = spark.RUNNER_FILE.removeprefix("local://")
    final = stages()[-1]
    opening = next(
        line for line in final.splitlines() if line.startswith("COPY") and line.endswith(path)
    )
    tree = ast.parse(heredoc(opening, final))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    arguments = {
        (c.func.attr if isinstance(c.func, ast.Attribute) else "", a.value)
        for c in calls
        for a in c.args
        if isinstance(a, ast.Constant)
    }
    assert ("run_module", "distributary.runner") in arguments
    assert (ROOT / "operator" / "distributary" / "runner" / "__main__.py").exists()


def test_dependencies_are_the_hash_lock_and_pyspark_the_images_own() -> None:
    final = stages()[-1]
    assert "COPY spark_images/requirements.lock /tmp/requirements.lock" in final
    assert re.search(r"--require-hashes \\\n\s+-r /tmp/requirements.lock", final)
    assert "--no-deps /tmp/distributary" in final  # the project itself brings no pyspark
    assert 'pyspark.__file__.startswith("/opt/spark/python/")' in final


def test_default_checkpoint_root_is_writable_by_the_spark_user() -> None:
    root = pipeline.DEFAULT_CHECKPOINT_ROOT.removeprefix("file://")
    final = stages()[-1]
    assert f"mkdir -p {root}" in final
    assert re.search(rf"chown -R 185:185 {re.escape(str(Path(root).parent))}\b", final)
