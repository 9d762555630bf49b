"""How a Log spec maps onto Kafka topic configs."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api.log import LogSpec, Retention, quantity_bytes


def _configs(**spec: Any) -> dict[str, str]:
    return LogSpec.model_validate(spec).topic_configs()


def test_a_plain_log_asks_for_no_config_and_leaves_broker_defaults() -> None:
    assert _configs() == {}


@pytest.mark.parametrize(
    ("time", "ms"),
    [
        ("500ms", "500"),
        ("30s", "30000"),
        ("5m", "300000"),
        ("2h", "7200000"),
        ("7d", "604800000"),
        ("1w", "604800000"),
    ],
)
def test_retention_time_becomes_retention_ms(time: str, ms: str) -> None:
    assert _configs(retention={"time": time}) == {"retention.ms": ms}


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (1073741824, "1073741824"),
        ("10Gi", "10737418240"),
        ("1G", "1000000000"),
        ("500Mi", "524288000"),
        ("2048", "2048"),
    ],
)
def test_retention_bytes_becomes_retention_bytes(size: int | str, expected: str) -> None:
    assert _configs(retention={"bytes": size}) == {"retention.bytes": expected}


def test_retention_forever_disables_both_limits() -> None:
    assert _configs(retention={"forever": True}) == {"retention.ms": "-1", "retention.bytes": "-1"}


def test_compaction_alone_compacts_and_deletes_nothing() -> None:
    assert _configs(compaction=True) == {"cleanup.policy": "compact"}


@pytest.mark.parametrize("retention", [{"time": "7d"}, {"bytes": "1Gi"}])
def test_compaction_with_a_retention_limit_also_deletes(retention: dict[str, Any]) -> None:
    configs = _configs(compaction=True, retention=retention)
    assert configs["cleanup.policy"] == "compact,delete"


def test_compaction_with_retention_forever_only_compacts() -> None:
    configs = _configs(compaction=True, retention={"forever": True})
    assert configs == {"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1"}


def test_extra_configs_are_passed_as_kafka_strings() -> None:
    configs = _configs(
        config={"min.insync.replicas": 2, "compression.type": "zstd"}, retention={"time": "1h"}
    )
    assert configs == {
        "min.insync.replicas": "2",
        "compression.type": "zstd",
        "retention.ms": "3600000",
    }


def test_an_empty_retention_asks_for_nothing() -> None:
    assert Retention().topic_configs() == {}


def test_a_size_in_the_wrong_form_is_explained() -> None:
    with pytest.raises(ValueError, match="not a size: write bytes, or a number with Ki, Mi"):
        quantity_bytes("ten")
