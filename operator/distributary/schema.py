"""Records of a Log: checking them against its Spark DDL schema, encoding them, making them up.

The checks accept what the runner's Spark JSON parser reads into the declared type and nothing
that Spark would silently turn into null or change: a record that passes here is parsed by a
view as it was written. They are stricter than Spark where Spark guesses (a number for a
TIMESTAMP, a fraction rounded away by a DECIMAL, a field the schema does not have and Spark
drops), because a person producing records wants to hear about those. JSON numbers are read as
`Decimal`, so a value is checked, and sent, with the digits it was written with.

Encoding follows the record contract: the key is the compact JSON object of the Log's key columns
in the order the Log lists them, the value the compact JSON object of the schema's columns.

The generator makes records valid by construction, plausible enough for a demo: timestamps that
rise to "now", small sets of repeated ids and words (so aggregations group), non-negative numbers.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
import random
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError

from distributary.api.log import Log
from distributary.sql import DIALECT, Column, parse_ddl

# Spark DDL types ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SqlType:
    """A Spark type as the checks need it: its kind, its Spark spelling and its parts.

    `size` is (precision, scale) for DECIMAL and (length,) for CHAR and VARCHAR; `parts` holds an
    ARRAY's element type, a MAP's key and value types, or a STRUCT's field types (named `names`).
    """

    kind: str
    text: str
    size: tuple[int, ...] = ()
    parts: tuple[SqlType, ...] = ()
    names: tuple[str, ...] = ()


_KINDS = {"TEXT": "STRING", "TIMESTAMPTZ": "TIMESTAMP", "TIMESTAMPLTZ": "TIMESTAMP"}
_KINDS["TIMESTAMPNTZ"] = "TIMESTAMP_NTZ"


def parse_type(text: str) -> SqlType:
    """The type named by Spark DDL text such as `DECIMAL(12, 2)` or `ARRAY<STRING>`."""
    try:
        return _sql_type(exp.DataType.build(text, dialect=DIALECT))
    except (SqlglotError, ValueError):
        return SqlType("OTHER", text)  # Spark judges what sqlglot cannot read


def _sql_type(built: exp.DataType) -> SqlType:
    kind = _KINDS.get(built.this.name, built.this.name)
    text = built.sql(dialect=DIALECT)
    if kind == "STRUCT":
        fields = [e for e in built.expressions if isinstance(e, exp.ColumnDef)]
        parts = tuple(_sql_type(f.args["kind"]) for f in fields)
        return SqlType(kind, text, parts=parts, names=tuple(f.name for f in fields))
    parts = tuple(_sql_type(e) for e in built.expressions if isinstance(e, exp.DataType))
    size = tuple(int(e.this.name) for e in built.expressions if isinstance(e, exp.DataTypeParam))
    if kind == "DECIMAL":
        size = (size + (10, 0)[len(size) :])[:2]  # Spark: DECIMAL is (10, 0), DECIMAL(p) is (p, 0)
    return SqlType(kind, text, size, parts)


# Checks -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldProblem:
    """One thing wrong with a record: the field (a path such as `tags[2]`) and what is wrong."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


_INT_BITS = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}
_FLOAT_MAX = {
    "FLOAT": Decimal("3.4028234663852886e38"),
    "DOUBLE": Decimal("1.7976931348623157e308"),
}
_NON_FINITE = frozenset({"NaN", "Infinity", "+Infinity", "-Infinity"})
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.(\d{1,9}))?)?)?(Z|[+-]\d{2}:?\d{2})?"
)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_EXAMPLES = {
    "STRING": 'a string such as "abc"',
    "BOOLEAN": "true or false",
    "TIMESTAMP": 'an ISO 8601 string such as "2025-05-01T12:30:00Z"',
    "TIMESTAMP_NTZ": 'an ISO 8601 string without a zone such as "2025-05-01T12:30:00"',
    "DATE": 'a string such as "2025-05-01"',
    "BINARY": "a base64 string",
    "ARRAY": "a JSON array",
    "MAP": "a JSON object",
    "STRUCT": "a JSON object",
}


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return f"the string {text if len(text) <= 40 else text[:36] + '...' + chr(34)}"
    if isinstance(value, dict | list):
        return "an object" if isinstance(value, dict) else "an array"
    return f"the number {value}"


