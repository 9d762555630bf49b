"""The shop example's check of its table Log against the orders table (`stores.log_problems`):
what it must refuse, and what it must let pass, without any server."""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "examples" / "shop"))
import stores  # noqa: E402


def record(number: int, customer: str, amount: str, deleted: bool = False) -> tuple[bytes, bytes]:
    key = json.dumps({"id": number}).encode()
    value = {"id": number, "customer": customer, "amount": amount, "__deleted": deleted}
    return key, json.dumps(value).encode()


def tombstone(number: int) -> tuple[bytes, None]:
    return json.dumps({"id": number}).encode(), None


TABLE = {1: ("customer-1", Decimal("12.50")), 3: ("customer-2", Decimal("-4.00"))}


def changes() -> list[tuple[bytes, bytes | None]]:
    """Order 1 placed, corrected and moved; order 2 placed and cancelled; order 3 placed."""
    return [
        record(1, "customer-1", "10.00"),
        record(2, "customer-1", "3.00"),
        record(1, "customer-3", "10.00"),
        record(3, "customer-2", "-4.00"),
        record(1, "customer-1", "12.50"),
        record(2, "customer-1", "3.00", deleted=True),
        tombstone(2),
    ]


def test_every_change_once_ending_as_the_table_passes() -> None:
    assert stores.log_problems(changes(), TABLE) == []


def test_a_change_written_twice_is_named() -> None:
    records = changes()
    records.insert(3, records[2])
    assert stores.log_problems(records, TABLE) == [
        'written twice: {"id": 1} ' + repr(records[2][1])
    ]


def test_a_stale_row_a_missing_order_and_a_cancelled_order_still_there_are_named() -> None:
    records = changes()[:-2]  # order 2's cancellation lost
    records.append(record(1, "customer-1", "12.00"))  # a change the table does not have
    table = {**TABLE, 4: ("customer-4", Decimal("1.00"))}  # an order the Log never got
    assert stores.log_problems(records, table) == [
        "order 1: the table has ('customer-1', Decimal('12.50')), the Log "
        "('customer-1', Decimal('12.00'))",
        "order 2: the table has None, the Log ('customer-1', Decimal('3.00'))",
        "order 4: the table has ('customer-4', Decimal('1.00')), the Log None",
    ]


def test_a_record_without_a_key_is_named() -> None:
    assert stores.log_problems([(None, b"{}"), *changes()], TABLE) == [
        "a record without a key: b'{}'"
    ]
