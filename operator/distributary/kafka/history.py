"""Whether the inputs of a reprocessing revision still hold their whole history.

A reprocess reads its inputs from the start. Two things remove records from a topic's history:
retention, which moves a partition's first offset above 0, and compaction, which leaves the
latest record of each key and removes older ones, leaving gaps in the offsets. Retention is read
from the first offsets alone. Compaction is looked for only in topics whose `cleanup.policy`
compacts: the first records of each partition are read from its head, where the cleaner works
first, and a gap in their offsets is the sign. The operator and `distributary run` both ask
here before they start a reprocessing revision; the planner decides what follows
(`plan.revisions.lifecycle`: refused unless the spec allows partial history).

A Source's table Log is not looked at for compaction: it is a table whose history begins with a
snapshot (the latest row of each key, which is what compaction keeps), and it is written with
Kafka transactions, whose commit markers take offsets that read as gaps.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.records import TopicReader
from distributary.plan.revisions.positions import compacted_history, lost_history, split_watermarks

HEAD_SAMPLE = 10_000  # records read from the head of each partition of a compacted input


def lost_input_history(
    admin: KafkaAdmin,
    topics: Mapping[str, str],
    client: Mapping[str, str] | None = None,
    sample: int = HEAD_SAMPLE,
    tables: Collection[str] = (),
) -> str | None:
    """Why reading `topics` (topic -> log) from the start would miss records, None when nothing
    is missing. `client` adds librdkafka settings (TLS, SASL) for reading compacted heads;
    `tables` names the Logs that are a Source's tables (retention alone is checked there).
    Raises `KafkaAdminError` or `RecordsError` when Kafka does not answer."""
    starts, ends = split_watermarks(admin.watermarks(topics))
    lost = lost_history(starts, topics)
    if lost is not None:
        return lost
    compacted = {}
    for topic, log in topics.items():
        if log in tables:
            continue
        observed = admin.describe_topic(topic)
        policy = observed.configs.get("cleanup.policy", "") if observed else ""
        if "compact" in policy:
            compacted[topic] = log
    if not compacted:
        return None
    read = {}
    with TopicReader(admin.bootstrap_servers, client=client) as reader:
        for topic in sorted(compacted):
            heads = {
                partition: (first, min(ends[topic][partition], first + sample))
                for partition, first in starts[topic].items()
                if ends[topic][partition] > first
            }
            read[topic] = reader.offsets(topic, heads)
    return compacted_history(read, starts, compacted)