def _wrong(value: Any, sql_type: SqlType, path: str) -> FieldProblem:
    example = _EXAMPLES.get(sql_type.kind, "a number")
    if sql_type.kind in _INT_BITS:
        example = "a whole number such as 42"
    return FieldProblem(path, f"is {_shown(value)}, not {sql_type.text}: write {example}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _check_int(value: Any, sql_type: SqlType, path: str) -> Iterator[FieldProblem]:
    if not isinstance(value, int) or isinstance(value, bool):
        yield _wrong(value, sql_type, path)
        return
    top = 2 ** (_INT_BITS[sql_type.kind] - 1)
    if not -top <= value < top:
        yield FieldProblem(path, f"{value} is out of range for {sql_type.text}")


def _check_float(value: Any, sql_type: SqlType, path: str) -> Iterator[FieldProblem]:
    if isinstance(value, str) and value in _NON_FINITE:
        return
    if not _is_number(value):
        yield _wrong(value, sql_type, path)
    elif abs(Decimal(value)) > _FLOAT_MAX[sql_type.kind]:
        yield FieldProblem(path, f"{value} is out of range for {sql_type.text}")


def _check_decimal(value: Any, sql_type: SqlType, path: str) -> Iterator[FieldProblem]:
    if isinstance(value, str) and _DECIMAL_TEXT.fullmatch(value.strip()):
        value = Decimal(value.strip())
    if not _is_number(value) or not Decimal(value).is_finite():
        yield _wrong(value, sql_type, path)
        return
    number = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    precision, scale = sql_type.size
    exponent = number.as_tuple().exponent
    places = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    whole = number.adjusted() + 1 if abs(number) >= 1 else 0
    if places > scale:
        yield FieldProblem(
            path, f"{value} has {places} digits after the point; {sql_type.text} keeps {scale}"
        )
    elif whole > precision - scale:
        yield FieldProblem(
            path,
            f"{value} is too large for {sql_type.text} (at most {precision - scale} digits "
            "before the point)",
        )


def _check_string(value: Any, sql_type: SqlType, path: str) -> Iterator[FieldProblem]:
    if not isinstance(value, str):
        yield _wrong(value, sql_type, path)
    elif sql_type.size and len(value) > sql_type.size[0]:
        yield FieldProblem(
            path, f"is {len(value)} characters long; {sql_type.text} holds {sql_type.size[0]}"
        )


def _is_timestamp(value: Any, zone: bool = True) -> bool:
    match = _TIMESTAMP.fullmatch(value) if isinstance(value, str) else None
    if match is None or (match.group(2) and not zone):
        return False
    start, end = match.span(1)  # Python reads microseconds, Spark nanoseconds: cut the rest
    text = value[:start] + value[start:end][:6] + value[end:] if start >= 0 else value
    return _parses(datetime.fromisoformat, text.replace("Z", "+00:00"))


def _is_date(value: Any) -> bool:
    return (
        isinstance(value, str)
        and bool(_DATE.fullmatch(value))
        and _parses(date.fromisoformat, value)
    )


def _parses(parse: Callable[[Any], Any], value: Any) -> bool:
    try:
        parse(value)
    except (binascii.Error, TypeError, ValueError):
        return False
    return True


_PREDICATES: dict[str, Callable[[Any], bool]] = {
    "BOOLEAN": lambda value: isinstance(value, bool),
    "DATE": _is_date,
    "TIMESTAMP": _is_timestamp,
    "TIMESTAMP_NTZ": lambda value: _is_timestamp(value, zone=False),
    "BINARY": lambda value: _parses(lambda v: base64.b64decode(v, validate=True), value),
}


def _check_simple(value: Any, sql_type: SqlType, path: str) -> Iterator[FieldProblem]:
    if not _PREDICATES[sql_type.kind](value):
        yield _wrong(value, sql_type, path)


def _check_array(value: Any, sql_type: SqlType, path: str) -> Iterator[FieldProblem]:
    if not isinstance(value, list):
        yield _wrong(value, sql_type, path)
        return
    for index, item in enumerate(value):
        yield from check_value(item, sql_type.parts[0], f"{path}[{index}]")


def _check_map(value: Any, sql_type: SqlType, path: str) -> Iterator[FieldProblem]:
    if not isinstance(value, dict):
        yield _wrong(value, sql_type, path)
        return
    for key, item in value.items():
        yield from check_value(item, sql_type.parts[1], f"{path}[{json.dumps(key)}]")


def _check_struct(value: Any, sql_type: SqlType, path: str) -> Iterator[FieldProblem]:
    if not isinstance(value, dict):
        yield _wrong(value, sql_type, path)
        return
    yield from _check_fields(value, sql_type.names, sql_type.parts, f"{path}.")


_CHECKS: dict[str, Callable[[Any, SqlType, str], Iterator[FieldProblem]]] = {
    **dict.fromkeys(_INT_BITS, _check_int),
    **dict.fromkeys(_FLOAT_MAX, _check_float),
    **dict.fromkeys(("STRING", "CHAR", "VARCHAR"), _check_string),
    **dict.fromkeys(_PREDICATES, _check_simple),
    "DECIMAL": _check_decimal,
    "ARRAY": _check_array,
    "MAP": _check_map,
    "STRUCT": _check_struct,
}


def check_value(value: Any, sql_type: SqlType, path: str) -> Iterator[FieldProblem]:
    """What is wrong with one JSON value (`path` names it) for a column of `sql_type`.

    Null fits every type (DDL columns are nullable); types without a check here pass.
    """
    check = _CHECKS.get(sql_type.kind)
    if value is not None and check is not None:
        yield from check(value, sql_type, path)


def _check_fields(
    record: Mapping[str, Any], names: tuple[str, ...], types: tuple[SqlType, ...], prefix: str
) -> Iterator[FieldProblem]:
    known = dict(zip(names, types, strict=True))
    for name, value in record.items():
        if name in known:
            yield from check_value(value, known[name], f"{prefix}{name}")
            continue
        spelled = {n.lower(): n for n in names}
        near = spelled.get(name.lower()) or next(
            iter(difflib.get_close_matches(name, names, n=1)), None
        )
        hint = f" (did you mean {near!r}?)" if near else ""
        what = "a field of the struct" if prefix else "a column of the Log's schema"
        yield FieldProblem(
            f"{prefix}{name}",
            f"is not {what}{hint}: fix the name, or add it to the Log's spec.schema",
        )


# A Log's records ------------------------------------------------------------------------------


@dataclass(frozen=True)
class EncodedRecord:
    """A record as Kafka stores it: key bytes (None for a log without key columns), value."""

    key: bytes | None
    value: bytes


@dataclass(frozen=True)
class RecordSchema:
    """The record format of a Log: its columns and types (none when it declares no schema), key."""

    columns: tuple[Column, ...]
    types: tuple[SqlType, ...]
    key: tuple[str, ...] = ()

    @classmethod
    def parse(cls, ddl: str | None, key: Iterable[str] = ()) -> RecordSchema:
        """The format of a schema (Spark DDL) and key columns; raises `SqlError` for bad DDL."""
        columns = tuple(parse_ddl(ddl)) if ddl is not None else ()
        return cls(columns, tuple(parse_type(c.type) for c in columns), tuple(key))

    @classmethod
    def of_log(cls, log: Log) -> RecordSchema:
        """The format a Log declares in `spec.schema` and `spec.key`."""
        return cls.parse(log.spec.record_schema, log.spec.key or ())

    @property
    def checked(self) -> bool:
        """Whether records can be checked: the Log declares a schema."""
        return bool(self.columns)

    def check(self, record: Any) -> list[FieldProblem]:
        """Everything wrong with a record (parsed JSON), each naming its field; [] when valid."""
        if not isinstance(record, dict):
            return [FieldProblem("", f"is {_shown(record)}, not a JSON object: write one per line")]
        if not self.checked:
            return []
        names = tuple(c.name for c in self.columns)
        return list(_check_fields(record, names, self.types, ""))

    def encode(self, record: Mapping[str, Any]) -> EncodedRecord:
        """The key and value bytes of a (checked) record."""
        spelled = {c.name.lower(): c.name for c in self.columns}
        key = (
            _json({k: record.get(spelled.get(k.lower(), k)) for k in self.key})
            if self.key
            else None
        )
        value = {c.name: record.get(c.name) for c in self.columns} if self.checked else record
        return EncodedRecord(key.encode() if key is not None else None, _json(dict(value)).encode())


def _json(value: Any) -> str:
    """Compact JSON; a Decimal is written with its own digits."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        items = (f"{json.dumps(str(k), ensure_ascii=False)}:{_json(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_json(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON: write null, or a string for a DOUBLE")


def parse_record(text: str) -> Any:
    """One JSON value from text, numbers with a fraction read as `Decimal`; ValueError if bad."""
    return json.loads(text, parse_float=Decimal, parse_constant=_no_constant)


@dataclass(frozen=True)
class CheckedLine:
    """A line of a JSON Lines file: its number, the record when valid, else its problems."""

    line: int
    record: dict[str, Any] | None
    problems: tuple[str, ...] = ()


def check_lines(lines: Iterable[str], schema: RecordSchema) -> Iterator[CheckedLine]:
    """Parse and check each non-blank line of JSON Lines text (numbered from 1)."""
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            record = parse_record(text)
        except json.JSONDecodeError as exc:
            yield CheckedLine(number, None, (f"is not valid JSON: {exc.msg} (column {exc.colno})",))
            continue
        except ValueError as exc:
            yield CheckedLine(number, None, (f"is not valid JSON: {exc}",))
            continue
        problems = tuple(str(p) for p in schema.check(record))
        yield CheckedLine(number, None if problems else record, problems)


# Made-up records ------------------------------------------------------------------------------

_WORDS = {
    "country": ("US", "DE", "FR", "GB", "IN", "BR", "JP", "CA"),
    "currency": ("USD", "EUR", "GBP", "JPY"),
    "status": ("CREATED", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"),
    "city": ("Berlin", "Paris", "London", "Tokyo", "Toronto", "Austin"),
    "refer": (
        "",
        "https://www.google.com/",
        "https://shop.example.com/",
        "https://news.example.org/",
    ),
    "path": ("/", "/products", "/products/42", "/products/7", "/cart", "/checkout", "/help"),
    "name": ("Ada", "Grace", "Linus", "Margaret", "Ken", "Barbara", "Edsger"),
}
_MANY = ("session", "order", "event", "request", "transaction")


def _string(hint: str, rng: random.Random) -> str:
    if hint == "id" or hint.endswith("_id"):
        pool = 1000 if any(word in hint for word in _MANY) else 25
        prefix = (hint[:-3] or "id").replace("_", "-")
        return f"{prefix}-{rng.randrange(pool):03d}"
    for word, values in _WORDS.items():
        if word in hint:
            return rng.choice(values)
    if "url" in hint:
        return "https://shop.example.com" + rng.choice(_WORDS["path"])
    if "email" in hint:
        return f"user{rng.randrange(25)}@example.com"
    return f"{hint}-{rng.randrange(10)}"


def _integer(hint: str, kind: str, rng: random.Random) -> int:
    high = {"TINYINT": 100, "SMALLINT": 1000}.get(kind, 1000)
    if any(word in hint for word in ("count", "quantity", "qty")):
        return 1 + rng.randrange(min(high, 10))
    if hint.endswith("_ms") and kind in ("INT", "BIGINT"):
        high = 60_000
    return rng.randrange(high + 1)


def _timestamp(at: datetime, kind: str, rng: random.Random) -> str:
    moment = at - timedelta(milliseconds=rng.randrange(1000))
    text = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
    return text + ("Z" if kind == "TIMESTAMP" else "")


def _made_up(sql_type: SqlType, hint: str, rng: random.Random, at: datetime) -> Any:
    kind = sql_type.kind
    if kind in _INT_BITS:
        return _integer(hint, kind, rng)
    if kind == "DECIMAL":
        precision, scale = sql_type.size
        whole = min(10 ** (precision - scale), 1000)
        return Decimal(rng.randrange(whole * 10**scale)).scaleb(-scale)
    if kind in ("STRING", "CHAR", "VARCHAR"):
        return _string(hint, rng)[: sql_type.size[0] if sql_type.size else None]
    if kind in ("TIMESTAMP", "TIMESTAMP_NTZ"):
        return _timestamp(at, kind, rng)
    if kind in ("ARRAY", "MAP", "STRUCT"):
        return _made_up_nested(sql_type, hint, rng, at)
    made: dict[str, Callable[[], Any]] = {
        "FLOAT": lambda: round(rng.uniform(0, 1000), 2),
        "DOUBLE": lambda: round(rng.uniform(0, 1000), 2),
        "BOOLEAN": lambda: rng.random() < 0.5,
        "DATE": lambda: (at.date() - timedelta(days=rng.randrange(30))).isoformat(),
        "BINARY": lambda: base64.b64encode(rng.randbytes(8)).decode(),
    }
    return made[kind]() if kind in made else None


def _made_up_nested(sql_type: SqlType, hint: str, rng: random.Random, at: datetime) -> Any:
    parts = sql_type.parts
    if sql_type.kind == "ARRAY":
        return [_made_up(parts[0], hint, rng, at) for _ in range(rng.randrange(4))]
    if sql_type.kind == "MAP":
        entries = range(1 + rng.randrange(3))
        return {
            str(_made_up(parts[0], "key", rng, at)): _made_up(parts[1], hint, rng, at)
            for _ in entries
        }
    return {
        name: _made_up(part, name.lower(), rng, at)
        for name, part in zip(sql_type.names, parts, strict=True)
    }


def generate_records(
    schema: RecordSchema, count: int, *, seed: int | None = None, now: datetime | None = None
) -> Iterator[dict[str, Any]]:
    """`count` made-up records valid for `schema`, the same ones for the same seed and `now`.

    Timestamps rise through the batch to `now` (default: the current time, UTC).
    """
    if not schema.checked:
        raise ValueError("records can only be made up for a Log that declares spec.schema")
    rng = random.Random(seed)
    end = (now or datetime.now(UTC)).astimezone(UTC)
    span = timedelta(seconds=min(3600, max(count, 1)))
    for index in range(count):
        at = end - span + span * (index / max(count, 1))
        yield {
            column.name: _made_up(sql_type, column.name.lower(), rng, at)
            for column, sql_type in zip(schema.columns, schema.types, strict=True)
        }
