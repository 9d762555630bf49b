"""Change data capture from PostgreSQL with Debezium on a real Kafka Connect worker.

The worker (`local.connect.ConnectWorker`) runs in distributed mode with exactly-once source
delivery against the embedded broker; PostgreSQL 15 and Redis are the Debian packages' servers.
A connector is configured here literally, as a person would write it: Debezium's PostgreSQL
connector on `pgoutput`, its envelope flattened (`ExtractNewRecordState`, deletes as a
`__deleted` record then a tombstone), the table's topic renamed to a plain one, the database
password read by the worker from a secrets folder (`${dir:...}`), never stored in Kafka.

What reaches the topic is checked exactly, read as committed records: the snapshot, each kind of
change, a column added. Workers on the secured broker (SASL_SSL, and mTLS with the key and
certificate in two files) capture changes too, and write no password anywhere. (A worker killed
while rows are written is `test_local_source`'s, under `distributary run`.)
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from tests.integration.secured_kafka import SecuredKafka, start_secured_kafka
from tests.integration.spark_pipelines import Read, read_topic

from distributary.backends.connect import ConnectClient, ConnectError
from distributary.devtools.postgres import PostgresServer
from distributary.devtools.redis import RedisServer
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.connection import read_properties_file
from distributary.local.broker import EmbeddedBroker
from distributary.local.connect import ConnectWorker
from distributary.plan.access.kafka_connection import KafkaSecurity

TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer) -> Path:
    folder = tmp_path_factory.mktemp("connect-secrets")
    (folder / "password").write_text(postgres.password)
    return folder


@pytest.fixture(scope="module")
def worker(
    tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker, secrets_dir: Path
) -> Iterator[ConnectWorker]:
    started = time.monotonic()
    with ConnectWorker(
        tmp_path_factory.mktemp("connect"),
        broker.bootstrap_servers,
        group_id="cdc-tests",
        topic_prefix="cdc-tests.connect",
        secrets_dir=secrets_dir,
    ) as running:
        TIMINGS["worker start"] = time.monotonic() - started
        yield running
    print("\ntimings:", json.dumps({k: round(v, 1) for k, v in TIMINGS.items()}))


def connector_config(
    postgres: PostgresServer, secrets_dir: Path, *, name: str, table: str, topic: str
) -> dict[str, str]:
    """A Debezium PostgreSQL connector for `public.{table}` into `topic`, exactly once."""
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": postgres.host,
        "database.port": str(postgres.port),
        "database.user": postgres.superuser,
        "database.password": f"${{dir:{secrets_dir}:password}}",
        "database.dbname": "shop",
        "plugin.name": "pgoutput",
        "slot.name": f"{name}_slot",
        "publication.name": f"{name}_publication",
        "publication.autocreate.mode": "filtered",
        "table.include.list": f"public.{table}",
        "topic.prefix": name,
        "snapshot.mode": "initial",
        "decimal.handling.mode": "string",
        "time.precision.mode": "connect",
        "transforms": "unwrap,route",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        "transforms.unwrap.delete.tombstone.handling.mode": "rewrite-with-tombstone",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": f"{name}\\.public\\.{table}",
        "transforms.route.replacement": topic,
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
        "exactly.once.support": "required",
        "transaction.boundary": "poll",
    }


def wait_running(client: ConnectClient, name: str, timeout: float = 60.0) -> dict[str, Any]:
    """The connector's status once it and its task run; fails with the status otherwise."""
    deadline = time.monotonic() + timeout
    status: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        status = client.status(name)
        if status is not None:
            tasks = status.get("tasks", [])
            failed = [t for t in tasks if t["state"] == "FAILED"]
            assert not failed, f"{name}: task failed: {failed[0].get('trace', '')[:2000]}"
            running = [t for t in tasks if t["state"] == "RUNNING"]
            if status["connector"]["state"] == "RUNNING" and tasks and running == tasks:
                return status
        time.sleep(0.2)
    raise AssertionError(f"{name} not RUNNING within {timeout:.0f}s: {status}")


def records_of(broker: EmbeddedBroker, topic: str, count: int, timeout: float = 60.0) -> list[Read]:
    """The committed records of `topic` once there are at least `count` (or what there is)."""
    admin = KafkaAdmin(broker.bootstrap_servers)
    deadline = time.monotonic() + timeout
    records: list[Read] = []
    while time.monotonic() < deadline:
        if topic in admin.topic_names():
            records = read_topic(broker.bootstrap_servers, topic)
            if len(records) >= count:
                return records
        time.sleep(0.5)
    return records


def pairs(records: list[Read]) -> list[tuple[Any, Any]]:
    return [(json.loads(r.key or b"null"), r.json()) for r in records]


@pytest.fixture(scope="module")
def shop(postgres: PostgresServer) -> PostgresServer:
    postgres.create_database("shop")
    return postgres


