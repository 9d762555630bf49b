"""`distributary run` asks Kafka each question once a round: a group's offsets and a topic's
watermarks read again in the same round come from the first answer, and anything the run changes
itself, or a new round, asks again."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.rounds import RoundAdmin
from distributary.plan.kafka_topics.topics import CreateTopic
from distributary.plan.revisions.positions import Offsets, Watermarks


class Kafka:
    """What the admin client would answer, and what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Any]] = []
        self.offsets: dict[str, Offsets] = {"g": {"t": {0: 5}}}
        self.ends: dict[str, int] = {"t": 7, "u": 3}

    def committed(self, _admin: KafkaAdmin, group: str) -> Offsets:
        self.asked.append(("committed", group))
        return {t: dict(p) for t, p in self.offsets.get(group, {}).items()}

    def watermarks(self, _admin: KafkaAdmin, topics: Any) -> Watermarks:
        wanted = sorted(topics)
        self.asked.append(("watermarks", wanted))
        return {t: {0: (0, self.ends[t])} for t in wanted}

    def commit(self, _admin: KafkaAdmin, group: str, offsets: Offsets, metadata: str = "") -> None:
        self.asked.append(("commit", group))
        self.offsets[group] = offsets

    def create_topics(self, _admin: KafkaAdmin, actions: Any) -> dict[str, Any]:
        self.asked.append(("create", [a.name for a in actions]))
        return {}


@pytest.fixture
def kafka(monkeypatch: pytest.MonkeyPatch) -> Kafka:
    fake = Kafka()
    for name in ("committed", "watermarks", "commit", "create_topics"):
        method = getattr(fake, name)
        monkeypatch.setattr(KafkaAdmin, name, lambda self, *a, _m=method, **k: _m(self, *a, **k))
    return fake


def test_a_round_asks_each_group_and_topic_once(kafka: Kafka) -> None:
    admin = RoundAdmin("127.0.0.1:1")
    assert admin.committed("g") == {"t": {0: 5}}
    assert admin.committed("g") == {"t": {0: 5}}
    assert admin.watermarks(["t"]) == {"t": {0: (0, 7)}}
    assert admin.watermarks(["u", "t"]) == {"t": {0: (0, 7)}, "u": {0: (0, 3)}}
    assert admin.end_offsets(["t", "u"]) == {"t": {0: 7}, "u": {0: 3}}
    assert kafka.asked == [("committed", "g"), ("watermarks", ["t"]), ("watermarks", ["u"])]


def test_a_new_round_asks_again_and_sees_what_changed(kafka: Kafka) -> None:
    admin = RoundAdmin("127.0.0.1:1")
    admin.committed("g")
    admin.watermarks(["t"])
    kafka.offsets["g"] = {"t": {0: 6}}  # Spark committed meanwhile
    kafka.ends["t"] = 9
    assert admin.committed("g") == {"t": {0: 5}}  # the same round: the first answer
    admin.new_round()
    assert admin.committed("g") == {"t": {0: 6}}
    assert admin.watermarks(["t"]) == {"t": {0: (0, 9)}}
    assert len(kafka.asked) == 4


def test_what_the_run_changes_itself_is_read_back_in_the_same_round(kafka: Kafka) -> None:
    admin = RoundAdmin("127.0.0.1:1")
    admin.committed("g")
    admin.watermarks(["t"])
    admin.commit("g", {"t": {0: 0}})  # a rewind
    assert admin.committed("g") == {"t": {0: 0}}
    kafka.ends["t"] = 0
    admin.create_topics([CreateTopic("t2", 1, None, {})])
    assert admin.watermarks(["t"]) == {"t": {0: (0, 0)}}


def test_an_answer_handed_out_cannot_change_the_kept_one(kafka: Kafka) -> None:
    admin = RoundAdmin("127.0.0.1:1")
    for _ in range(2):  # the answer from Kafka, then the kept one
        admin.committed("g")["t"][0] = 99
        admin.watermarks(["t"])["t"][0] = (1, 1)
    assert admin.committed("g") == {"t": {0: 5}}
    assert admin.watermarks(["t"]) == {"t": {0: (0, 7)}}
