"""The clickstream example's data in and its outputs checked, inside the kind cluster.

Kafka there listens only with SASL_SSL (SCRAM-SHA-512), on a Service name that resolves inside the
cluster, so this runs as a Job in the pipeline's namespace, on the operator image (distributary and
confluent-kafka), with the same DISTRIBUTARY_KAFKA_* environment the chart gives the operator,
the password from the KafkaUser's Secret. `run.sh` puts this file, the example's `logs.yaml` and
its data in a ConfigMap; the topics come from the Logs' status, in the environment.

- `produce`: every line of the data file checked against the page-views Log's schema and appended
  with the key and value `distributary produce` makes of it.
- `check`: the views' serving topics read as any committed reader reads them, and compared
  exactly with what the data implies, computed here the way the example's SQL computes it:
  `enriched-page-views` row for row (a multiset, with the filter's threshold after the edit),
  `views-per-user` and `views-per-country` as tables (the latest row per key). Exit 1 with what
  differs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from distributary.api.log import Log
from distributary.schema import RecordSchema, check_lines

READ_TIMEOUT = 120.0
# The chart's Kafka environment (charts/distributary/templates/deployment.yaml) -> librdkafka.
KAFKA_ENVIRONMENT = {
    "DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL": "security.protocol",
    "DISTRIBUTARY_KAFKA_SASL_MECHANISM": "sasl.mechanism",
    "DISTRIBUTARY_KAFKA_SASL_USERNAME": "sasl.username",
    "DISTRIBUTARY_KAFKA_SASL_PASSWORD": "sasl.password",
    "DISTRIBUTARY_KAFKA_SSL_CA_LOCATION": "ssl.ca.location",
    "DISTRIBUTARY_KAFKA_SSL_CERTIFICATE_LOCATION": "ssl.certificate.location",
    "DISTRIBUTARY_KAFKA_SSL_KEY_LOCATION": "ssl.key.location",
}


def say(message: str) -> None:
    print(f"[clicks] {message}", file=sys.stderr, flush=True)


def kafka(**extra: str | int | bool) -> dict[str, Any]:
    """The client settings: bootstrap servers and security from the environment."""
    security = {
        key: os.environ[name] for name, key in KAFKA_ENVIRONMENT.items() if name in os.environ
    }
    return {"bootstrap.servers": os.environ["DISTRIBUTARY_BOOTSTRAP_SERVERS"], **security, **extra}


def records(data: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.read_text().splitlines() if line.strip()]


def produce(logs: Path, data: Path, topic: str) -> int:
    """Append the data file to `topic`, as `distributary produce` encodes it; the count."""
    log = next(
        Log.model_validate(doc)
        for doc in yaml.safe_load_all(logs.read_text())
        if doc and doc.get("kind") == "Log" and doc["metadata"]["name"] == "page-views"
    )
    schema = RecordSchema.of_log(log)
    checked = list(check_lines(data.read_text().splitlines(), schema))
    bad = [f"line {c.line}: {'; '.join(c.problems)}" for c in checked if c.problems]
    if bad:
        raise SystemExit(f"{data}: {len(bad)} invalid record(s): {bad[:3]}")
    producer = Producer(
        kafka(**{"partitioner": "murmur2_random", "enable.idempotence": True, "linger.ms": 20})
    )
    failures: list[str] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failures.append(error.str())

    for line in checked:
        assert line.record is not None
        encoded = schema.encode(line.record)
        producer.produce(topic, key=encoded.key, value=encoded.value, on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(60)
    if left or failures:
        raise SystemExit(f"{left} record(s) not delivered to {topic}; Kafka said: {failures[:3]}")
    return len(checked)


# What the data implies ---------------------------------------------------------------------


def millis(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def canonical(row: Mapping[str, Any]) -> str:
    """A row as one comparable string: sorted keys, no null fields (Spark's JSON leaves them
    out), timestamps in milliseconds."""
    kept = {
        k: millis(v) if k in ("ts", "last_seen") and isinstance(v, str) else v
        for k, v in row.items()
        if v is not None
    }
    return json.dumps(kept, sort_keys=True)


def _host(url: str | None) -> str | None:
    return urlsplit(url).hostname if url else None


def enriched(record: Mapping[str, Any], threshold: int) -> dict[str, Any] | None:
    """The enriched view's row for a page view; None when its WHERE drops it."""
    user, url, duration = record.get("user_id"), record.get("url"), record.get("duration_ms")
    if user is None or url is None or duration is None or duration < threshold:
        return None
    referrer = record.get("referrer")
    if not referrer:
        source = "direct"
    elif _host(referrer) == _host(url):
        source = "internal"
    else:
        source = "external"
    country = record.get("country")
    return {
        "user_id": user,
        "session_id": record.get("session_id"),
        "url": url,
        "host": (_host(url) or "").lower(),
        "path": urlsplit(url).path,
        "traffic_source": source,
        "country": "UNKNOWN" if country is None else country.upper(),
        "ts": record.get("ts"),
        "duration_ms": duration,
        "engaged": duration >= 10_000,
    }


def enriched_rows(data: Iterable[Mapping[str, Any]], threshold: int) -> Counter[str]:
    rows = (enriched(r, threshold) for r in data)
    return Counter(canonical(r) for r in rows if r is not None)


