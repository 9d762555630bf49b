"""A class-data archive of the Kafka broker's classes, so that the embedded brokers of the test
suite (one per `distributary run`, and again for each restart, `tail` or `status` of a stopped
run) start on about half the CPU.

As for Spark's drivers (`spark_cds`), most of a broker's start is loading and verifying the same
classes of Kafka's jars. `archive()` makes the archive once, by a broker that starts, makes a
topic, takes a record in and gives it back, and stops (`-XX:ArchiveClassesAtExit`), and keeps it
in the cache, named for the Kafka jars and the Java it was made with and the JVM options it was
made under. `jvm_options()` gives the options that map it, meant for `KAFKA_JVM_PERFORMANCE_OPTS`
(which the embedded broker and Connect read, `local.broker.jvm_performance_options`).

Measured on two cores: a broker's start to stop took 4.8 to 5.2 CPU-s without the archive and
2.9 with it, and it served 1.9 s sooner. A JVM whose class path or options do not match the
archive (Connect's, another Kafka) goes on without it, so a stale archive costs only the speed.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from distributary.artifacts import KAFKA_BROKER, cache_root, jars
from distributary.devtools.spark_cds import (
    QUIET,
    class_path_fingerprint,
    java_version,
    made_once,
    mapping_options,
)
from distributary.errors import DistributaryError

VARIABLE = "KAFKA_JVM_PERFORMANCE_OPTS"
TOPIC = "distributary-cds"


def _key() -> str:
    folders = sorted({jar.parent for jar in jars(KAFKA_BROKER, quiet=True)})
    return "\n".join(
        [
            ",".join(KAFKA_BROKER.artifacts),
            java_version(),
            os.environ.get(VARIABLE, ""),  # the collector decides what the archive may hold
            os.environ.get("JAVA_TOOL_OPTIONS", ""),
            *(class_path_fingerprint(folder) for folder in folders),
        ]
    )


def archive_path() -> Path:
    """Where the archive for these Kafka jars, this Java and these JVM options lives."""
    digest = hashlib.sha256(_key().encode()).hexdigest()[:12]
    return cache_root() / "cds" / f"kafka-{digest}.jsa"


def _train(made: Path, state: Path) -> None:
    """A broker that starts, makes a topic, takes a record and gives it back, and stops: the
    classes of a broker's start and of the requests tests make are loaded, then archived."""
    from distributary.kafka.admin import KafkaAdmin
    from distributary.kafka.records import TopicReader, produce
    from distributary.local.broker import EmbeddedBroker
    from distributary.plan.kafka_topics.topics import CreateTopic
    from distributary.schema import EncodedRecord

    options = os.environ.get(VARIABLE, "")
    os.environ[VARIABLE] = f"{options} -XX:ArchiveClassesAtExit={made} {QUIET}".strip()
    try:
        with EmbeddedBroker(state) as broker:
            servers = broker.bootstrap_servers
            KafkaAdmin(servers).create_topic(CreateTopic(TOPIC, 1, None, {}))
            produce(servers, TOPIC, [EncodedRecord(b"k", b"{}")])
            with TopicReader(servers) as reader:
                reader.last(TOPIC, 1)
    finally:
        os.environ[VARIABLE] = options


def archive() -> Path | None:
    """The archive, made first when it is not in the cache (about 10 s); None when it could not
    be made (the brokers then start as they always did)."""

    def train(made: Path, scratch: Path) -> bool:
        try:
            _train(made, scratch / "broker")
        except (DistributaryError, OSError) as exc:  # only slower: the brokers start anyway
            print(f"kafka_cds: no class-data archive of Kafka's classes: {exc}", file=sys.stderr)
            return False
        return True

    return made_once(archive_path(), train)


def jvm_options(path: Path | None, existing: str = "") -> str:
    """`KAFKA_JVM_PERFORMANCE_OPTS` that map the archive at `path` (with what was set before)."""
    return mapping_options(path, existing)
