"""The shop's stores, as its operators set them up and as its readers see them.

- `prepare`: the database `shop` and its three roles, each with its own password: `shop_app`
  (the application: it may only read, place, change and cancel orders), `shop_cdc` (the Source:
  it owns the table, with REPLICATION and CREATE on the database, for its publication) and
  `shop_serving` (the Sink: it makes its own table). Run again, it sets the passwords anew and
  changes nothing else.
- `truth`, `serving`, `cache`: revenue and number of orders per customer, from the orders table
  (what the orders imply), from the serving table (what the reports read) and from the Redis
  cache (what the pages read); `differences` says, customer by customer, where two disagree.
  `city_truth`, and `serving` and `cache` of `CITY_TABLE` and `CITY_PREFIX`: the same per city
  (the orders joined with their customers' cities).
- `orders`, `log_problems`: the orders table row by row, and what is wrong with the table Log's
  records against it (a change written twice, an order missing, deleted or different).

`run.py` (one machine) and the kind run's Jobs (`e2e/kind/shop.py`) both use these.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from decimal import Decimal

import psycopg
import redis
from app import FIRST_CITIES, SCHEMA
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

DATABASE = "shop"
TABLE = "public.customer_revenue"
PREFIX = "revenue:"
CITY_TABLE = "public.city_revenue"
CITY_PREFIX = "city:"
ROLES = ("app", "cdc", "serving")

Table = dict[str, tuple[Decimal, int]]
Orders = dict[int, tuple[str, Decimal]]  # each order's customer and amount, by its id


def dsn(admin: str, role: str | None = None, password: str = "", database: str = DATABASE) -> str:
    """The connection string of `role` (`shop_<role>`), else the admin's, to `database`, at the
    admin URL's server."""
    parts = conninfo_to_dict(admin)
    parts["dbname"] = database
    if role is not None:
        parts.update(user=f"shop_{role}", password=password)
    return make_conninfo(**{k: str(v) for k, v in parts.items() if v is not None})


def prepare(admin: str, passwords: Mapping[str, str]) -> None:
    """The database, its roles with `passwords` (role -> password), the orders table and the
    customers table with each customer's first city, from `admin` (a superuser's URL)."""
    with psycopg.connect(dsn(admin, database="postgres"), autocommit=True) as db:
        if not db.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchall():
            db.execute(f"CREATE DATABASE {DATABASE}")
        for role, extra in (("app", ""), ("cdc", " REPLICATION"), ("serving", "")):
            name = f"shop_{role}"
            if not db.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchall():
                db.execute(f"CREATE ROLE {name} LOGIN{extra}")
            password = sql.Literal(passwords[role])
            db.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(name), password))
    with psycopg.connect(dsn(admin), autocommit=True) as db:
        db.execute(f"GRANT CREATE ON DATABASE {DATABASE} TO shop_cdc")  # its publication
        db.execute("GRANT CREATE ON SCHEMA public TO shop_cdc, shop_serving")
    with psycopg.connect(dsn(admin, "cdc", passwords["cdc"]), autocommit=True) as db:
        db.execute(SCHEMA)
        for customer, city in FIRST_CITIES.items():
            db.execute("INSERT INTO customers (id, city) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                       (customer, city))  # fmt: skip
        db.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON orders TO shop_app")
        db.execute("GRANT SELECT, UPDATE ON customers TO shop_app")


def truth(app_dsn: str) -> Table:
    """What the orders imply: revenue and orders per customer, from the source table."""
    with psycopg.connect(app_dsn) as db:
        rows = db.execute(
            "SELECT customer, sum(amount), count(*) FROM orders GROUP BY customer"
        ).fetchall()
    return {str(c): (Decimal(r), int(n)) for c, r, n in rows}


def city_truth(app_dsn: str) -> Table:
    """What the orders and the customers imply: revenue and orders per city."""
    with psycopg.connect(app_dsn) as db:
        rows = db.execute(
            "SELECT c.city, sum(o.amount), count(*) FROM orders o "
            "JOIN customers c ON o.customer = c.id GROUP BY c.city"
        ).fetchall()
    return {str(c): (Decimal(r), int(n)) for c, r, n in rows}


def serving(serving_dsn: str, table: str = TABLE, key: str = "customer") -> Table:
    """A Sink's table, as the shop's reports read it (empty while it does not exist)."""
    try:
        with psycopg.connect(serving_dsn) as db:
            rows = db.execute(f"SELECT {key}, revenue, orders FROM {table}").fetchall()
    except psycopg.errors.UndefinedTable:
        return {}
    return {str(c): (Decimal(r), int(n)) for c, r, n in rows}


def cache(client: redis.Redis, prefix: str = PREFIX) -> Table:
    """A Sink's cache, as the shop's pages read it."""
    found: Table = {}
    for key in client.scan_iter(match=f"{prefix}*"):
        value = client.get(key)
        if value is not None:
            row = json.loads(value, parse_float=Decimal)
            found[key.decode()[len(prefix) :]] = (Decimal(row["revenue"]), int(row["orders"]))
    return found


def differences(expected: Table, actual: Table) -> list[str]:
    """What differs, customer by customer (empty when equal)."""
    lines = []
    for customer in sorted(set(expected) | set(actual)):
        if expected.get(customer) != actual.get(customer):
            lines.append(
                f"{customer}: expected {expected.get(customer)}, found {actual.get(customer)}"
            )
    return lines


def orders(app_dsn: str) -> Orders:
    """Every order as the orders table holds it now."""
    with psycopg.connect(app_dsn) as db:
        rows = db.execute("SELECT id, customer, amount FROM orders").fetchall()
    return {int(i): (str(c), Decimal(a)) for i, c, a in rows}


def log_problems(records: Iterable[tuple[bytes | None, bytes | None]], table: Orders) -> list[str]:
    """What is wrong (empty when nothing) with the table Log's records, (key, value) in the order
    of one partition's offsets per key, against the orders table `table`:

    - a change written twice: a record equal to its key's record before it (every change of an
      order makes its row differ from its last version, so an equal neighbour is a repeat, from
      a crash of the Connect worker or of the run);
    - an order whose latest row (a captured delete's `__deleted` and a tombstone delete it) is
      missing from the table, or differs from its row there, or a row of the table missing.
    """
    problems: list[str] = []
    last: dict[bytes, bytes | None] = {}
    for key, value in records:
        if key is None:
            problems.append(f"a record without a key: {value!r}")
            continue
        if key in last and value == last[key]:
            problems.append(f"written twice: {key.decode()} {value!r}")
        last[key] = value
    logged: Orders = {}
    for key, value in last.items():
        row = json.loads(value) if value is not None else None
        if row is not None and not row.get("__deleted"):
            logged[int(json.loads(key)["id"])] = (str(row["customer"]), Decimal(str(row["amount"])))
    for number in sorted(set(table) | set(logged)):
        if table.get(number) != logged.get(number):
            problems.append(
                f"order {number}: the table has {table.get(number)}, the Log {logged.get(number)}"
            )
    return problems
