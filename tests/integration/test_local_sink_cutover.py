"""A view's cutover carried through to its Sinks' stores: the table (and the Redis keys) of the new
revision are filled beside the ones readers read, and readers are switched in one transaction
(one script).

A producer appends records at a steady rate from the start to the end. A first `distributary run`
keeps `sc-per-user` (records per user) and its PostgreSQL Sink `public.sc_per_user`. The view's
SQL is then edited to also sum the amounts (a new column: a reprocess) and a second run started:
revision 2 reprocesses beside revision 1, cuts over, and the Sink fills `sc_per_user__r2` and
switches. All along, a reader queries `public.sc_per_user` every few milliseconds, as an
application would. What it saw is checked: the table gained the new column once and never lost
it, and the total of the counts never went down, so no reader saw revision 2's table half built
(a reprocess written into the table readers read would count from zero again). At the end the
table equals exactly what the new query makes of every record appended, and revision 1's rows
are kept in `sc_per_user__r1`. A Redis Sink of the same view is read alike, every key at once
in one script: each read saw one revision's keys only, with counts that never went down, and at
the end the cache equals what the new query makes of every record, with nothing left beside.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from tests.integration.spark_pipelines import SteadyProducer, wait_for_run

from distributary.devtools.postgres import PostgresServer
from distributary.devtools.redis import RedisServer
from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "cutover"
PASSWORD = "cut-Secret-9182"
PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: sc-events}
spec: {partitions: 2, schema: "id INT, user STRING, amount INT"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: sc-per-user}
spec:
  inputs: [{log: sc-events, alias: e}]
  sql: SELECT user, count(*) AS n COLUMNS FROM e GROUP BY user
  output: {mode: upsert, key: [user]}
  upgrade: {cutoverWindow: 3s}
  spark: {trigger: 2s}
---
apiVersion: distributary.dev/v1alpha1
kind: Sink
metadata: {name: sc-per-user}
spec:
  log: sc-per-user
  postgres:
    host: 127.0.0.1
    port: PORT
    database: cutover
    user: reporter
    passwordSecret: {name: cutover-db}
    sslMode: disable
    table: public.sc_per_user
---
apiVersion: distributary.dev/v1alpha1
kind: Sink
metadata: {name: sc-cache}
spec:
  log: sc-per-user
  redis: {host: 127.0.0.1, port: REDIS_PORT, keyPrefix: "sc:"}
"""
EDITED = ", sum(amount) AS total"
# Every key under the prefix at one moment: a script runs alone.
READ_ALL = """
local found = {}
for _, key in ipairs(redis.call("KEYS", "sc:*")) do
  table.insert(found, redis.call("GET", key))
end
return found
"""


class CacheReader(threading.Thread):
    """An application reading the whole cache without pause, at one moment each time: for each
    read, which revisions' values it held (with the new column or not) and the total count."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis(host="127.0.0.1", port=port)
        self.seen: list[tuple[frozenset[bool], int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            values = [json.loads(v) for v in self.client.eval(READ_ALL, 0)]  # type: ignore[no-untyped-call]
            if values:
                kinds = frozenset("total" in v for v in values)
                self.seen.append((kinds, sum(int(v["n"]) for v in values)))
            time.sleep(0.01)


class Reader(threading.Thread):
    """An application reading the table without pause: for each query, whether the table had
    the new column and the total of the counts."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.seen: list[tuple[bool, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as db:
            while not self.stopping.is_set():
                try:
                    # One statement: one snapshot of whichever table has the name now.
                    row = db.execute(
                        "SELECT to_jsonb(t) ? 'total', n FROM public.sc_per_user t"
                    ).fetchall()
                except psycopg.errors.UndefinedTable:
                    time.sleep(0.05)
                    continue
                if row:
                    self.seen.append((bool(row[0][0]), sum(int(r[1]) for r in row)))
                time.sleep(0.01)


@pytest.fixture(scope="module")
def database(postgres: PostgresServer) -> PostgresServer:
    postgres.create_database(DATABASE)
    postgres.execute(f"CREATE ROLE reporter LOGIN PASSWORD '{PASSWORD}'")
    postgres.execute("GRANT CREATE ON SCHEMA public TO reporter", database=DATABASE)
    return postgres


def _run(folder: Path, broker: EmbeddedBroker, number: int) -> tuple[subprocess.Popen[bytes], Path]:
    said = folder / f"run-{number}.err"
    with said.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "distributary.cli", "run", str(folder / "pipeline"),
             "--bootstrap-servers", broker.bootstrap_servers, "--state-dir", str(folder / "state"),
             "--secrets", str(folder / "secrets"), "--cores", "2"],
            stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT,
        )  # fmt: skip
    return process, said


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)


