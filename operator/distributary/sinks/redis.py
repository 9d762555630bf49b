"""A Sink into Redis: a key per record key, holding the key's latest record as JSON, exactly once.

Each poll's records and the position they end at are written in one MULTI/EXEC, guarded by a
WATCH on the position (a hash `distributary:sink:<sink>:<topic>`, partition -> next offset): the
keys and the position change together or not at all, and records before the position are
skipped. A tombstone, or a record whose `__deleted` is true, deletes its key; with a TTL each key
expires that long after its last write (a cache that forgets what is not read again).

A view's cutover: when the Log's topic is new to the cache (it holds the position of another
topic, the revision before), the Sink fills the new revision's keys beside the readers' ones,
under `distributary:beside:<sink>:<revision>:`, and once it has drained the topic switches readers
in one server-side script (`SWITCH`, atomic as a transaction is): the keys under the prefix that
the new revision does not hold go, the filled keys take their names (replacing the previous
values, each keeping its own TTL), and the previous revision's position goes. A reader sees the
revision before, whole, or the new one, whole; the script holds the server for as long as
renaming the keys takes (about a second per million keys). The Sink owns its prefix: keys under
it that the log does not hold are removed at a switch.
Standalone Redis only (a cluster cannot rename across slots).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import redis

from distributary.kafka.records import Record
from distributary.plan.sinks.sink_plan import DELETED_COLUMN, SinkRun, revision_label

OWN = "distributary:"  # the keys of Sinks' own (positions, revisions filled beside)

# Readers of the prefix switched to the keys filled beside, atomically (a script runs alone):
# ARGV = the prefix, the beside prefix, the pattern of the Sink's positions, its own position.
SWITCH = """
local prefix, beside, positions, own = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local function each(pattern, act)
  local cursor = "0"
  repeat
    local found = redis.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
    cursor = found[1]
    for _, key in ipairs(found[2]) do act(key) end
  until cursor == "0"
end
local dropped, moved = 0, 0
each(ARGV[5] .. "*", function(key)
  local own_key = string.sub(key, 1, #"distributary:") == "distributary:"
  if not own_key and redis.call("EXISTS", beside .. string.sub(key, #prefix + 1)) == 0 then
    dropped = dropped + redis.call("DEL", key)
  end
end)
each(ARGV[6] .. "*", function(key)
  if redis.call("EXISTS", key) == 1 then
    redis.call("RENAME", key, prefix .. string.sub(key, #beside + 1))
    moved = moved + 1
  end
end)
each(positions, function(key)
  if key ~= own then redis.call("DEL", key) end
end)
return {moved, dropped}
"""


def offsets_key(run: SinkRun, topic: str | None = None) -> str:
    """The hash holding the Sink's position in `topic` (its own by default)."""
    return f"{OWN}sink:{run.name}:{topic or run.topic}"


def beside_prefix(run: SinkRun) -> str:
    """Where a new revision's keys are filled beside the readers' ones until the switch."""
    return f"{OWN}beside:{run.name}:{revision_label(run.topic)}:"


def glob_escaped(text: str) -> str:
    """`text` matched literally by a SCAN pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def redis_key(run: SinkRun, key: bytes | None, prefix: str | None = None) -> str:
    """The Redis key of a record key: the prefix (the Sink's, unless given) and the key's
    values joined by ':'."""
    values = json.loads(key) if key else {}
    if isinstance(values, dict):
        names = run.key or list(values)
        parts = [str(values.get(n)) for n in names]
    else:
        parts = [str(values)]
    return (run.key_prefix if prefix is None else prefix) + ":".join(parts)


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
        # Whether it fills a new revision's keys beside the readers' ones.
        self.filling = bool(self._other_positions())

    def _other_positions(self) -> list[str]:
        """The position hashes of the Sink's other topics: the revisions before."""
        pattern = glob_escaped(f"{OWN}sink:{self.run.name}:") + "*"
        own = offsets_key(self.run)
        return sorted(
            name
            for raw in self.client.scan_iter(match=pattern, count=1000)
            if (name := raw.decode() if isinstance(raw, bytes) else str(raw)) != own
        )

    @property
    def prefix(self) -> str:
        """The prefix of the keys it writes now."""
        return beside_prefix(self.run) if self.filling else self.run.key_prefix

    def switch(self) -> str | None:
        """Switch readers of the prefix to the keys filled beside it (`SWITCH`); from then on
        the Sink writes the readers' keys. What was done, in words (None: nothing to switch)."""
        if not self.filling:
            return None
        run = self.run
        moved, dropped = self.client.eval(
            SWITCH,
            0,
            run.key_prefix,
            beside_prefix(run),
            glob_escaped(f"{OWN}sink:{run.name}:") + "*",
            offsets_key(run),
            glob_escaped(run.key_prefix),
            glob_escaped(beside_prefix(run)),
        )
        self.filling = False
        return (
            f"readers of {run.key_prefix}<key> now read the keys of {run.topic} "
            f"({moved} keys; {dropped} that it does not hold removed)"
        )

    def positions(self) -> dict[int, int]:
        """The committed position per partition."""
        found = self.client.hgetall(offsets_key(self.run))
        return {int(p): int(o) for p, o in found.items()}

    def reader_positions(self) -> dict[int, int]:
        """The position readers of the prefix see: none while the keys are filled beside."""
        return {} if self.filling else self.positions()

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
            name = redis_key(self.run, raw_key, self.prefix)
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
