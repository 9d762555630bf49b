"""A record's key is the JSON object of the Log's key columns; its value, the schema's columns."""

from __future__ import annotations

from decimal import Decimal

from distributary.api import parse_resource
from distributary.api.log import Log
from distributary.schema import RecordSchema, parse_record

PAGE_VIEWS = "user_id STRING, url STRING, ts TIMESTAMP, duration_ms INT"


def test_the_key_is_the_compact_json_object_of_the_key_columns_in_key_order() -> None:
    schema = RecordSchema.parse("a STRING, b INT, c STRING", key=["c", "a"])
    encoded = schema.encode({"a": "x", "b": 1, "c": "y"})
    assert encoded.key == b'{"c":"y","a":"x"}'


def test_the_value_holds_every_column_in_schema_order_with_nulls_for_missing_ones() -> None:
    schema = RecordSchema.parse(PAGE_VIEWS, key=["user_id"])
    encoded = schema.encode({"duration_ms": 12, "user_id": "u1"})
    assert encoded.value == b'{"user_id":"u1","url":null,"ts":null,"duration_ms":12}'
    assert encoded.key == b'{"user_id":"u1"}'


def test_a_null_key_column_is_kept_in_the_key() -> None:
    schema = RecordSchema.parse(PAGE_VIEWS, key=["user_id"])
    assert schema.encode({"user_id": None}).key == b'{"user_id":null}'


def test_a_log_without_key_columns_has_no_key() -> None:
    assert RecordSchema.parse(PAGE_VIEWS).encode({"user_id": "u"}).key is None


def test_key_columns_are_matched_to_the_schema_without_regard_to_case() -> None:
    schema = RecordSchema.parse("UserId STRING", key=["userid"])
    assert schema.encode({"UserId": "u1"}).key == b'{"userid":"u1"}'


def test_decimals_are_written_with_their_own_digits_and_text_is_utf8() -> None:
    schema = RecordSchema.parse("amount DECIMAL(12, 2), city STRING, tags ARRAY<DECIMAL(4, 1)>")
    record = parse_record('{"amount": 19.90, "city": "Zürich", "tags": [1.0, 2.5]}')
    assert schema.encode(record).value == (
        '{"amount":19.90,"city":"Zürich","tags":[1.0,2.5]}'.encode()
    )
    assert schema.encode({"amount": Decimal("1E+2")}).value.startswith(b'{"amount":1E+2,')


def test_a_log_without_a_schema_sends_the_record_as_it_is() -> None:
    schema = RecordSchema.parse(None, key=["id"])
    encoded = schema.encode({"id": 7, "extra": [True]})
    assert (encoded.key, encoded.value) == (b'{"id":7}', b'{"id":7,"extra":[true]}')


def test_the_format_of_a_log_comes_from_its_spec() -> None:
    log = parse_resource(
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": "orders"},
            "spec": {"schema": "order_id STRING, amount DECIMAL(12,2)", "key": ["order_id"]},
        }
    )
    assert isinstance(log, Log)
    schema = RecordSchema.of_log(log)
    assert [c.name for c in schema.columns] == ["order_id", "amount"]
    assert schema.key == ("order_id",)
    assert schema.types[1].size == (12, 2)