def views_per_user(data: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    table: dict[str, dict[str, Any]] = {}
    for record in data:
        user = record.get("user_id")
        if user is None:
            continue
        row = table.setdefault(
            user, {"user_id": user, "views": 0, "total_duration_ms": None, "last_seen": None}
        )
        row["views"] += 1
        if record.get("duration_ms") is not None:
            row["total_duration_ms"] = (row["total_duration_ms"] or 0) + record["duration_ms"]
        if record.get("ts") is not None:
            seen = millis(record["ts"])
            row["last_seen"] = seen if row["last_seen"] is None else max(row["last_seen"], seen)
    return {user: canonical(row) for user, row in table.items()}


def views_per_country(rows: Counter[str]) -> dict[str, str]:
    table: dict[str, dict[str, Any]] = {}
    for text, times in rows.items():
        row = json.loads(text)
        found = table.setdefault(
            row["country"],
            {"country": row["country"], "views": 0, "engaged_views": 0, "external_views": 0},
        )
        found["views"] += times
        found["engaged_views"] += times * int(row["engaged"])
        found["external_views"] += times * int(row["traffic_source"] == "external")
    return {country: canonical(row) for country, row in table.items()}


# What the topics hold ----------------------------------------------------------------------


def read_topic(topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every committed record of `topic` up to its end offsets now."""
    settings = {
        "group.id": "distributary-e2e-check",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    }
    consumer = Consumer(kafka(**settings))
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        if metadata.error is not None:
            raise SystemExit(f"topic {topic}: {metadata.error}")
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in metadata.partitions
        }
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(pending)])
        found: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + READ_TIMEOUT
        while pending:
            if time.monotonic() > deadline:
                raise SystemExit(f"topic {topic}: partitions {sorted(pending)} not read in time")
            for message in consumer.consume(500, 1.0):
                if message.error() is not None:
                    raise SystemExit(f"reading {topic}: {message.error()}")
                partition, offset = message.partition() or 0, message.offset() or 0
                if offset < ends[partition]:
                    found.append((message.key(), message.value()))
            # A transaction's commit marker takes the last offset but is no record: a
            # partition is done when the consumer's position reaches its end.
            for tp in consumer.position([TopicPartition(topic, p) for p in sorted(pending)]):
                if tp.offset >= ends[tp.partition]:
                    pending.discard(tp.partition)
        return found
    finally:
        consumer.close()


def table(reads: Iterable[tuple[bytes | None, bytes | None]], key: str) -> dict[str, str]:
    """An upsert topic as a table: the latest row per record key, tombstoned keys removed,
    keyed by the row's `key` column."""
    latest: dict[bytes | None, bytes | None] = {}
    for record_key, value in reads:
        latest[record_key] = value
    rows = (json.loads(v) for v in latest.values() if v is not None)
    return {str(row[key]): canonical(row) for row in rows}


def rows_difference(expected: Counter[Any], found: Counter[Any], what: str) -> str | None:
    missing, extra = expected - found, found - expected
    if not missing and not extra:
        return None
    return (
        f"{what}: {sum(missing.values())} row(s) missing, e.g. {list(missing)[:2]}; "
        f"{sum(extra.values())} row(s) too many, e.g. {list(extra)[:2]}"
    )


def table_difference(
    expected: Mapping[str, str], found: Mapping[str, str], what: str
) -> str | None:
    wrong = {k: (expected.get(k), found.get(k)) for k in {*expected, *found}}
    wrong = {k: v for k, v in wrong.items() if v[0] != v[1]}
    if not wrong:
        return None
    shown = "; ".join(f"{k}: expected {e}, found {f}" for k, (e, f) in sorted(wrong.items())[:3])
    return f"{what}: {len(wrong)} of {len(expected)} row(s) differ: {shown}"


def check(data: list[dict[str, Any]], threshold: int, topics: Mapping[str, str]) -> list[str]:
    """What differs between the serving topics and what `data` implies; [] when nothing."""
    rows = enriched_rows(data, threshold)
    found_rows = Counter(
        canonical(json.loads(v)) for _, v in read_topic(topics["enriched"]) if v is not None
    )
    per_user = table(read_topic(topics["per_user"]), "user_id")
    per_country = table(read_topic(topics["per_country"]), "country")
    problems = [
        rows_difference(rows, found_rows, topics["enriched"]),
        table_difference(views_per_user(data), per_user, topics["per_user"]),
        table_difference(views_per_country(rows), per_country, topics["per_country"]),
    ]
    say(
        f"{topics['enriched']}: {sum(found_rows.values())} rows (filter duration_ms >= "
        f"{threshold}); {topics['per_user']}: {len(per_user)} users; {topics['per_country']}: "
        f"{len(per_country)} countries"
    )
    return [p for p in problems if p]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="clicks.py", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["produce", "check"])
    parser.add_argument("--folder", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args(argv)
    data_file = args.folder / "page-views.jsonl"
    if args.command == "produce":
        topic = os.environ["PAGE_VIEWS_TOPIC"]
        count = produce(args.folder / "logs.yaml", data_file, topic)
        say(f"appended {count} page views to {topic}")
        return 0
    topics = {
        "enriched": os.environ["ENRICHED_TOPIC"],
        "per_user": os.environ["PER_USER_TOPIC"],
        "per_country": os.environ["PER_COUNTRY_TOPIC"],
    }
    problems = check(records(data_file), int(os.environ["THRESHOLD"]), topics)
    for problem in problems:
        say(f"DIFFERS {problem}")
    if not problems:
        say("every output is exactly what the input implies")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
