"""A `KafkaAdmin` that reads each group's offsets and each topic's watermarks once per round.

`distributary run` goes round after round, every second: it reconciles every view and job (each
reads its groups' committed offsets and its inputs' watermarks) and then reads the pipeline's
positions again for the live table. Within one round those are the same questions a few
milliseconds apart, and asking Kafka twice doubled the requests an idle run makes (about 20 a
second with two views). `RoundAdmin` answers a question asked again in the same round from the
first answer, and forgets every answer when a round starts and whenever it changes anything
itself (commits, deletes a group or a topic, makes or alters a topic), so a reconcile reads what
it has just written. What Spark commits meanwhile is seen in the next round, a second later, as
it would have been if the round had asked a moment sooner.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.plan.kafka_topics.topics import AlterConfigs, CreateTopic
from distributary.plan.revisions.positions import Offsets, Watermarks


class RoundAdmin(KafkaAdmin):
    """`KafkaAdmin` with the reads of one round kept until the next (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._groups: dict[str, Offsets] = {}
        self._marks: Watermarks = {}

    def new_round(self) -> None:
        """Forget every answer: the next questions go to Kafka."""
        with self._lock:
            self._groups.clear()
            self._marks.clear()

    def committed(self, group: str) -> Offsets:
        """The group's committed offsets, read once per round."""
        with self._lock:
            known = self._groups.get(group)
        if known is not None:
            return {topic: dict(parts) for topic, parts in known.items()}
        offsets = super().committed(group)
        with self._lock:
            self._groups[group] = {topic: dict(parts) for topic, parts in offsets.items()}
        return offsets

    def watermarks(self, topics: Iterable[str]) -> Watermarks:
        """Each topic's watermarks, the ones not read yet this round in one question."""
        wanted = sorted(set(topics))
        with self._lock:
            missing = [topic for topic in wanted if topic not in self._marks]
        if missing:
            read = super().watermarks(missing)
            with self._lock:
                self._marks.update(read)
        with self._lock:
            return {topic: dict(self._marks[topic]) for topic in wanted if topic in self._marks}

    # Whatever changes offsets, groups or topics forgets the round's answers first.

    def commit(self, group: str, offsets: Offsets, metadata: str = "") -> None:
        """`KafkaAdmin.commit`, after forgetting the round's answers."""
        self.new_round()
        super().commit(group, offsets, metadata)

    def delete_group(self, group: str) -> None:
        """`KafkaAdmin.delete_group`, after forgetting the round's answers."""
        self.new_round()
        super().delete_group(group)

    def delete_topic(self, topic: str) -> None:
        """`KafkaAdmin.delete_topic`, after forgetting the round's answers."""
        self.new_round()
        super().delete_topic(topic)

    def create_topic(self, action: CreateTopic) -> None:
        """`KafkaAdmin.create_topic`, after forgetting the round's answers."""
        self.new_round()
        super().create_topic(action)

    def create_topics(self, actions: Iterable[CreateTopic]) -> dict[str, KafkaAdminError | None]:
        """`KafkaAdmin.create_topics`, after forgetting the round's answers."""
        self.new_round()
        return super().create_topics(actions)

    def add_partitions(self, topic: str, total: int) -> None:
        """`KafkaAdmin.add_partitions`, after forgetting the round's answers."""
        self.new_round()
        super().add_partitions(topic, total)

    def alter_configs(self, topic: str, change: AlterConfigs) -> None:
        """`KafkaAdmin.alter_configs`, after forgetting the round's answers."""
        self.new_round()
        super().alter_configs(topic, change)