@pytest.fixture(scope="module")
def cutover(
    database: PostgresServer,
    broker: EmbeddedBroker,
    tmp_path_factory: pytest.TempPathFactory,
    redis_server: RedisServer,
) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("sink-cutover")
    (folder / "pipeline").mkdir()
    pipeline = PIPELINE.replace("REDIS_PORT", str(redis_server.port))
    pipeline = pipeline.replace("PORT", str(database.port))
    (folder / "pipeline" / "pipeline.yaml").write_text(pipeline.replace("COLUMNS", ""))
    (folder / "secrets" / "cutover-db").mkdir(parents=True)
    (folder / "secrets" / "cutover-db" / "password").write_text(PASSWORD)
    dsn = database.dsn(DATABASE, user="reporter", password=PASSWORD)
    reader = Reader(dsn)
    cache = CacheReader(redis_server.port)
    producer = SteadyProducer(broker.bootstrap_servers, "sc-events")
    run, said = _run(folder, broker, 1)
    try:
        wait_for_run("the Log's topic", lambda: _topic(broker), run, said, 120)
        producer.start()
        reader.start()
        cache.start()
        wait_for_run("revision 1's table has rows", lambda: bool(reader.seen), run, said, 240)
        _stop(run)
        (folder / "pipeline" / "pipeline.yaml").write_text(pipeline.replace("COLUMNS", EDITED))
        run, said = _run(folder, broker, 2)
        wait_for_run(
            "the table switched to revision 2 while records arrive",
            lambda: bool(reader.seen) and reader.seen[-1][0],
            run, said, 300,
        )  # fmt: skip
        switched_at = len(producer.sent)
        time.sleep(2)  # records still arrive after the switch
        records = producer.stop()
        expected = _expected(records)
        wait_for_run("the table holds every record", lambda: _table(dsn) == expected, run, said,
                     240)  # fmt: skip
        wait_for_run("the cache holds every record", lambda: _cache(cache.client) == expected,
                     run, said, 120)  # fmt: skip
    finally:
        producer.stop()
        reader.stopping.set()
        cache.stopping.set()
        _stop(run)
    reader.join(10)
    cache.join(10)
    return {"seen": reader.seen, "records": records, "switched_at": switched_at, "dsn": dsn,
            "said": said.read_text(errors="replace"), "cache": cache.seen,
            "redis": cache.client}  # fmt: skip


def _topic(broker: EmbeddedBroker) -> bool:
    return bool(
        KafkaAdmin(broker.bootstrap_servers).list_partitions(["sc-events"]).get("sc-events")
    )


def _expected(records: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    counts = Counter(r["user"] for r in records)
    totals: Counter[str] = Counter()
    for r in records:
        totals[r["user"]] += r["amount"]
    return {user: (counts[user], totals[user]) for user in counts}


def _cache(client: redis.Redis) -> dict[str, tuple[int, int]]:
    found = {}
    for key in client.scan_iter(match="sc:*"):
        value = json.loads(client.get(key) or b"{}")
        found[key.decode()[3:]] = (int(value.get("n", -1)), int(value.get("total", -1)))
    return found


def _table(dsn: str, table: str = "public.sc_per_user") -> dict[str, tuple[int, int]]:
    with psycopg.connect(dsn) as db:
        rows = db.execute(f'SELECT t."user", n, total FROM {table} t').fetchall()
    return {str(u): (int(n), int(t)) for u, n, t in rows}


def test_readers_saw_the_new_revisions_table_only_whole(cutover: dict[str, Any]) -> None:
    seen = cutover["seen"]
    flags = [has_total for has_total, _ in seen]
    switch = flags.index(True)
    assert not any(flags[:switch])
    assert all(flags[switch:]), "the table switched back"
    totals = [total for _, total in seen]
    drops = [(i, a, b) for i, (a, b) in enumerate(itertools.pairwise(totals)) if b < a]
    assert drops == [], f"the counts went down (a half-built table was read): {drops[:5]}"
    assert switch > 0  # read before the switch
    assert len(seen) - switch > 10  # and after


def test_the_table_is_exactly_what_the_new_query_makes_of_every_record(
    cutover: dict[str, Any],
) -> None:
    assert len(cutover["records"]) > cutover["switched_at"]  # records arrived after the switch
    assert _table(cutover["dsn"]) == _expected(cutover["records"])


def test_the_previous_revisions_rows_are_kept_beside(cutover: dict[str, Any]) -> None:
    with psycopg.connect(cutover["dsn"]) as db:
        kept = db.execute("SELECT sum(n) FROM public.sc_per_user__r1").fetchone()
        left = db.execute("SELECT to_regclass('public.sc_per_user__r2')").fetchone()
    assert kept is not None
    assert 0 < int(kept[0]) <= len(cutover["records"])
    assert left == (None,)


def test_cache_readers_saw_one_revisions_keys_at_a_time_and_the_new_one_only_whole(
    cutover: dict[str, Any],
) -> None:
    seen = cutover["cache"]
    assert all(len(kinds) == 1 for kinds, _ in seen), "a read mixed two revisions' keys"
    flags = [next(iter(kinds)) for kinds, _ in seen]
    switch = flags.index(True)
    assert switch > 0
    assert not any(flags[:switch])
    assert all(flags[switch:]), "the cache switched back"
    totals = [total for _, total in seen]
    drops = [(i, a, b) for i, (a, b) in enumerate(itertools.pairwise(totals)) if b < a]
    assert drops == [], f"the counts went down (half-built keys were read): {drops[:5]}"


def test_the_cache_is_exactly_what_the_new_query_makes_and_nothing_is_left_beside(
    cutover: dict[str, Any],
) -> None:
    client = cutover["redis"]
    assert _cache(client) == _expected(cutover["records"])
    assert list(client.scan_iter(match="distributary:beside:*")) == []
    positions = sorted(k.decode() for k in client.scan_iter(match="distributary:sink:*sc-cache*"))
    assert positions == ["distributary:sink:default/sc-cache:sc-per-user.r2"]
