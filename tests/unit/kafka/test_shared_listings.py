"""Views created together share one listing of the cluster's topics and groups: each new view's
plan listed every topic of the cluster (1,600 and more) and every group, 300 times over, which
cost the broker and the operator more than the views' own work."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from distributary.kafka.admin import KafkaAdmin


class Client:
    """The admin client's listing of topics, slow as a cluster of thousands of topics makes it."""

    def __init__(self) -> None:
        self.listings = 0
        self.topics = {"a": None}

    def list_topics(self, timeout: float) -> Any:
        self.listings += 1
        time.sleep(0.05)
        return SimpleNamespace(topics=dict(self.topics))


def admin() -> tuple[KafkaAdmin, Client]:
    found = KafkaAdmin("127.0.0.1:1")
    client = Client()
    found._client = client  # type: ignore[assignment]
    return found, client


def test_callers_at_once_share_one_listing() -> None:
    kafka, client = admin()
    answers: list[set[str]] = []
    threads = [
        threading.Thread(target=lambda: answers.append(kafka.topic_names(10.0))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [{"a"}] * 8
    assert client.listings == 1


def test_a_listing_older_than_asked_for_is_not_used() -> None:
    kafka, client = admin()
    kafka.topic_names(10.0)
    client.topics["b"] = None
    assert kafka.topic_names(10.0) == {"a"}  # recent enough
    assert kafka.topic_names(0.01) == {"a", "b"}  # 50 ms old: too old
    assert kafka.topic_names() == {"a", "b"}  # no age given: always listed afresh
    assert client.listings == 3


def test_an_answer_is_the_callers_own() -> None:
    kafka, _ = admin()
    kafka.topic_names(10.0).add("mine")
    assert kafka.topic_names(10.0) == {"a"}
