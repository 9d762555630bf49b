"""A class-data archive of Spark's driver classes, so that the many short-lived Spark drivers of
the test suite start in about half the time.

Most of a local Spark driver's start is loading and verifying the same classes of Spark's jars
each time. The JVM can keep them in a class-data sharing archive (`-XX:ArchiveClassesAtExit`
writes one when a JVM exits; `-XX:SharedArchiveFile` maps it at start). `archive()` makes one
once, by a small Spark session that runs a streaming aggregation and a batch query with the Kafka
connector's jars, and keeps it in the cache, named for the Spark and Java versions it was made
with. `submit_opts()` gives the options that use it, meant for `SPARK_SUBMIT_OPTS`, which
spark-submit passes to the driver's JVM only.

The JVM checks that an archive matches it (its version, its class path) and goes on without it
when it does not, so a stale or foreign archive costs nothing but the speed; the options keep
the JVM quiet about it. What the drivers compute does not change.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib.metadata import distribution, version
from pathlib import Path

from distributary.artifacts import SPARK_KAFKA_CONNECTOR, cache_root, jars

QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

# The workload whose classes are archived: a session as the runner makes one, a streaming query
# with state (the rate source, an aggregation, a memory sink) for a few batches, a batch query.
TRAINING = """
import sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("distributary-cds")
    .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
    .config("spark.jars", sys.argv[1]).getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
stream = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
    .selectExpr("value % 7 AS k", "to_json(named_struct('v', value)) AS j")
    .groupBy("k").count())
query = (stream.writeStream.format("memory").queryName("cds").outputMode("update")
    .trigger(processingTime="200 milliseconds").start())
deadline = time.time() + 60
while time.time() < deadline and (query.lastProgress or {}).get("batchId", -1) < 3:
    time.sleep(0.2)
query.stop()
spark.sql("SELECT k, sum(count) FROM cds GROUP BY k").collect()
spark.stop()
"""


def java_version() -> str:
    java = Path(os.environ["JAVA_HOME"]) / "bin" / "java" if os.environ.get("JAVA_HOME") else "java"
    done = subprocess.run(
        [str(java), "-version"], capture_output=True, text=True, check=False, timeout=60
    )
    # Without the line the JVM adds when JAVA_TOOL_OPTIONS is set: the options do not change
    # which archive fits.
    return "\n".join(
        line for line in done.stderr.splitlines() if not line.startswith("Picked up")
    ).strip()


def class_path_fingerprint(folder: Path) -> str:
    """What the JVM checks of the jars in `folder` before it maps an archive: where they are,
    their sizes and their modification times. Each install of pyspark (a new checkout's
    environment) has jars of its own, and the JVM refuses an archive made with others."""
    entries = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    lines = [str(folder.resolve())]
    for jar in entries:
        found = jar.stat()
        lines.append(f"{jar.name} {found.st_size} {found.st_mtime_ns}")
    return "\n".join(lines)


def _pyspark_jars() -> Path:
    """The folder of Spark's jars in this environment's pyspark (found without importing it)."""
    return Path(str(distribution("pyspark").locate_file("pyspark/jars")))


def archive_path() -> Path:
    """Where the archive for this Spark, this Java and this install of Spark's jars lives in
    the cache."""
    spark = version("pyspark")
    key = f"{spark}\n{java_version()}\n{class_path_fingerprint(_pyspark_jars())}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_root() / "cds" / f"spark-{spark}-{digest}.jsa"


def archive(timeout: float = 300) -> Path | None:
    """The archive, made first when it is not in the cache (about 15 s); None when it could not
    be made (the drivers then start as they always did)."""

    def train(made: Path, scratch: Path) -> bool:
        env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={made} {QUIET}"}
        connector = ",".join(str(j) for j in jars(SPARK_KAFKA_CONNECTOR, quiet=True))
        try:
            subprocess.run(
                [sys.executable, "-c", TRAINING, connector],
                env=env,
                cwd=scratch,
                capture_output=True,
                check=False,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return False
        return True

    return made_once(archive_path(), train)


def made_once(target: Path, train: Callable[[Path, Path], bool]) -> Path | None:
    """The archive at `target`, made first when the cache has none: `train(made, scratch)` runs
    a JVM that writes one at `made` when it exits, in the folder `scratch`, and says whether it
    finished. None when it did not, or wrote nothing."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        made = Path(scratch) / target.name
        return keep(made, target) if train(made, Path(scratch)) else None


def keep(made: Path, target: Path) -> Path | None:
    """The archive a JVM wrote at `made` (None when it wrote none), moved to `target`, and the
    other archives of its family (the name before the first '-') removed: they are 50 to 150 MB
    each, and a JVM that maps one keeps it until it exits."""
    if not made.exists() or made.stat().st_size == 0:
        return None
    made.replace(target)  # whole or not at all: other sessions may read it at once
    family = target.name.split("-", 1)[0]
    for other in target.parent.glob(f"{family}-*.jsa"):
        if other != target:
            other.unlink(missing_ok=True)
    return target


def mapping_options(path: Path | None, existing: str = "") -> str:
    """JVM options that map the archive at `path` quietly, after `existing` ones."""
    if path is None:
        return existing
    return " ".join(part for part in (existing, f"-XX:SharedArchiveFile={path}", QUIET) if part)


def submit_opts(path: Path | None, existing: str = "") -> str:
    """`SPARK_SUBMIT_OPTS` that map the archive at `path` (with what was set before)."""
    return mapping_options(path, existing)
