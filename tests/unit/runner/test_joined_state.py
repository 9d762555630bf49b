"""What a join of two tables keeps per join key (`runner/joined_tables.py` `JoinTables`), without
Spark: random batches of inserts, updates (some moving a row to another join key) and deletes
of both tables, and after each batch the changes written so far add up to exactly the join of
the tables as they are, for an inner and a left join."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from distributary.runner.joined_tables import ROWS, SIDE, JoinTables, pairs
from distributary.runner.tables import WEIGHT, NetRows
from distributary.table_queries import DELETE, KEY, MATCH

ORDERS = StructType([StructField("customer", StringType()), StructField("amount", StringType())])
CUSTOMERS = StructType([StructField("id", StringType()), StructField("city", StringType())])


class MapState:
    """A map state as Spark's handle gives one, in memory (a unit test's fake)."""

    def __init__(self) -> None:
        self.values: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def containsKey(self, key: tuple[Any, ...]) -> bool:  # noqa: N802 (Spark's name)
        return key in self.values

    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...]:  # noqa: N802
        return self.values[key]

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:  # noqa: N802
        self.values[key] = tuple(value)

    def removeKey(self, key: tuple[Any, ...]) -> None:  # noqa: N802
        del self.values[key]

    def iterator(self) -> Any:
        return iter(list(self.values.items()))


class Handle:
    def getMapState(self, *_: Any) -> MapState:  # noqa: N802
        return MapState()


def change(side: int, key: str, values: tuple[Any, ...], weight: int) -> dict[str, Any]:
    names = (ORDERS if side == 0 else CUSTOMERS).fieldNames()
    row = {KEY: key, **dict(zip(names, values, strict=True))}
    return {SIDE: side, ROWS[side]: row, ROWS[1 - side]: None, WEIGHT: weight}


def expected(
    orders: dict[str, tuple], customers: dict[str, tuple], left: bool, lookup: bool
) -> Counter:
    found: Counter = Counter()
    for order_key, order in orders.items():
        partners = [
            (k, c) for k, c in customers.items() if order[0] is not None and c[0] == order[0]
        ]
        for customer_key, customer in partners:
            identity = order_key if lookup else f"{order_key}\x00{customer_key}"
            found[(identity, (*order, *customer))] += 1
        if left and not partners:
            found[(order_key if lookup else f"{order_key}\x00", (*order, None, None))] += 1
    return found


@pytest.mark.parametrize(
    ("left", "lookup"), [(False, False), (True, False), (False, True), (True, True)]
)
def test_the_changes_written_add_up_to_the_join_after_every_batch(left: bool, lookup: bool) -> None:
    rng = random.Random(7)
    names = [KEY, DELETE, "p", "o", "customer", "amount", "id", "city"]
    states: dict[Any, JoinTables] = {}
    written: Counter = Counter()
    tables: list[dict[str, tuple]] = [{}, {}]
    cities = ["Oslo", "Lima", "Kobe"]
    for _batch in range(60):
        per_key: dict[Any, list[dict[str, Any]]] = {}
        touched: set[tuple[int, str]] = set()
        for _ in range(rng.randint(1, 12)):
            side = rng.randint(0, 1)
            key = f"{side}-{rng.randint(1, 8)}"
            if side == 1 and lookup:  # customers keyed by their id: an order meets one at most
                key = rng.choice(["c1", "c2", "c3", "c4"])
            if (side, key) in touched:
                continue  # LatestRows writes a record key's net change once per batch
            touched.add((side, key))
            old = tables[side].get(key)
            if rng.random() < 0.2:
                new = None
            elif side == 0:
                new = (rng.choice(["c1", "c2", "c3", None]), str(rng.randint(1, 50)))
            else:
                new = (key if lookup else rng.choice(["c1", "c2", "c3", "c4"]), rng.choice(cities))
            if old == new:
                continue
            for values, weight in ((old, -1), (new, 1)):
                if values is not None:
                    per_key.setdefault((values[0],), []).append(change(side, key, values, weight))
            if new is None:
                tables[side].pop(key, None)
            else:
                tables[side][key] = new
        for join_key, rows in per_key.items():
            if join_key not in states:
                states[join_key] = JoinTables(left, lookup, [ORDERS, CUSTOMERS], names)
                states[join_key].init(Handle())  # type: ignore[arg-type]
            rng.shuffle(rows)  # a key's changes come in no order
            for out in states[join_key].handleInputRows(join_key, iter(rows), None):
                values = tuple(out[n] for n in names[4:])
                written[(out[KEY], values)] += -1 if out[DELETE] else 1
        assert +written == expected(tables[0], tables[1], left, lookup)
        assert all(n >= 0 for n in written.values())


def test_pairs_of_a_null_join_key_meet_nothing_and_a_left_join_keeps_the_row() -> None:
    first, second = {"o1": ("x", "1")}, {"c1": ("x", "Oslo")}
    assert pairs(first, second, True, False, False, 2) == {"o1\x00c1": ("x", "1", "x", "Oslo")}
    assert pairs(first, second, False, False, False, 2) == {}
    assert pairs(first, second, False, True, False, 2) == {"o1\x00": ("x", "1", None, None)}


def test_a_lookups_pair_keeps_the_first_rows_identity_whatever_its_partner() -> None:
    first = {"o1": ("x", "1")}
    assert pairs(first, {"x": ("x", "Oslo")}, True, True, True, 2) == {
        "o1": ("x", "1", "x", "Oslo")
    }
    assert pairs(first, {}, True, True, True, 2) == {"o1": ("x", "1", None, None)}


def net(old: tuple | None, *changes: tuple[tuple, bool]) -> Any:
    processor = NetRows(["city"], StructType([StructField("city", StringType())]))
    rows = iter({"city": values[0], DELETE: back, MATCH: True} for values, back in changes)
    return processor.after("k", old, rows)


def test_net_rows_add_weights_in_any_order_and_refuse_two_versions_at_once() -> None:
    assert net(("Oslo",), (("Lima",), False), (("Oslo",), True)) == ("Lima",)
    assert net(("Oslo",), (("Oslo",), True)) is None
    assert net(None, (("Oslo",), True), (("Oslo",), False)) is None
    with pytest.raises(RuntimeError, match="2 versions at once"):
        net(("Oslo",), (("Lima",), False))
