"""The progress topic: where runners publish each revision's last batch and state.

A compacted topic keyed by revision (`plan.revisions.progress.progress_key`), so its latest record
per key is the revision's current progress and a reader that starts from the beginning sees every
revision's state at once. The runner writes it; the local loop and the operator read it, the same
way whether the runner is a local process or a driver pod.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from distributary.kafka.cluster import client_config


class ProgressPublisher:
    """Publishes progress records; a missing topic costs a warning once, never the query."""

    def __init__(
        self, bootstrap_servers: str, topic: str, client: Mapping[str, str] | None = None
    ) -> None:
        self.topic = topic
        settings: dict[str, str | int | float | bool] = {**(client or {}), "linger.ms": 50}
        self._producer = Producer(client_config(bootstrap_servers, **settings))
        self._warned = False

    def _delivered(self, error: KafkaError | None, _message: Any) -> None:
        if error is not None and not self._warned:
            self._warned = True
            print(
                f"warning: progress cannot be published to topic {self.topic!r}: {error.str()}; "
                "positions are still committed to the consumer groups",
                file=sys.stderr,
            )

    def publish(self, key: str, record: Mapping[str, Any]) -> None:
        """Send one progress record (asynchronously; `flush` waits for delivery)."""
        try:
            self._producer.produce(
                self.topic,
                key=key.encode(),
                value=json.dumps(record, separators=(",", ":")).encode(),
                on_delivery=self._delivered,
            )
        except (BufferError, KafkaException) as exc:
            self._delivered(KafkaError(KafkaError._FAIL, str(exc)), None)
        self._producer.poll(0)

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until every record sent so far is delivered (or `timeout` passes)."""
        self._producer.flush(timeout)


class ProgressReader:
    """Keeps the latest progress record of every revision, reading the topic from its start."""

    def __init__(
        self, bootstrap_servers: str, topic: str, client: Mapping[str, str] | None = None
    ) -> None:
        self.topic = topic
        self.latest: dict[str, dict[str, Any]] = {}
        settings: dict[str, str | int | float | bool] = {
            **(client or {}),
            "group.id": "distributary.progress",
            "enable.auto.commit": False,
        }
        self._consumer = Consumer(client_config(bootstrap_servers, **settings))
        self._assigned = False

    def _assign(self) -> bool:
        metadata = self._consumer.list_topics(self.topic, timeout=5)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            return False
        self._consumer.assign([TopicPartition(self.topic, p, 0) for p in topic.partitions])
        self._assigned = True
        return True

    def poll(self, timeout: float = 0.2, limit: int = 10_000) -> dict[str, dict[str, Any]]:
        """Read what arrived since the last call and return the latest record per revision."""
        if not self._assigned and not self._assign():
            return self.latest
        for message in self._consumer.consume(limit, timeout):
            if message.error() is not None:
                continue
            value, raw_key = message.value(), message.key()
            if raw_key is None:
                continue
            key = raw_key.decode()
            if value is None:
                self.latest.pop(key, None)
                continue
            try:
                self.latest[key] = json.loads(value)
            except ValueError:
                continue
        return self.latest

    def close(self) -> None:
        """Leave the topic."""
        self._consumer.close()
