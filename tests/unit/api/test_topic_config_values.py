"""Topic config values are checked against the type and range Kafka declares for each key."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api import ResourceError, parse_resource
from distributary.api.common import GROUP_VERSION
from distributary.api.log import KAFKA_TOPIC_CONFIGS, MANAGED_TOPIC_CONFIGS
from distributary.api.topic_configs import TOPIC_CONFIG_TYPES


def _parse(config: dict[str, Any]) -> None:
    parse_resource(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "Log",
            "metadata": {"name": "clicks"},
            "spec": {"config": config},
        }
    )


def test_every_config_a_log_may_set_has_a_type() -> None:
    assert set(TOPIC_CONFIG_TYPES) == KAFKA_TOPIC_CONFIGS - set(MANAGED_TOPIC_CONFIGS)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("min.insync.replicas", 0),
        ("min.insync.replicas", "two"),
        ("min.insync.replicas", 2**31),
        ("segment.bytes", 13),
        ("segment.bytes", "1Gi"),
        ("max.message.bytes", -1),
        ("segment.ms", 0),
        ("delete.retention.ms", "-5"),
        ("local.retention.ms", -3),
        ("flush.messages", 0),
        ("max.compaction.lag.ms", "9223372036854775808"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "half"),
        ("compression.type", "brotli"),
        ("compression.gzip.level", 10),
        ("compression.lz4.level", 18),
        ("compression.zstd.level", 23),
        ("message.timestamp.type", "createtime"),
        ("preallocate", "yes"),
        ("unclean.leader.election.enable", 1),
        ("leader.replication.throttled.replicas", "0-101"),
    ],
)
def test_a_value_kafka_refuses_is_refused_naming_key_value_and_range(key: str, value: Any) -> None:
    with pytest.raises(ResourceError) as caught:
        _parse({key: value})
    (problem,) = caught.value.problems
    assert problem.startswith(f"spec: config {key}: {value!r} is not ")
    assert problem.endswith("as Kafka requires")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("min.insync.replicas", 2),
        ("min.insync.replicas", "2"),
        ("segment.bytes", 14),
        ("segment.bytes", 2**31 - 1),
        ("segment.ms", "604800000"),
        ("local.retention.bytes", -2),
        ("max.compaction.lag.ms", "9223372036854775807"),
        ("min.cleanable.dirty.ratio", "0.5"),
        ("min.cleanable.dirty.ratio", 1),
        ("compression.type", "zstd"),
        ("compression.gzip.level", -1),
        ("compression.gzip.level", "9"),
        ("compression.zstd.level", -131072),
        ("message.timestamp.type", "LogAppendTime"),
        ("preallocate", "true"),
        ("remote.storage.enable", "False"),
        ("leader.replication.throttled.replicas", "*"),
        ("follower.replication.throttled.replicas", "0:101,1:102"),
    ],
)
def test_a_value_within_kafkas_type_and_range_is_accepted(key: str, value: Any) -> None:
    _parse({key: value})
