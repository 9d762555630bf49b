"""Java artifacts Distributary runs on one machine, resolved from Maven Central once and cached.

Resolution goes through Maven itself (a throw-away POM and `dependency:copy-dependencies`), so the
repository, mirrors and proxies configured for `mvn` apply, and transitive versions are exactly
those the artifacts declare. Each bundle lands in its own folder under the cache, named for its
coordinates, and is marked complete only after every jar is in place: an interrupted download is
redone, a finished one is never fetched again, and later runs work offline.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from distributary.errors import DistributaryError

KAFKA_VERSION = "4.1.1"
SPARK_VERSION = "4.1.1"  # equal to the pinned pyspark
SCALA_BINARY = "2.13"
LOG4J_VERSION = "2.24.3"
SLF4J_VERSION = "2.0.17"
DEBEZIUM_VERSION = "3.4.3.Final"
# Strimzi's KubernetesSecretConfigProvider: a Connect worker in a pod reads Sources' passwords from
# their Secrets (`${secrets:NAMESPACE/NAME:KEY}`) with its ServiceAccount's rights.
KUBERNETES_CONFIG_PROVIDER_VERSION = "1.2.0"


@dataclass(frozen=True)
class Bundle:
    """A named set of Maven artifacts resolved together with their runtime dependencies."""

    name: str
    artifacts: tuple[str, ...]  # group:artifact:version
    exclusions: tuple[str, ...] = ()  # group:artifact left out (provided by the host, e.g. pyspark)

    @property
    def key(self) -> str:
        """The bundle's cache folder name: its name and a digest of its coordinates."""
        digest = hashlib.sha256("\n".join(self.artifacts + self.exclusions).encode()).hexdigest()
        return f"{self.name}-{digest[:10]}"


KAFKA_BROKER = Bundle(
    "kafka",
    (
        f"org.apache.kafka:kafka_{SCALA_BINARY}:{KAFKA_VERSION}",
        f"org.apache.kafka:kafka-tools:{KAFKA_VERSION}",
        f"org.apache.logging.log4j:log4j-slf4j2-impl:{LOG4J_VERSION}",
        # A direct pin, so Maven picks the slf4j 2 API that the log4j binding above needs.
        f"org.slf4j:slf4j-api:{SLF4J_VERSION}",
    ),
)

# A Kafka Connect worker (distributed mode) with Debezium's PostgreSQL connector on its classpath,
# for change data capture on one machine (`distributary.local.connect`).
KAFKA_CONNECT = Bundle(
    "kafka-connect",
    (
        f"org.apache.kafka:connect-runtime:{KAFKA_VERSION}",
        f"org.apache.kafka:connect-json:{KAFKA_VERSION}",
        f"org.apache.kafka:connect-transforms:{KAFKA_VERSION}",
        f"io.debezium:debezium-connector-postgres:{DEBEZIUM_VERSION}",
        f"org.apache.logging.log4j:log4j-slf4j2-impl:{LOG4J_VERSION}",
        f"org.slf4j:slf4j-api:{SLF4J_VERSION}",
    ),
)

# The Connect image's classpath (connect_image/): the worker above, and the provider that reads
# Kubernetes Secrets, resolved together so that the jars they share come in one version each.
CONNECT_IMAGE = Bundle(
    "kafka-connect-image",
    (
        *KAFKA_CONNECT.artifacts,
        f"io.strimzi:kafka-kubernetes-config-provider:{KUBERNETES_CONFIG_PROVIDER_VERSION}",
    ),
)

SPARK_KAFKA_CONNECTOR = Bundle(
    "spark-sql-kafka",
    (f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{SPARK_VERSION}",),
    # pyspark ships these already (some in newer versions); two copies on one classpath clash.
    exclusions=(
        "org.slf4j:slf4j-api",
        "org.apache.hadoop:hadoop-client-api",
        "org.apache.hadoop:hadoop-client-runtime",
        "org.scala-lang:scala-library",
        "org.scala-lang.modules:scala-parallel-collections_2.13",
        "org.apache.spark:spark-tags_2.13",
        "org.xerial.snappy:snappy-java",
        "org.lz4:lz4-java",
        "com.google.code.findbugs:jsr305",
    ),
)


class ArtifactError(DistributaryError, RuntimeError):
    """Jars could not be resolved; the message says what to install or where to look."""


def cache_root() -> Path:
    """Where Distributary caches what it downloads: $DISTRIBUTARY_CACHE or ~/.cache/distributary."""
    configured = os.environ.get("DISTRIBUTARY_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "distributary"


def _pom(bundle: Bundle) -> str:
    deps = []
    for coordinate in bundle.artifacts:
        group, artifact, version = coordinate.split(":")
        exclusions = "".join(
            f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
            for g, a in (e.split(":") for e in bundle.exclusions)
        )
        deps.append(
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version><exclusions>{exclusions}</exclusions></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>dev.distributary.cache</groupId><artifactId>bundle</artifactId>"
        f"<version>1</version><dependencies>{''.join(deps)}</dependencies></project>"
    )


def resolve(bundle: Bundle, *, quiet: bool = False) -> Path:
    """The folder holding the bundle's jars, downloading them on first use."""
    target = cache_root() / "jars" / bundle.key
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Two processes may start at once on a fresh machine: one fetches, the other waits for it
    # and then uses its folder (replacing a folder another process reads would break its run).
    with open(target.parent / f".{bundle.key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            return target
        return _fetch(bundle, target, quiet)


def _fetch(bundle: Bundle, target: Path, quiet: bool) -> Path:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ArtifactError(
            f"Maven (mvn) is needed once to fetch the {bundle.name} jars into {target}: "
            "install it (e.g. apt-get install maven) and run again"
        )
    if not quiet:
        print(
            f"Fetching {bundle.name} jars ({', '.join(bundle.artifacts)}) from Maven Central "
            f"into {target} (once) ...",
            file=sys.stderr,
            flush=True,
        )
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{bundle.key}-") as work:
        staging = copy_dependencies(bundle, Path(work), mvn)
        (staging / ".complete").write_text("\n".join(bundle.artifacts) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


def copy_dependencies(
    bundle: Bundle, work: Path, mvn: str, *, repository_layout: bool = False
) -> Path:
    """The bundle's jars as Maven resolves them, copied into `work`/lib (in a repository's
    layout, GROUP/ARTIFACT/VERSION/, with `repository_layout`); that folder."""
    (work / "pom.xml").write_text(_pom(bundle))
    output = work / "lib"
    command = [mvn, "-B", "-q", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
               "-DincludeScope=runtime", f"-DoutputDirectory={output}"]  # fmt: skip
    if repository_layout:
        command.append("-Dmdep.useRepositoryLayout=true")
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise ArtifactError(f"mvn could not resolve the {bundle.name} jars:\n{tail}")
    return output


def jars(bundle: Bundle, *, quiet: bool = False) -> list[Path]:
    """Every jar of the bundle, sorted, resolving it first when needed."""
    return sorted(resolve(bundle, quiet=quiet).glob("*.jar"))
