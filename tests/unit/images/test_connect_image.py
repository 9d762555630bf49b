"""The Connect image agrees with the project: its jars, its entry point, the chart's worker.

Read as text, without a container engine (`tests/integration/pods/test_shop_in_pods.py` builds it
and runs the shop's Source in it).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from distributary import artifacts
from distributary.api.source import SecretKey
from distributary.devtools import images, jar_lock
from distributary.local import connect
from distributary.plan.sources.source_plan import password_reference

ROOT = Path(__file__).resolve().parents[3]
FOLDER = ROOT / "connect_image"
TEMPLATES = ROOT / "charts" / "distributary" / "templates"


def locked() -> dict[tuple[str, str], list[str]]:
    """(group, artifact) -> the versions connect_image/jars.sha256 pins."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for line in (FOLDER / "jars.sha256").read_text().splitlines():
        digest, path = line.split("  ")
        assert re.fullmatch(r"[0-9a-f]{64}", digest), line
        *group, artifact, version, name = path.split("/")
        assert name == f"{artifact}-{version}.jar", line
        found[(".".join(group), artifact)].append(version)
    return found


def test_the_lock_pins_the_projects_versions_once_each() -> None:
    pinned = locked()
    assert {k: v for k, v in pinned.items() if len(v) > 1} == {}
    for coordinate in artifacts.CONNECT_IMAGE.artifacts:
        group, artifact, version = coordinate.split(":")
        assert pinned.get((group, artifact)) == [version], coordinate
    assert pinned[("org.apache.kafka", "kafka-clients")] == [artifacts.KAFKA_VERSION]
    assert jar_lock.LOCKS == {"connect_image/jars.sha256": artifacts.CONNECT_IMAGE}


def test_the_image_runs_the_worker_the_machine_runs_as_the_charts_user() -> None:
    dockerfile = (FOLDER / "Dockerfile").read_text()
    entrypoint = (FOLDER / "entrypoint.sh").read_text()
    assert connect.MAIN_CLASS in entrypoint
    assert connect.MAIN_CLASS in dockerfile  # the build's check
    assert "USER 10002" in dockerfile
    assert "COPY connect_image/jars.sha256" in dockerfile
    worker = (TEMPLATES / "connect-worker.yaml").read_text()
    assert "runAsUser: 10002" in worker
    assert "mountPath: /etc/distributary-connect/worker.properties" in worker
    assert "/etc/distributary-connect/worker.properties" in entrypoint
    assert images.IMAGES["connect"] is images.CONNECT
    assert images.CONNECT.name == "distributary-connect"
    values = (ROOT / "charts" / "distributary" / "values.yaml").read_text()
    assert f"repository: {images.CONNECT.name}\n" in values


def test_the_charts_worker_resolves_the_references_the_operator_writes() -> None:
    """The operator names a Source's password `${secrets:NS/NAME:KEY}` (with `secrets`
    "kubernetes"); the chart's workers configure Strimzi's provider, whose jar the image has,
    under that alias."""
    reference = password_reference("kubernetes", "shop", SecretKey(name="shop-db", key="password"))
    alias = reference.removeprefix("${").split(":", 1)[0]
    helpers = (TEMPLATES / "_connect.tpl").read_text()
    provider = "io.strimzi.kafka.KubernetesSecretConfigProvider"
    assert f'"config.providers.{alias}.class" "{provider}"' in helpers
    assert f'"config.providers" "{alias},env"' in helpers
    assert ("io.strimzi", "kafka-kubernetes-config-provider") in locked()
