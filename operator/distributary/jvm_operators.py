"""The views' JVM operators: Java classes of Distributary's own that the runner's Spark calls.

A view over a table keeps its state in `transformWithState` operators (`runner/tables.py`,
`joined_tables.py`, `table_joins.py`): each record key's row, each group's aggregates, the rows of
joins. Written in Python one costs about 0.13 ms a key, and needs a Python worker that Spark
starts for the query; in Java a few microseconds, which is what lets a maintained view cost less
than recomputing its query (docs/performance.md).
The sources (`runner/jvm/*.java`) ship with the package, and are compiled against Spark's own jars
(pyspark's) into one jar:

- **the job image** compiles them in its build and puts the jar among Spark's jars, where every
  driver and executor finds it (`spark_images/Dockerfile`);
- **elsewhere** (`distributary run`, the operator's local runtime) `operators_jar()` compiles them
  once per machine with the JDK's `javac`, into the cache, named for the sources and the Spark
  version, and the runners get it in `spark.jars`.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib.metadata import distribution, version
from pathlib import Path

from distributary.artifacts import SPARK_KAFKA_CONNECTOR, ArtifactError, cache_root, jars

JAR = "distributary-operators.jar"
SOURCES = Path(__file__).resolve().parent / "runner" / "jvm"
JAVA_RELEASE = "17"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # every entry's time: the same sources make the same jar


def spark_jars() -> Path:
    """The folder of Spark's jars in this environment's pyspark (found without importing it)."""
    return Path(str(distribution("pyspark").locate_file("pyspark/jars")))


@functools.cache
def _shipped() -> bool:
    return (spark_jars() / JAR).exists()


def sources() -> list[Path]:
    """The Java sources, sorted."""
    return sorted(SOURCES.glob("*.java"))


@functools.cache
def jar_key() -> str:
    """What the jar is made of: the sources, the Spark version and the Java release."""
    digest = hashlib.sha256(f"{version('pyspark')}\n{JAVA_RELEASE}\n".encode())
    for path in sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"{version('pyspark')}-{digest.hexdigest()[:12]}"


def operators_jar(*, required: bool = True) -> Path | None:
    """The jar to add to `spark.jars`: None when Spark's own jars hold it (the job image), else
    the one built in the cache, compiled first when missing. Without a JDK: `NoCompilerError`,
    saying what to install, or None when not `required` (a runner that reads no table needs none,
    and one that does says so when it starts)."""
    if _shipped():
        return None
    target = cache_root() / "jars" / f"operators-{jar_key()}" / JAR
    if target.exists():
        return target
    try:
        return _build(target)
    except NoCompilerError:
        if required:
            raise
        return None


class NoCompilerError(ArtifactError):
    """No JDK's javac to compile the operators with."""


def runner_jars(*, quiet: bool = False) -> list[Path]:
    """What a runner's `spark.jars` names: the Kafka connector's jars and, unless Spark's own jars
    hold them or no JDK is here to build them, the operators' jar."""
    found = jars(SPARK_KAFKA_CONNECTOR, quiet=quiet)
    operators = operators_jar(required=False)
    return [*found, operators] if operators is not None else found


def javac() -> str | None:
    """The JDK's compiler: $JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").exists():
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def _build(target: Path) -> Path:
    compiler = javac()
    if compiler is None:
        raise NoCompilerError(
            "views over tables run Distributary's JVM operators, compiled once per machine from "
            f"their sources ({SOURCES}), and no javac was found: install a JDK {JAVA_RELEASE} "
            "(e.g. apt-get install openjdk-17-jdk-headless) or set JAVA_HOME to one"
        )
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    # Two runners may start at once on a fresh machine: one compiles, the other waits for it.
    with open(target.parent.parent / f".{target.parent.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        print(f"Compiling Distributary's JVM operators into {target} (once) ...", file=sys.stderr)
        with tempfile.TemporaryDirectory(dir=target.parent.parent, prefix=".operators-") as work:
            classes = Path(work) / "classes"
            compile_to(classes, compiler)
            staging = Path(work) / JAR
            write_jar(classes, staging)
            target.parent.mkdir(exist_ok=True)
            staging.rename(target)
    return target


def compile_to(classes: Path, compiler: str, classpath: str | None = None) -> None:
    """Compile the sources into the folder `classes`, against `classpath` (Spark's jars)."""
    path = classpath or str(spark_jars() / "*")
    command = [compiler, "--release", JAVA_RELEASE, "-nowarn", "-encoding", "UTF-8",
               "-d", str(classes), "-cp", path, *map(str, sources())]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ArtifactError(f"javac could not compile Distributary's JVM operators:\n{tail}")


def write_jar(classes: Path, jar: Path) -> None:
    """A jar of the folder `classes`, its entries sorted and dated alike."""
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as archive:
        manifest = zipfile.ZipInfo("META-INF/MANIFEST.MF", _EPOCH)
        archive.writestr(manifest, "Manifest-Version: 1.0\r\nCreated-By: distributary\r\n\r\n")
        for path in sorted(p for p in classes.rglob("*.class")):
            entry = zipfile.ZipInfo(path.relative_to(classes).as_posix(), _EPOCH)
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, path.read_bytes())


def main(argv: list[str] | None = None) -> int:
    """`python -m distributary.jvm_operators FOLDER [CLASSPATH]`: the jar into FOLDER (the job
    image's build, against the jars CLASSPATH names; by default pyspark's)."""
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0])
    compiler = javac()
    if compiler is None:
        raise SystemExit("javac not found: install a JDK")
    with tempfile.TemporaryDirectory() as work:
        compile_to(Path(work), compiler, args[1] if len(args) > 1 else None)
        folder.mkdir(parents=True, exist_ok=True)
        write_jar(Path(work), folder / JAR)
    print(folder / JAR)
    return 0


if __name__ == "__main__":
    sys.exit(main())