def test_snapshot_then_each_change_arrives_exactly(
    worker: ConnectWorker, shop: PostgresServer, secrets_dir: Path, broker: EmbeddedBroker
) -> None:
    shop.execute(
        "CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(10,2), "
        "placed timestamptz DEFAULT now())",
        database="shop",
    )
    shop.execute(
        "INSERT INTO orders VALUES (1, 'ada', 12.50, '2026-01-02 03:04:05.678+00'), "
        "(2, 'bob', 0.99, '2026-01-02 03:04:06+01'), (3, 'cy', 1000.00, '2026-01-03 00:00:00+00')",
        database="shop",
    )
    client = ConnectClient(worker.url)
    name, topic = "orders_cdc", f"orders-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    client.put_config(
        name, connector_config(shop, secrets_dir, name=name, table="orders", topic=topic)
    )
    wait_running(client, name)
    TIMINGS["first connector RUNNING"] = time.monotonic() - started
    snapshot = records_of(broker, topic, 3)
    print("\nsnapshot:", json.dumps(pairs(snapshot)))
    TIMINGS["snapshot (3 rows) on the topic"] = time.monotonic() - started
    placed = {
        1: "2026-01-02T03:04:05.678000Z",
        2: "2026-01-02T02:04:06.000000Z",
        3: "2026-01-03T00:00:00.000000Z",
    }
    assert pairs(snapshot) == [
        (
            {"id": 1},
            {
                "id": 1,
                "customer": "ada",
                "amount": "12.50",
                "placed": placed[1],
                "__deleted": "false",
            },
        ),
        (
            {"id": 2},
            {
                "id": 2,
                "customer": "bob",
                "amount": "0.99",
                "placed": placed[2],
                "__deleted": "false",
            },
        ),
        (
            {"id": 3},
            {
                "id": 3,
                "customer": "cy",
                "amount": "1000.00",
                "placed": placed[3],
                "__deleted": "false",
            },
        ),
    ]

    for sql in (
        "INSERT INTO orders VALUES (4, 'dee', 5.00, '2026-02-01 12:00:00+00')",
        "UPDATE orders SET amount = 13.75 WHERE id = 1",
        "DELETE FROM orders WHERE id = 2",
        "ALTER TABLE orders ADD COLUMN shipped boolean, ADD COLUMN due date, "
        "ADD COLUMN packed timestamp",
        "INSERT INTO orders VALUES (5, 'eve', 7.25, '2026-02-02 00:00:00+00', true, "
        "'2026-03-01', '2026-02-03 04:05:06.789')",
    ):
        shop.execute(sql, database="shop")
    changes = records_of(broker, topic, 3 + 5)[3:]
    print("\nchanges:", json.dumps(pairs(changes)))
    assert pairs(changes) == [
        (
            {"id": 4},
            {
                "id": 4,
                "customer": "dee",
                "amount": "5.00",
                "placed": "2026-02-01T12:00:00.000000Z",
                "__deleted": "false",
            },
        ),
        (
            {"id": 1},
            {
                "id": 1,
                "customer": "ada",
                "amount": "13.75",
                "placed": placed[1],
                "__deleted": "false",
            },
        ),
        (
            {"id": 2},
            {
                "id": 2,
                "customer": None,
                "amount": None,
                # Not in the deleted row as logged (replica identity default: the key only);
                # Debezium fills in the column's default, and for now() that is the epoch.
                "placed": "1970-01-01T00:00:00.000000Z",
                "__deleted": "true",
            },
        ),
        ({"id": 2}, None),
        (
            {"id": 5},
            {
                "id": 5,
                "customer": "eve",
                "amount": "7.25",
                "placed": "2026-02-02T00:00:00.000000Z",
                "shipped": True,
                "due": 20513,
                "packed": 1770091506789,
                "__deleted": "false",
            },
        ),
    ]
    client.delete(name)


@pytest.fixture(scope="module")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    kafka = start_secured_kafka(tmp_path_factory.mktemp("secured"))
    try:
        yield kafka
    finally:
        kafka.stop()


def test_a_worker_over_sasl_ssl_captures_changes_and_writes_no_password(
    tmp_path: Path, secured_kafka: SecuredKafka, shop: PostgresServer, secrets_dir: Path
) -> None:
    security, _ = read_properties_file(secured_kafka.sasl_properties)
    shop.execute("CREATE TABLE parcels (id int PRIMARY KEY)", database="shop")
    shop.execute("INSERT INTO parcels VALUES (1), (2)", database="shop")
    with ConnectWorker(
        tmp_path / "connect",
        secured_kafka.sasl_servers,
        group_id="cdc-sasl",
        topic_prefix="cdc-sasl.connect",
        security=security,
        secrets_dir=secrets_dir,
    ) as worker:
        client = ConnectClient(worker.url)
        name = "parcels_cdc"
        config = connector_config(shop, secrets_dir, name=name, table="parcels", topic="parcels")
        client.put_config(name, config)
        wait_running(client, name)
        # Offsets commit in the transaction of the records they follow: the task's producer got
        # through SASL_SSL and committed.
        deadline = time.monotonic() + 60
        while not client.offsets(name)["offsets"]:
            assert time.monotonic() < deadline, "no source offsets committed within 60s"
            time.sleep(0.5)
        client.delete(name)
    for file in worker.folder.iterdir():
        assert secured_kafka.password not in file.read_text(errors="replace"), file.name
    assert shop.password not in (worker.folder / "worker.log").read_text()


def test_a_worker_over_mtls_with_key_and_certificate_in_two_files(
    tmp_path: Path, secured_kafka: SecuredKafka
) -> None:
    made = secured_kafka.certificates
    security = KafkaSecurity(
        protocol="SSL",
        ssl_ca_location=str(made.ca),
        ssl_certificate_location=str(made.client),
        ssl_key_location=str(made.client_key),
    )
    with ConnectWorker(
        tmp_path / "connect",
        secured_kafka.mtls_servers,
        group_id="cdc-mtls",
        topic_prefix="cdc-mtls.connect",
        security=security,
    ) as worker:
        assert ConnectClient(worker.url).connectors() == []


def test_connect_error_carries_connects_message(worker: ConnectWorker) -> None:
    client = ConnectClient(worker.url)
    assert client.status("no-such-connector") is None
    client.delete("no-such-connector")
    with pytest.raises(ConnectError, match=r"GET /connectors/no-such-connector/offsets.*404"):
        client.offsets("no-such-connector")


def test_redis_answers_ping(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    try:
        assert client.ping() is True
        client.set("greeting", "hello")
        assert client.get("greeting") == b"hello"
    finally:
        client.close()
