"""The shop, end to end on one machine, with crashes: `make shop` (or `.venv/bin/python
examples/shop/run.py`).

1. PostgreSQL 15 and Redis start from their Debian packages (`tools/system-packages.sh`), in the
   state folder; the database `shop` gets three roles: `shop_app` (the application: it may only
   place, change and cancel orders), `shop_cdc` (the Source: it owns the table, with
   REPLICATION) and `shop_serving` (the Sink: it makes its own table). Their passwords are new
   each run, in a secrets folder laid out as Kubernetes mounts a Secret.
2. `distributary run` starts on the example's files (with this run's ports): the Source turns the
   orders and customers tables into the Logs `shop-orders` and `shop-customers`, the view
   `customer-revenue` sums the orders per customer and `city-revenue` per customer's city, and
   four Sinks keep `public.customer_revenue` and `public.city_revenue` in PostgreSQL and
   `revenue:<customer>` and `city:<city>` in Redis.
3. The application places orders (`app.py`), only in PostgreSQL, correcting, moving and
   cancelling earlier ones and moving customers to other cities as it goes. Meanwhile, once the
   serving table has rows, parts are killed with SIGKILL in turn: a Sink's process, the Connect
   worker, the views' Spark drivers, the other Sink, and the whole run (which is then started
   again).
4. When the orders are placed, it waits until the serving tables and the caches hold exactly what
   the database implies (revenue and number of orders per customer and per city, compared
   exactly), says so, shows the top customers, and stops everything.

`--postgres-url`, `--redis-port` and `--bootstrap-servers` use servers that already run instead
(the URL is a superuser's; the database and roles are made if missing, and left afterwards).
`--json` prints a summary line on stdout. Exit status 1 when the stores did not come out equal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import redis
import yaml
from psycopg.conninfo import conninfo_to_dict

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import stores  # noqa: E402
from app import place_orders  # noqa: E402
from stores import DATABASE, ROLES, Table, differences  # noqa: E402

from distributary.devtools.postgres import PostgresServer  # noqa: E402
from distributary.devtools.redis import RedisServer  # noqa: E402

# The example's files: the Source, revenue per customer with its Sinks, revenue per city with its.
FILES = ("source.yaml", "views.yaml", "sinks.yaml", "cities.yaml")
CRASHES = ("sink revenue-table", "Connect worker", "view's Spark driver", "sink revenue-cache",
           "whole run")  # fmt: skip


def say(text: str) -> None:
    print(f"shop: {text}", file=sys.stderr, flush=True)


class Shop:
    """The example's parts: the database and cache, the files, the run, the crashes."""

    def __init__(self, state: Path, admin_url: str, redis_port: int, bootstrap: str | None):
        self.state = state
        self.admin = admin_url
        self.redis_port = redis_port
        self.bootstrap = bootstrap
        self.passwords = {role: secrets.token_urlsafe(12) for role in ROLES}
        self.run: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.crashes: list[str] = []

    # -- the database, the secrets and the files -------------------------------------------------

    def dsn(self, role: str | None = None, database: str = DATABASE) -> str:
        return stores.dsn(self.admin, role, self.passwords.get(role or "", ""), database)

    def prepare(self) -> None:
        stores.prepare(self.admin, self.passwords)
        for secret, role in (("shop-db", "cdc"), ("serving-db", "serving")):
            folder = self.state / "secrets" / secret
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "password").write_text(self.passwords[role])
            (folder / "password").chmod(0o600)
        port = int(conninfo_to_dict(self.admin).get("port") or 5432)
        pipeline = self.state / "pipeline"
        pipeline.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            documents = list(yaml.safe_load_all((HERE / name).read_text()))
            for doc in documents:
                for store, value in (("postgres", port), ("redis", self.redis_port)):
                    if store in doc.get("spec", {}):
                        doc["spec"][store]["port"] = value
            (pipeline / name).write_text(yaml.safe_dump_all(documents, sort_keys=False))

    # -- the run ---------------------------------------------------------------------------------

    def start_run(self) -> None:
        self.runs += 1
        command = [sys.executable, "-m", "distributary.cli", "run", str(self.state / "pipeline"),
                   "--state-dir", str(self.state / "run"), "--secrets", str(self.state / "secrets"),
                   "--cores", "1"]  # fmt: skip
        if self.bootstrap:
            command += ["--bootstrap-servers", self.bootstrap]
        with (self.state / f"run-{self.runs}.log").open("w") as log:
            self.run = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True
            )

    def kill_run(self) -> None:
        """SIGKILL for the run and everything in its process group, and its Connect worker."""
        assert self.run is not None
        worker = self._worker_pid()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.run.pid, signal.SIGKILL)
        if worker:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)
        self.run.wait(30)

    def stop_run(self) -> None:
        if self.run is None or self.run.poll() is not None:
            return
        self.run.send_signal(signal.SIGINT)
        try:
            self.run.wait(90)
        except subprocess.TimeoutExpired:
            self.kill_run()

    def check_run(self) -> None:
        if self.run is not None and self.run.poll() is not None:
            tail = (self.state / f"run-{self.runs}.log").read_text(errors="replace")[-2000:]
            raise SystemExit(f"shop: distributary run exited ({self.run.returncode}):\n{tail}")

    def _worker_pid(self) -> int:
        path = self.state / "run" / "connect" / "worker.pid"
        with contextlib.suppress(OSError, ValueError):
            return int(path.read_text().strip())
        return 0

    def _pids(self, *words: str) -> list[int]:
        """Processes whose command line holds every one of `words` and this state folder, with
        every process below them (a Spark driver's JVM is a child of its runner)."""
        parents: dict[int, int] = {}
        lines: dict[int, str] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    raw = (entry / "cmdline").read_bytes()
                    lines[int(entry.name)] = raw.replace(b"\0", b" ").decode(errors="replace")
                    stat = (entry / "stat").read_text()
                    parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        found = [
            p
            for p, line in lines.items()
            if str(self.state) in line and all(w in line for w in words)
        ]
        grown = True
        while grown:
            below = [p for p, parent in parents.items() if parent in found and p not in found]
            found += below
            grown = bool(below)
        return found

    def _targets(self, what: str) -> list[int]:
        if what == "Connect worker":
            return [self._worker_pid()]
        if what == "view's Spark driver":
            return self._pids("distributary.runner")
        return self._pids("distributary.sinks", what.split()[-1])

    def crash(self, number: int) -> None:
        """Kill the next part in turn with SIGKILL (the run starts it again; a killed run is
        started again here)."""
        what = CRASHES[number % len(CRASHES)]
        if what == "whole run":
            self.kill_run()
            self.start_run()
        else:
            pids: list[int] = []
            deadline = time.monotonic() + 60
            while not pids and time.monotonic() < deadline:  # e.g. a run started again
                self.check_run()
                pids = [p for p in self._targets(what) if p]
                if not pids:
                    time.sleep(0.5)
            if not pids:
                say(f"crash {number + 1}: the {what} did not run within 60 s; not killed")
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.crashes.append(what)
        say(f"crash {number + 1}: killed the {what} with SIGKILL")

    # -- the stores ------------------------------------------------------------------------------

    def truth(self) -> Table:
        """What the orders imply: revenue and orders per customer, from the source table."""
        return stores.truth(self.dsn("app"))

    def serving(self) -> Table:
        """The Sink's table, as the shop's reports read it."""
        return stores.serving(self.dsn("serving"))

    def cache(self) -> Table:
        """The Sink's cache, as the shop's pages read it."""
        return stores.cache(redis.Redis(host="127.0.0.1", port=self.redis_port))

    def city_truth(self) -> Table:
        """What the orders and the customers imply: revenue and orders per city."""
        return stores.city_truth(self.dsn("app"))

    def city_stores(self) -> tuple[Table, Table]:
        """The per-city Sinks' table and cache."""
        table = stores.serving(self.dsn("serving"), stores.CITY_TABLE, "city")
        client = redis.Redis(host="127.0.0.1", port=self.redis_port)
        return table, stores.cache(client, stores.CITY_PREFIX)

    def log_problems(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> list[str]:
        """What is wrong with the table Log's records (key, value) against the orders table."""
        return stores.log_problems(records, stores.orders(self.dsn("app")))


@contextlib.contextmanager
def servers(args: argparse.Namespace, state: Path) -> Iterator[tuple[str, int]]:
    """The PostgreSQL admin URL and the Redis port: the given ones, or servers started here."""
    with contextlib.ExitStack() as stack:
        url = args.postgres_url
        if url is None:
            say("starting PostgreSQL 15 ...")
            url = stack.enter_context(PostgresServer(state / "postgres")).dsn()
        port = args.redis_port
        if port is None:
            say("starting Redis ...")
            port = stack.enter_context(RedisServer(state / "redis")).port
        yield url, port


def run_shop(args: argparse.Namespace, state: Path) -> dict[str, Any]:
    started = time.monotonic()
    with servers(args, state) as (url, redis_port):
        shop = Shop(state, url, redis_port, args.bootstrap_servers)
        shop.prepare()
        before = place_orders(shop.dsn("app"), args.existing, rate=10_000.0)
        say(f"{before} orders exist before the Source starts (its snapshot reads them)")
        say(f"files and secrets in {state}; starting distributary run ...")
        shop.start_run()
        try:
            deadline = time.monotonic() + args.timeout
            while not shop.serving() and time.monotonic() < deadline:
                shop.check_run()
                time.sleep(1)
            say("the serving table has rows: the pipeline is up")
            placed = [0]
            first = args.existing + 1
            writer = threading.Thread(
                target=lambda: placed.__setitem__(
                    0, place_orders(shop.dsn("app"), args.orders, args.rate, first=first)
                ),
                daemon=True,
            )
            writer.start()
            say(
                f"the application places {args.orders} orders, {args.rate:g} a second, "
                "in PostgreSQL only; parts are killed meanwhile"
            )
            pause = args.orders / args.rate / (args.crashes + 1)
            for number in range(args.crashes):
                time.sleep(pause)
                shop.check_run()
                shop.crash(number)
            writer.join()
            say(
                f"{before + placed[0]} orders placed; waiting for the table and the cache "
                "to catch up ..."
            )
            expected: Table = shop.truth()
            per_city: Table = shop.city_truth()
            table: Table = {}
            cache: Table = {}
            cities: tuple[Table, Table] = ({}, {})
            while time.monotonic() < deadline:
                shop.check_run()
                table, cache, cities = shop.serving(), shop.cache(), shop.city_stores()
                if table == expected and cache == expected and cities == (per_city, per_city):
                    break
                time.sleep(1)
            equal = table == expected and cache == expected and cities == (per_city, per_city)
        finally:
            shop.stop_run()
        top = sorted(expected.items(), key=lambda item: item[1][0], reverse=True)[:5]
        found = [table, cache]
        return {
            "orders": before + placed[0],
            "customers": len(expected),
            "cities": len(per_city),
            "crashes": shop.crashes,
            "runs": shop.runs,
            "tableEqual": table == expected,
            "cacheEqual": cache == expected,
            "cityTableEqual": cities[0] == per_city,
            "cityCacheEqual": cities[1] == per_city,
            "differences": (
                [d for f in found for d in differences(expected, f)]
                + [f"city {d}" for f in cities for d in differences(per_city, f)]
            )[:10],
            "top": [{"customer": c, "revenue": str(r), "orders": n} for c, (r, n) in top],
            "seconds": round(time.monotonic() - started, 1),
            "equal": equal,
        }


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # so that the run is stopped on the way out


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupted)
    parser = argparse.ArgumentParser(
        description="The shop example end to end: orders and customers in PostgreSQL, revenue "
        "per customer and per city in PostgreSQL tables and Redis caches, fed only from the "
        "log, with crashes."
    )
    parser.add_argument("--existing", type=int, default=500, help="orders placed before the run")
    parser.add_argument("--orders", type=int, default=3000, help="orders placed while it runs")
    parser.add_argument("--rate", type=float, default=100.0, help="orders a second")
    parser.add_argument("--crashes", type=int, default=5, help="SIGKILLs while orders arrive")
    parser.add_argument(
        "--state-dir", type=Path, help="keep everything here (default: a temporary folder)"
    )
    parser.add_argument("--postgres-url", help="a running PostgreSQL (a superuser's URL)")
    parser.add_argument("--redis-port", type=int, help="a running Redis on 127.0.0.1")
    parser.add_argument("--bootstrap-servers", help="a running Kafka (default: the run's own)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait in all")
    parser.add_argument("--json", action="store_true", help="print a summary line on stdout")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        state = args.state_dir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="shop-"))
        )
        summary = run_shop(args, state.resolve())
    if args.json:
        print(json.dumps(summary))
    if summary["equal"]:
        say(f"{summary['orders']} orders, {len(summary['crashes'])} crashes: the serving tables "
            f"and the caches equal what the database implies, for all {summary['customers']} "
            f"customers and {summary['cities']} cities ({summary['seconds']:.0f} s)")  # fmt: skip
        for row in summary["top"]:
            say(f"  {row['customer']}: revenue {row['revenue']} over {row['orders']} orders")
    else:
        say(
            "the stores differ from what the orders imply:\n  "
            + "\n  ".join(summary["differences"])
        )
        raise SystemExit(1)


if __name__ == "__main__":
    main()
