"""The class-data archive of Kafka's classes is kept per Kafka jars, Java and JVM options: a JVM
refuses an archive made under another collector or with other jars, and starts without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from distributary.devtools import kafka_cds


@pytest.fixture
def kafka_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "kafka"
    folder.mkdir()
    (folder / "kafka.jar").write_bytes(b"classes")
    monkeypatch.setattr(kafka_cds, "jars", lambda *_, **__: [folder / "kafka.jar"])
    monkeypatch.setattr(kafka_cds, "java_version", lambda: "openjdk 17")
    monkeypatch.setattr(kafka_cds, "cache_root", lambda: tmp_path / "cache")
    monkeypatch.delenv("JAVA_TOOL_OPTIONS", raising=False)
    return folder


def test_the_same_jars_java_and_options_give_the_same_archive(
    kafka_jars: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(kafka_cds.VARIABLE, "-XX:+UseSerialGC")
    assert kafka_cds.archive_path() == kafka_cds.archive_path()
    assert kafka_cds.archive_path().parent == kafka_jars.parent / "cache" / "cds"


def test_another_collector_or_install_gives_another_archive(
    kafka_jars: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(kafka_cds.VARIABLE, "-XX:+UseSerialGC")
    serial = kafka_cds.archive_path()
    monkeypatch.setenv(kafka_cds.VARIABLE, "-XX:+UseG1GC")
    assert kafka_cds.archive_path() != serial
    monkeypatch.setenv(kafka_cds.VARIABLE, "-XX:+UseSerialGC")
    os.utime(kafka_jars / "kafka.jar", ns=(1, 1))  # the jars fetched again
    assert kafka_cds.archive_path() != serial


def test_the_options_map_the_archive_quietly_after_what_was_set() -> None:
    options = kafka_cds.jvm_options(Path("/cache/kafka-1.jsa"), "-XX:+UseSerialGC")
    assert options.split()[:2] == ["-XX:+UseSerialGC", "-XX:SharedArchiveFile=/cache/kafka-1.jsa"]
    assert "-Xlog:cds=off" in options
    assert kafka_cds.jvm_options(None, "-XX:+UseSerialGC") == "-XX:+UseSerialGC"


def test_a_new_archive_replaces_its_familys_older_ones_only(tmp_path: Path) -> None:
    from distributary.devtools.spark_cds import keep

    cache = tmp_path / "cds"
    cache.mkdir()
    for name in ("kafka-old.jsa", "spark-4.1.1-old.jsa"):
        (cache / name).write_bytes(b"archive")
    made = tmp_path / "made.jsa"
    assert keep(made, cache / "kafka-new.jsa") is None  # the JVM wrote none: nothing changes
    made.write_bytes(b"archive")
    assert keep(made, cache / "kafka-new.jsa") == cache / "kafka-new.jsa"
    assert sorted(p.name for p in cache.iterdir()) == ["kafka-new.jsa", "spark-4.1.1-old.jsa"]
