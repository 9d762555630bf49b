"""The shop's application: it places orders by writing them to PostgreSQL, and to nothing else.

There is no second write to a cache, a search index or a report table, and no message to publish
beside the transaction: everything else the shop shows is derived from the database's log of
changes. As in any shop, orders change after they are placed: an amount is corrected, an order is
moved to another customer's account, an order is cancelled (deleted); customers move to another
city; a refund is an order of a negative amount.

    python examples/shop/app.py --dsn postgresql://shop_app:PASSWORD@127.0.0.1:5432/shop \\
        --orders 1000 --rate 100
"""

from __future__ import annotations

import argparse
import random
import time
from decimal import Decimal

import psycopg

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id bigint PRIMARY KEY,
    customer text NOT NULL,
    amount numeric(10,2) NOT NULL,
    placed_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS customers (
    id text PRIMARY KEY,
    city text NOT NULL
);
"""
CUSTOMERS = [f"customer-{n:03d}" for n in range(1, 41)]
CITIES = ["Lyon", "Oslo", "Lima", "Pune", "Kobe", "Turin"]
# Each customer's city when the shop opens (`stores.prepare` inserts them).
FIRST_CITIES = {customer: CITIES[n % len(CITIES)] for n, customer in enumerate(CUSTOMERS)}


def order(number: int, rng: random.Random) -> tuple[int, str, Decimal]:
    """Order `number`: a customer and an amount (one in twenty is a refund)."""
    cents = rng.randint(100, 25_000)
    if rng.random() < 0.05:
        cents = -rng.randint(100, 5_000)
    return number, rng.choice(CUSTOMERS), Decimal(cents) / 100


# After each order placed, the chance that an earlier order is changed, by kind of change, and
# that a customer moves to another city.
CORRECTED, MOVED, CANCELLED, RELOCATED = 0.15, 0.05, 0.05, 0.03


def change_an_order(db: psycopg.Connection, number: int, rng: random.Random) -> None:
    """Maybe change one of orders 1 .. `number`: correct its amount (never to the same amount),
    move it to another customer, or cancel it (an order already cancelled stays so); or move a
    customer to another city."""
    pick, target = rng.random(), rng.randint(1, number)
    if pick < CORRECTED:
        cents = rng.choice([-1, 1]) * rng.randint(1, 2_000)
        db.execute("UPDATE orders SET amount = amount + %s WHERE id = %s",
                   (Decimal(cents) / 100, target))  # fmt: skip
    elif pick < CORRECTED + MOVED:
        db.execute("UPDATE orders SET customer = %s WHERE id = %s AND customer <> %s",
                   (customer := rng.choice(CUSTOMERS), target, customer))  # fmt: skip
    elif pick < CORRECTED + MOVED + CANCELLED:
        db.execute("DELETE FROM orders WHERE id = %s", (target,))
    elif pick < CORRECTED + MOVED + CANCELLED + RELOCATED:
        db.execute("UPDATE customers SET city = %s WHERE id = %s AND city <> %s",
                   (city := rng.choice(CITIES), rng.choice(CUSTOMERS), city))  # fmt: skip


def place_orders(
    dsn: str, count: int, rate: float, first: int = 1, seed: int = 7, stop: float | None = None
) -> int:
    """Place orders `first` .. `first + count - 1`, one transaction each, about `rate` a second
    (until `stop`, a `time.monotonic()` deadline, if given), and after each maybe change an
    earlier one (`change_an_order`). Returns how many were placed."""
    rng = random.Random(seed + first)
    placed = 0
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as db:
        for number in range(first, first + count):
            if stop is not None and time.monotonic() >= stop:
                break
            db.execute("INSERT INTO orders (id, customer, amount) VALUES (%s, %s, %s)",
                       order(number, rng))  # fmt: skip
            change_an_order(db, number, rng)
            placed += 1
            ahead = started + placed / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    return placed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", required=True, help="the shop database, as the app logs in")
    parser.add_argument("--orders", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100.0, help="orders a second")
    parser.add_argument("--first", type=int, default=1, help="the first order's id")
    args = parser.parse_args()
    placed = place_orders(args.dsn, args.orders, args.rate, args.first)
    print(f"placed {placed} orders")


if __name__ == "__main__":
    main()
