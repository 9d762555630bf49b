"""A Redis Sink's cutover against a real Redis: a new revision's keys are filled beside the
readers' ones and switched to in one script.

Driven through the store itself (no Kafka, no Spark), so each step is checked where it happens:
while the new revision fills, readers' keys and the position `wait` reads are unchanged, a Sink
started again carries on filling beside, a replayed batch changes nothing; the switch replaces
every reader key at once (new values, keys the new revision does not hold removed, TTLs kept),
drops the previous revision's position and leaves nothing beside; a second switch does nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from distributary.devtools.redis import RedisServer
from distributary.kafka.records import Record
from distributary.plan.sinks.sink_plan import SinkRun
from distributary.sinks.redis import RedisStore

PREFIX = "rs:"


def _run(port: int, topic: str, ttl: int | None = None) -> SinkRun:
    return SinkRun(name="default/rs-cache", group="g", bootstrap_servers="unused:9092",
                   topic=topic, columns=[("user", "STRING"), ("n", "INT")], key=["user"],
                   store="redis", host="127.0.0.1", port=port, key_prefix=PREFIX,
                   ttl_seconds=ttl)  # fmt: skip


def _records(topic: str, rows: list[tuple[str, int]], first: int = 0) -> list[Record]:
    return [
        Record(topic, 0, first + i, 0, json.dumps({"user": u}).encode(),
               json.dumps({"user": u, "n": n}).encode())
        for i, (u, n) in enumerate(rows)
    ]  # fmt: skip


def _readers_see(client: redis.Redis) -> dict[str, int]:
    return {
        k.decode()[len(PREFIX) :]: json.loads(client.get(k) or b"{}")["n"]
        for k in client.scan_iter(match=f"{PREFIX}*")
    }


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    connection = redis.Redis(host="127.0.0.1", port=redis_server.port)
    yield connection
    for pattern in (f"{PREFIX}*", "distributary:*rs-cache*"):
        for key in connection.scan_iter(match=pattern):
            connection.delete(key)
    connection.close()


def test_a_new_revision_fills_beside_and_switches_at_once(
    redis_server: RedisServer, client: redis.Redis
) -> None:
    first = RedisStore(_run(redis_server.port, "rs.r1", ttl=600))
    assert not first.filling
    first.apply(_records("rs.r1", [("a", 1), ("b", 2), ("gone", 3)]))
    assert first.switch() is None  # nothing beside
    first.close()
    before = _readers_see(client)
    assert before == {"a": 1, "b": 2, "gone": 3}

    second = RedisStore(_run(redis_server.port, "rs.r2", ttl=600))
    assert second.filling
    batch = _records("rs.r2", [("a", 10), ("b", 20)])
    assert second.apply(batch) == 2
    assert second.apply(batch) == 0  # replayed: skipped
    assert _readers_see(client) == before  # readers see revision 1, whole
    assert second.reader_positions() == {}  # `wait` counts nothing of revision 2 yet
    second.close()

    again = RedisStore(_run(redis_server.port, "rs.r2", ttl=600))  # killed and started again
    assert again.filling
    assert again.positions() == {0: 2}
    again.apply(_records("rs.r2", [("c", 30)], first=2))
    assert _readers_see(client) == before
    said = again.switch()
    assert said is not None
    assert "3 keys" in said
    assert "1 that it does not hold removed" in said
    assert _readers_see(client) == {"a": 10, "b": 20, "c": 30}
    assert not again.filling
    assert again.reader_positions() == {0: 3}
    assert 0 < client.ttl(f"{PREFIX}a") <= 600  # renamed with its TTL
    assert list(client.scan_iter(match="distributary:beside:*")) == []
    positions = sorted(k.decode() for k in client.scan_iter(match="distributary:sink:*rs-cache*"))
    assert positions == ["distributary:sink:default/rs-cache:rs.r2"]
    assert again.switch() is None
    again.apply(_records("rs.r2", [("a", 11)], first=3))  # writes the readers' keys now
    assert _readers_see(client)["a"] == 11
    again.close()
    assert not RedisStore(_run(redis_server.port, "rs.r2")).filling
