"""Where the runners' JVM operators come from (`jvm_operators.py`): Spark's own jars when an image
put the jar there, else a jar built once in the cache, named for its sources; without a JDK, a
runner that reads no table goes on, and one that needs the jar is told what to install. The
compiler itself runs in `tests/integration/test_table_operators.py`."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from distributary import jvm_operators


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """An empty Spark jars folder and an empty cache."""
    spark, cache = tmp_path / "spark-jars", tmp_path / "cache"
    spark.mkdir()
    monkeypatch.setattr(jvm_operators, "spark_jars", lambda: spark)
    monkeypatch.setenv("DISTRIBUTARY_CACHE", str(cache))
    jvm_operators._shipped.cache_clear()
    yield spark, cache
    jvm_operators._shipped.cache_clear()


def test_the_jar_among_sparks_own_is_used_as_it_is(places: tuple[Path, Path]) -> None:
    spark, cache = places
    (spark / jvm_operators.JAR).write_bytes(b"")
    assert jvm_operators.operators_jar() is None
    assert not cache.exists()


def test_without_a_jdk_a_runner_goes_on_unless_it_needs_the_jar(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jvm_operators, "javac", lambda: None)
    assert jvm_operators.operators_jar(required=False) is None
    with pytest.raises(jvm_operators.NoCompilerError) as raised:
        jvm_operators.operators_jar()
    said = str(raised.value)
    assert "no javac was found" in said
    assert "openjdk-17-jdk-headless" in said
    assert "JAVA_HOME" in said


def test_a_built_jar_is_named_for_its_sources_and_spark(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, cache = places
    built: list[Path] = []

    def compile_to(classes: Path, _compiler: str, _classpath: str | None = None) -> None:
        (classes / "dev").mkdir(parents=True)
        (classes / "dev" / "A.class").write_bytes(b"\xca\xfe")
        built.append(classes)

    monkeypatch.setattr(jvm_operators, "javac", lambda: "/usr/bin/javac")
    monkeypatch.setattr(jvm_operators, "compile_to", compile_to)
    jar = jvm_operators.operators_jar()
    assert jar is not None
    assert jar == cache / "jars" / f"operators-{jvm_operators.jar_key()}" / jvm_operators.JAR
    assert jvm_operators.operators_jar() == jar
    assert len(built) == 1
    with zipfile.ZipFile(jar) as archive:
        assert archive.namelist() == ["META-INF/MANIFEST.MF", "dev/A.class"]


def test_the_same_classes_make_the_same_jar(tmp_path: Path) -> None:
    classes = tmp_path / "classes"
    (classes / "b").mkdir(parents=True)
    (classes / "b" / "Z.class").write_bytes(b"z")
    (classes / "A.class").write_bytes(b"a")
    jvm_operators.write_jar(classes, tmp_path / "one.jar")
    (classes / "A.class").touch()
    jvm_operators.write_jar(classes, tmp_path / "two.jar")
    assert (tmp_path / "one.jar").read_bytes() == (tmp_path / "two.jar").read_bytes()


def test_the_key_changes_with_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "Op.java"
    source.write_text("class Op {}")
    monkeypatch.setattr(jvm_operators, "sources", lambda: [source])
    jvm_operators.jar_key.cache_clear()
    first = jvm_operators.jar_key()
    source.write_text("class Op { int x; }")
    jvm_operators.jar_key.cache_clear()
    assert jvm_operators.jar_key() != first
    jvm_operators.jar_key.cache_clear()


def test_the_runners_jars_are_the_connectors_and_the_operators(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    connector = [tmp_path / "kafka.jar"]
    monkeypatch.setattr(jvm_operators, "jars", lambda bundle, quiet: connector)
    monkeypatch.setattr(jvm_operators, "operators_jar", lambda required: tmp_path / "ops.jar")
    assert jvm_operators.runner_jars() == [*connector, tmp_path / "ops.jar"]
    monkeypatch.setattr(jvm_operators, "operators_jar", lambda required: None)
    assert jvm_operators.runner_jars() == connector


def test_the_sources_ship_with_the_package() -> None:
    assert [p.name for p in jvm_operators.sources()] == [
        "Groups.java",
        "JoinRows.java",
        "JoinTables.java",
        "LatestRows.java",
        "LocalCheckpointFiles.java",
        "NetRows.java",
        "Support.java",
    ]
    text = Path(__file__).resolve().parents[3].joinpath("pyproject.toml").read_text()
    assert '"runner/jvm/*.java"' in text
