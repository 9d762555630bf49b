"""A Sink into Redis: a key per record key, holding the key's latest record as JSON, exactly once.

Each poll's records and the position they end at are written in one MULTI/EXEC, guarded by a
WATCH on the position (a hash `distributary:sink:<sink>:<topic>`, partition -> next offset): the
keys and the position change together or not at all, and records before the position are
skipped. A tombstone, or a record whose `__deleted` is true, deletes its key; with a TTL each key
expires that long after its last write (a cache that forgets what is not read again).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import redis

from distributary.kafka.records import Record
from distributary.plan.sink_plan import DELETED_COLUMN, SinkRun


def offsets_key(run: SinkRun) -> str:
    """The hash holding the Sink's position."""
    return f"distributary:sink:{run.name}:{run.topic}"


def redis_key(run: SinkRun, key: bytes | None) -> str:
    """The Redis key of a record key: the prefix and the key's values joined by ':'."""
    values = json.loads(key) if key else {}
    if isinstance(values, dict):
        names = run.key or list(values)
        parts = [str(values.get(n)) for n in names]
    else:
        parts = [str(values)]
    return run.key_prefix + ":".join(parts)


class RedisStore:
    """A Redis database and the Sink's position in it."""

    def __init__(self, run: SinkRun) -> None:
        self.run = run
        password = (
            Path(run.password_file).read_text("utf-8").rstrip("\n") if run.password_file else None
        )
        self.client = redis.Redis(
            host=run.host, port=run.port, db=run.redis_database, password=password,
            socket_timeout=30, socket_connect_timeout=10,
        )  # fmt: skip
        self.client.ping()

    filling = False  # keys are switched by no transaction: a new revision stalls the Sink

    def switch(self) -> str | None:
        """Nothing to switch (see `filling`)."""
        return None

    def positions(self) -> dict[int, int]:
        """The committed position per partition."""
        found = self.client.hgetall(offsets_key(self.run))
        return {int(p): int(o) for p, o in found.items()}

    def apply(self, records: Sequence[Record]) -> int:
        """Apply records and move the position in one MULTI/EXEC; the records applied."""
        key = offsets_key(self.run)
        with self.client.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)  # type: ignore[no-untyped-call]
                    committed = {int(p): int(o) for p, o in pipe.hgetall(key).items()}
                    fresh = [r for r in records if r.offset >= committed.get(r.partition, 0)]
                    if not fresh:
                        pipe.unwatch()
                        return 0
                    pipe.multi()
                    self._write(pipe, fresh)
                    ends: dict[int, int] = {}
                    for record in fresh:
                        ends[record.partition] = max(
                            ends.get(record.partition, 0), record.offset + 1
                        )
                    pipe.hset(key, mapping={str(p): str(o) for p, o in ends.items()})
                    pipe.execute()
                    return len(fresh)
                except redis.WatchError:
                    continue  # another process of this Sink moved the position: look again

    def _write(self, pipe: redis.client.Pipeline, records: Sequence[Record]) -> None:
        latest: dict[bytes, Record] = {}
        for record in records:
            latest[record.key or b""] = record
        for raw_key, record in latest.items():
            name = redis_key(self.run, raw_key)
            value = json.loads(record.value) if record.value is not None else None
            if value is None or value.get(DELETED_COLUMN) in (True, "true"):
                pipe.delete(name)
                continue
            value.pop(DELETED_COLUMN, None)
            text = json.dumps(value, separators=(",", ":"))
            if self.run.ttl_seconds:
                pipe.set(name, text, ex=self.run.ttl_seconds)
            else:
                pipe.set(name, text)

    def close(self) -> None:
        """Close the connection."""
        self.client.close()
