"""The shop example's stores prepared, its orders placed and its outputs checked, on kind.

PostgreSQL and Redis run as the shop's own pods, reachable on Service names that resolve inside
the cluster, and Kafka listens only with SASL_SSL, so this runs as Jobs in the shop's namespace,
on the operator image (psycopg, redis, confluent-kafka). `shop.sh` puts this file, the example's
`app.py` and `stores.py`, and `clicks.py` (Kafka's settings from the chart's environment and a
committed reader) in the ConfigMap `shop`; the passwords come from Secrets, in the environment.

- `prepare`: the database, its three roles and the orders table (`stores.prepare`), and
  `EXISTING` orders placed before the Source starts (its snapshot reads them).
- `orders`: orders `FIRST` .. `FIRST + COUNT - 1` placed by the application, `RATE` a second,
  in PostgreSQL only.
- `check`: waits (`CHECK_SECONDS`) until the serving table and the cache equal what the orders
  table implies, customer by customer, exactly; then reads the table Log's serving topic
  (`ORDERS_TOPIC`) as a committed reader does and compares it with the orders table
  (`stores.log_problems`): no change written twice, and each order's latest row its row in the
  table (a cancelled order deleted). Exit 1, saying what differs.
- `resources` (run where the scripts run, not in the cluster): the example's files with the
  stores' hosts set to the shop's Services, on stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import redis
import yaml
from psycopg.conninfo import make_conninfo

HERE = Path(__file__).resolve().parent
EXAMPLE_FILES = ("source.yaml", "views.yaml", "sinks.yaml")


def say(message: str) -> None:
    print(f"[shop] {message}", file=sys.stderr, flush=True)


def resources(example: Path, postgres_host: str, redis_host: str) -> str:
    """The example's files as one YAML stream, each store's host set to its Service."""
    documents = []
    for name in EXAMPLE_FILES:
        for document in yaml.safe_load_all((example / name).read_text()):
            if not document:
                continue
            for store, host in (("postgres", postgres_host), ("redis", redis_host)):
                if store in document.get("spec", {}):
                    document["spec"][store]["host"] = host
            documents.append(document)
    return yaml.safe_dump_all(documents, sort_keys=False)


class Stores:
    """The shop's database and cache as the Jobs reach them (hosts and passwords from the
    environment)."""

    def __init__(self, environ: dict[str, str]):
        import stores  # beside this file in the Job (see main)

        self.stores = stores
        self.admin = make_conninfo(
            host=environ["SHOP_POSTGRES_HOST"],
            port=environ.get("SHOP_POSTGRES_PORT", "5432"),
            user=environ.get("POSTGRES_USER", "postgres"),
            password=environ["POSTGRES_PASSWORD"],
            dbname="postgres",
        )
        self.passwords = {role: environ[f"SHOP_{role.upper()}_PASSWORD"] for role in stores.ROLES}
        self.redis = redis.Redis(
            host=environ["SHOP_REDIS_HOST"], port=int(environ.get("SHOP_REDIS_PORT", "6379"))
        )

    def dsn(self, role: str) -> str:
        return self.stores.dsn(self.admin, role, self.passwords[role])


def check(shop: Stores, topic: str, seconds: float) -> list[str]:
    """What differs (empty when nothing): the stores against the orders table, once they have
    had `seconds` to catch up; the Log's topic against the orders, row for row."""
    stores = shop.stores
    deadline = time.monotonic() + seconds
    shown = time.monotonic()
    while True:
        expected = stores.truth(shop.dsn("app"))
        table, cache = stores.serving(shop.dsn("serving")), stores.cache(shop.redis)
        if table == expected and cache == expected:
            break
        if time.monotonic() >= deadline:
            in_table = [f"table {stores.TABLE}: {d}" for d in stores.differences(expected, table)]
            in_cache = [f"cache: {d}" for d in stores.differences(expected, cache)]
            return in_table[:10] + in_cache[:10]
        if time.monotonic() - shown >= 30:
            behind = (len(stores.differences(expected, found)) for found in (table, cache))
            say("waiting for the stores: {} customer(s) differ in the table, {} in the cache"
                .format(*behind))  # fmt: skip
            shown = time.monotonic()
        time.sleep(2)
    orders = sum(n for _, n in expected.values())
    say(f"the table and the cache equal what {orders} orders imply, for {len(expected)} customers")
    from clicks import read_topic  # beside this file in the Job (see main)

    problems = stores.log_problems(read_topic(topic), stores.orders(shop.dsn("app")))
    if not problems:
        say(f"{topic} holds each change once and ends as the orders table ({orders} orders)")
    return [f"{topic}: {problem}" for problem in problems[:10]]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="shop.py", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["prepare", "orders", "check", "resources"])
    parser.add_argument("--example", type=Path, help="resources: the example's folder")
    args = parser.parse_args(argv)
    environ = dict(os.environ)
    if args.command == "resources":
        sys.stdout.write(
            resources(args.example, environ["SHOP_POSTGRES_HOST"], environ["SHOP_REDIS_HOST"])
        )
        return 0
    sys.path.insert(0, str(HERE))  # app.py, stores.py and clicks.py, beside this file
    from app import place_orders

    shop = Stores(environ)
    if args.command == "prepare":
        shop.stores.prepare(shop.admin, shop.passwords)
        placed = place_orders(shop.dsn("app"), int(environ["EXISTING"]), rate=10_000.0)
        say(f"database {shop.stores.DATABASE} ready; {placed} orders placed before the Source")
        return 0
    if args.command == "orders":
        first, count, rate = (environ["FIRST"], environ["COUNT"], environ["RATE"])
        placed = place_orders(shop.dsn("app"), int(count), float(rate), first=int(first))
        say(f"placed orders {first} .. {int(first) + placed - 1}, {rate} a second")
        return 0 if placed == int(count) else 1
    problems = check(shop, environ["ORDERS_TOPIC"], float(environ["CHECK_SECONDS"]))
    for problem in problems:
        say(f"DIFFERS {problem}")
    if not problems:
        say("the serving table, the cache and the Log are exactly what the orders imply")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
