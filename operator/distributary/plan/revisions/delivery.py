"""Exactly-once output: which micro-batches a revision has written, kept beside its position.

An exactly-once revision writes each micro-batch in one Kafka transaction: the output records,
the dead letters of the batch's input range, and the batch's end offsets committed to the
revision's consumer group (the view's position). Each committed partition's metadata carries a
`Marker`: the Spark query (one per checkpoint) and the last batch written, and the dead letters
written so far by the revision. So the output, the dead letters and the position move together or
not at all, and a batch Spark replays after a crash (it wrote the transaction, then died before
its own commit log said so) is recognised by its id and skipped.

The batch's end offsets come from Spark's offset log (`offsets/<batch>` in the checkpoint), which
Spark writes before it runs the batch and replays unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from distributary.plan.revisions.positions import Offsets

MAX_METADATA = 4096  # bytes of metadata the broker keeps per committed partition by default


@dataclass(frozen=True)
class Marker:
    """What a revision's last transaction recorded: the Spark query (its checkpoint's id), the
    batch it wrote last, and the dead letters the revision has written in all."""

    query: str | None = None
    batch: int = -1
    dead_letters: int = 0

    def text(self) -> str:
        """The marker as committed-offset metadata."""
        text = json.dumps(
            {"query": self.query, "batch": self.batch, "deadLetters": self.dead_letters},
            separators=(",", ":"),
        )
        assert len(text) < MAX_METADATA
        return text

    def written(self, query: str, batch: int) -> bool:
        """Whether batch `batch` of query `query` was written already (a replay to skip)."""
        return self.query == query and batch <= self.batch

    def after(self, query: str, batch: int, dead_letters: int) -> Marker:
        """The marker once batch `batch` of `query`, with `dead_letters` more, is written."""
        return Marker(query, batch, self.dead_letters + dead_letters)


def read_marker(metadata: Iterable[str]) -> Marker:
    """The marker among a group's committed-offset metadata (one per partition; an exactly-once
    transaction writes the same on each). Metadata that is not a marker (offsets a rewind or an
    at-least-once run committed) carries nothing; the newest marker wins."""
    found = Marker()
    for text in metadata:
        try:
            item = json.loads(text)
        except ValueError:
            continue
        if not isinstance(item, dict) or not isinstance(item.get("batch"), int):
            continue
        query, letters = item.get("query"), item.get("deadLetters")
        marker = Marker(
            query if isinstance(query, str) else None,
            item["batch"],
            letters if isinstance(letters, int) else 0,
        )
        if (marker.dead_letters, marker.batch) > (found.dead_letters, found.batch):
            found = marker
    return found


def carried(marker: Marker) -> Marker:
    """What survives a move of the group that is not a batch (a rewind): the count of dead
    letters, not the batch, so the next run writes every batch it reads."""
    return Marker(dead_letters=marker.dead_letters)


def batch_end(offset_log: str) -> Offsets:
    """The end offsets of one micro-batch, from its entry in Spark's offset log: a version line,
    the batch's metadata, then one line per source (`{"topic": {"0": 12, ...}}`, or `-` for a
    source that has no offsets yet). Two sources reading one topic name the same offsets."""
    lines = offset_log.splitlines()
    if not lines or not lines[0].startswith("v"):
        raise ValueError(f"not a Spark offset log entry: {offset_log[:80]!r}")
    end: Offsets = {}
    for line in lines[2:]:
        line = line.strip()
        if not line or line == "-":
            continue
        try:
            decoded = json.loads(line)
        except ValueError:
            decoded = None
        if not isinstance(decoded, dict):
            raise ValueError(f"not Kafka source offsets in Spark's offset log: {line[:80]!r}")
        for topic, partitions in decoded.items():
            end.setdefault(topic, {}).update({int(p): int(o) for p, o in partitions.items()})
    return end
