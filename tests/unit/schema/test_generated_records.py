"""Made-up records are valid by construction, plausible, and the same for the same seed."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from distributary.schema import RecordSchema, generate_records, parse_record

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
EVERY_TYPE = (
    "user_id STRING, session_id STRING, country STRING, status STRING, url STRING, "
    "referrer STRING, n INT, big BIGINT, small SMALLINT, tiny TINYINT, duration_ms INT, "
    "score DOUBLE, ratio FLOAT, ok BOOLEAN, ts TIMESTAMP, local TIMESTAMP_NTZ, day DATE, "
    "amount DECIMAL(12, 2), whole DECIMAL(3, 0), tiny_dec DECIMAL(2, 2), blob BINARY, "
    "code VARCHAR(2), tags ARRAY<STRING>, attrs MAP<STRING, INT>, "
    "address STRUCT<city: STRING, zip: INT, points: ARRAY<DOUBLE>>"
)


def made(count: int, seed: int | None = 1, ddl: str = EVERY_TYPE) -> list[dict[str, object]]:
    return list(generate_records(RecordSchema.parse(ddl), count, seed=seed, now=NOW))


def test_made_up_records_are_valid_for_every_type() -> None:
    schema = RecordSchema.parse(EVERY_TYPE)
    records = made(300)
    assert len(records) == 300
    for record in records:
        assert schema.check(record) == []
        # and still valid once encoded and read back, as Kafka carries them
        assert schema.check(parse_record(schema.encode(record).value.decode())) == []


def test_the_same_seed_makes_the_same_records_and_another_seed_others() -> None:
    assert made(50, seed=7) == made(50, seed=7)
    assert made(50, seed=7) != made(50, seed=8)


def test_timestamps_rise_through_the_batch_to_now() -> None:
    stamps = [
        datetime.fromisoformat(str(r["ts"]).replace("Z", "+00:00"))
        for r in made(100, ddl="ts TIMESTAMP")
    ]
    assert all(NOW - timedelta(hours=1, seconds=1) <= s <= NOW for s in stamps)
    assert stamps[-1] > stamps[0] + timedelta(seconds=60)


def test_ids_and_words_repeat_so_aggregations_group() -> None:
    records = made(500, ddl="user_id STRING, country STRING, status STRING")
    users = Counter(r["user_id"] for r in records)
    assert len(users) <= 25
    assert max(users.values()) > 5
    assert {r["country"] for r in records} <= {"US", "DE", "FR", "GB", "IN", "BR", "JP", "CA"}
    assert "DELIVERED" in {r["status"] for r in records}


def test_numbers_are_non_negative_and_within_their_types() -> None:
    records = made(300, ddl="n INT, duration_ms INT, tiny TINYINT, amount DECIMAL(5, 2)")
    assert all(isinstance(r["n"], int) and 0 <= r["n"] <= 1000 for r in records)
    assert all(0 <= int(str(r["duration_ms"])) <= 60_000 for r in records)
    assert all(0 <= int(str(r["tiny"])) <= 100 for r in records)
    amounts = [r["amount"] for r in records]
    assert all(isinstance(a, Decimal) and a >= 0 and a.as_tuple().exponent == -2 for a in amounts)


def test_generated_values_encode_as_json() -> None:
    schema = RecordSchema.parse(EVERY_TYPE, key=["user_id"])
    for record in made(20):
        encoded = schema.encode(record)
        assert json.loads(encoded.value)["user_id"] == record["user_id"]
        assert (
            encoded.key
            == json.dumps({"user_id": record["user_id"]}, separators=(",", ":")).encode()
        )


def test_a_log_without_a_schema_cannot_be_made_up() -> None:
    with pytest.raises(ValueError, match=r"spec\.schema"):
        list(generate_records(RecordSchema.parse(None), 1))
