"""A record is checked against its Log's Spark DDL schema; every problem names its field."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from distributary.schema import RecordSchema, check_lines, parse_record, parse_type


def problems(ddl: str, record: Any) -> list[str]:
    return [str(p) for p in RecordSchema.parse(ddl).check(record)]


def one(ddl: str, text: str) -> list[str]:
    return problems(ddl, parse_record(text))


@pytest.mark.parametrize(
    ("ddl", "good"),
    [
        ("v STRING", '"abc"'),
        ("v INT", "-2147483648"),
        ("v INT", "2147483647"),
        ("v BIGINT", "9223372036854775807"),
        ("v SMALLINT", "-32768"),
        ("v TINYINT", "127"),
        ("v DOUBLE", "1.5e300"),
        ("v DOUBLE", "3"),
        ("v DOUBLE", '"NaN"'),
        ("v FLOAT", "-3.25"),
        ("v BOOLEAN", "false"),
        ("v TIMESTAMP", '"2025-05-01T12:30:00Z"'),
        ("v TIMESTAMP", '"2025-05-01 12:30:00.123456789+02:00"'),
        ("v TIMESTAMP", '"2025-05-01"'),
        ("v TIMESTAMP_NTZ", '"2025-05-01T12:30:00"'),
        ("v DATE", '"2024-02-29"'),
        ("v DECIMAL(12, 2)", "1234567890.12"),
        ("v DECIMAL(12, 2)", '"19.90"'),
        ("v DECIMAL(12, 2)", "7"),
        ("v DECIMAL", "9999999999"),
        ("v BINARY", '"aGVsbG8="'),
        ("v VARCHAR(3)", '"abc"'),
        ("v ARRAY<INT>", "[1, 2, null]"),
        ("v MAP<STRING, DOUBLE>", '{"a": 1.5, "b": null}'),
        ("v STRUCT<a: INT, b: ARRAY<STRING>>", '{"a": 1, "b": ["x"]}'),
        ("v INT", "null"),
    ],
)
def test_a_value_of_the_declared_type_passes(ddl: str, good: str) -> None:
    assert one(ddl, '{"v": ' + good + "}") == []


@pytest.mark.parametrize(
    ("ddl", "bad", "message"),
    [
        ("v STRING", "12", "v: is the number 12, not STRING: write a string"),
        ("v INT", '"12"', 'v: is the string "12", not INT: write a whole number'),
        ("v INT", "1.0", "v: is the number 1.0, not INT"),
        ("v INT", "true", "v: is true, not INT"),
        ("v INT", "2147483648", "v: 2147483648 is out of range for INT"),
        ("v TINYINT", "128", "v: 128 is out of range for TINYINT"),
        ("v BIGINT", "9223372036854775808", "out of range for BIGINT"),
        ("v DOUBLE", '"1.5"', 'v: is the string "1.5", not DOUBLE: write a number'),
        ("v DOUBLE", "1e309", "out of range for DOUBLE"),
        ("v FLOAT", "1e39", "out of range for FLOAT"),
        ("v BOOLEAN", '"true"', 'v: is the string "true", not BOOLEAN: write true or false'),
        ("v BOOLEAN", "1", "v: is the number 1, not BOOLEAN"),
        ("v TIMESTAMP", '"yesterday"', "not TIMESTAMP: write an ISO 8601 string"),
        ("v TIMESTAMP", "1714566600", "v: is the number 1714566600, not TIMESTAMP"),
        ("v TIMESTAMP", '"2025-13-01T00:00:00Z"', "not TIMESTAMP"),
        ("v TIMESTAMP_NTZ", '"2025-05-01T12:30:00Z"', "without a zone"),
        ("v DATE", '"2025-02-30"', 'v: is the string "2025-02-30", not DATE'),
        ("v DATE", '"2025-05-01T00:00:00"', "not DATE"),
        (
            "v DECIMAL(12, 2)",
            "1.234",
            "v: 1.234 has 3 digits after the point; DECIMAL(12, 2) keeps 2",
        ),
        ("v DECIMAL(4, 2)", "123.4", "v: 123.4 is too large for DECIMAL(4, 2)"),
        ("v DECIMAL(12, 2)", '"twelve"', "not DECIMAL(12, 2): write a number"),
        ("v BINARY", '"not base64!"', "not BINARY: write a base64 string"),
        ("v VARCHAR(3)", '"abcd"', "v: is 4 characters long; VARCHAR(3) holds 3"),
        ("v ARRAY<INT>", '{"a": 1}', "v: is an object, not ARRAY<INT>: write a JSON array"),
        ("v ARRAY<INT>", '[1, "2"]', 'v[1]: is the string "2", not INT'),
        ("v MAP<STRING, INT>", '{"k": "x"}', 'v["k"]: is the string "x", not INT'),
        ("v STRUCT<a: INT>", "[1]", "v: is an array, not STRUCT<a: INT>: write a JSON object"),
        ("v STRUCT<a: INT>", '{"a": "1"}', 'v.a: is the string "1", not INT'),
        ("v STRUCT<a: INT>", '{"A": 1}', "v.A: is not a field of the struct (did you mean 'a'?)"),
    ],
)
def test_a_wrong_value_is_reported_with_its_field(ddl: str, bad: str, message: str) -> None:
    found = one(ddl, '{"v": ' + bad + "}")
    assert len(found) == 1, found
    assert message in found[0]


def test_an_unknown_column_is_reported_with_the_nearest_name() -> None:
    found = problems("user_id STRING, url STRING", {"userid": "u1", "url": "x"})
    assert found == [
        "userid: is not a column of the Log's schema (did you mean 'user_id'?): fix the name, "
        "or add it to the Log's spec.schema"
    ]


def test_missing_columns_are_null_and_pass() -> None:
    assert problems("user_id STRING, url STRING, n INT", {"url": "x"}) == []


def test_every_problem_of_a_record_is_reported() -> None:
    found = problems("a INT, b BOOLEAN, c DATE", {"a": "1", "b": 0, "c": 3})
    assert [p.split(":")[0] for p in found] == ["a", "b", "c"]


@pytest.mark.parametrize(("value", "shown"), [([1], "an array"), ("x", 'the string "x"')])
def test_a_record_that_is_not_an_object_is_refused(value: Any, shown: str) -> None:
    assert problems("a INT", value) == [f"is {shown}, not a JSON object: write one per line"]


def test_a_log_without_a_schema_takes_any_object() -> None:
    schema = RecordSchema.parse(None)
    assert not schema.checked
    assert schema.check({"anything": [1, {"x": None}]}) == []
    assert schema.check([1]) != []


def test_numbers_keep_the_digits_they_were_written_with() -> None:
    assert parse_record('{"a": 19.90}') == {"a": Decimal("19.90")}


def test_types_are_read_from_spark_ddl() -> None:
    decimal = parse_type("DECIMAL")
    assert (decimal.kind, decimal.size) == ("DECIMAL", (10, 0))
    struct = parse_type("STRUCT<`end`: TIMESTAMP, n: MAP<STRING, ARRAY<INT>>>")
    assert struct.names == ("end", "n")
    assert [p.kind for p in struct.parts] == ["TIMESTAMP", "MAP"]
    assert struct.parts[1].parts[1].parts[0].kind == "INT"
    assert (parse_type("VARCHAR(3)").kind, parse_type("VARCHAR(3)").size) == ("VARCHAR", (3,))
    assert parse_type("LONG").kind == "BIGINT"
    assert parse_type("STRING").kind == "STRING"


def test_lines_are_numbered_and_blank_lines_skipped() -> None:
    schema = RecordSchema.parse("a INT")
    lines = ['{"a": 1}\n', "\n", '{"a": "x"}\n', "{oops\n", "NaN\n", '{"a": 2}']
    checked = list(check_lines(lines, schema))
    assert [c.line for c in checked] == [1, 3, 4, 5, 6]
    assert [c.record for c in checked] == [{"a": 1}, None, None, None, {"a": 2}]
    assert checked[1].problems == (
        'a: is the string "x", not INT: write a whole number such as 42',
    )
    assert checked[2].problems[0].startswith("is not valid JSON: Expecting property name")
    assert "(column 2)" in checked[2].problems[0]
    assert checked[3].problems == (
        "is not valid JSON: NaN is not JSON: write null, or a string for a DOUBLE",
    )
