"""A Sink as a cluster runs it: a Deployment of the job image on the node, writing a keyed Log
into a PostgreSQL table, its password read from a Secret where the pod runs.

Updates and tombstones keep arriving while the Sink's pod is deleted; the Deployment starts
another, which takes up where the table says the last one stopped. Afterwards the table is
compared exactly with what the log implies, as the database itself answers: the latest record of
each key, tombstoned keys absent.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from tests.integration.kube.operator_harness import Cluster, is_true, wait_for
from tests.integration.pods.pods import PIPELINES
from tests.integration.spark_pipelines import latest_table, produce, read_topic

from distributary.devtools.images import SPARK
from distributary.devtools.node import Node
from distributary.devtools.postgres import PostgresServer
from distributary.local.broker import EmbeddedBroker
from distributary.plan.sinks.sink_plan import SINK_LABEL

DATABASE, PASSWORD, TOPIC = "serving", "pod-Secret-7731", "s-accounts"


@pytest.fixture(scope="module")
def database(pods_postgres: PostgresServer) -> PostgresServer:
    pods_postgres.create_database(DATABASE)
    pods_postgres.execute(f"CREATE ROLE server LOGIN PASSWORD '{PASSWORD}'")
    pods_postgres.execute("GRANT CREATE ON SCHEMA public TO server", database=DATABASE)
    return pods_postgres


def record(account: int, version: int) -> tuple[int, bytes, bytes | None]:
    key = json.dumps({"id": account}, separators=(",", ":")).encode()
    if version % 7 == 6:
        return account % 2, key, None  # a tombstone: the account is closed
    value = {"id": account, "owner": f"o{account}", "balance": version * 100 + account}
    return account % 2, key, json.dumps(value).encode()


class Writer:
    """Appends a version of each of 50 accounts, round after round, until stopped."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.version = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopping.is_set():
            produce(self.bootstrap, TOPIC, [record(a, self.version) for a in range(50)])
            self.version += 1
            time.sleep(0.5)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(60)


def sink_pods(node: Node) -> list[dict[str, Any]]:
    selector = quote(f"{SINK_LABEL}=accounts")
    found = node.api("GET", f"/api/v1/namespaces/{PIPELINES}/pods?labelSelector={selector}")
    return [
        pod
        for pod in found["items"]
        if "deletionTimestamp" not in pod["metadata"]
        and (pod["status"].get("containerStatuses") or [{}])[0].get("ready")
    ]


def table(database: PostgresServer) -> dict[int, tuple[Any, ...]]:
    """The table's rows by id; none before the Sink made it."""
    try:
        rows = database.execute("SELECT id, owner, balance FROM accounts", database=DATABASE)
    except psycopg.errors.UndefinedTable:
        return {}
    return {row[0]: tuple(row) for row in rows}


def expected(broker: EmbeddedBroker) -> dict[int, tuple[Any, ...]]:
    latest = latest_table(read_topic(broker.bootstrap_servers, TOPIC))
    return {
        json.loads(key)["id"]: (value["id"], value["owner"], value["balance"])
        for key, value in latest.items()
    }


def test_a_sink_in_its_pod_keeps_the_table_equal_to_the_log_while_its_pod_is_deleted(
    installed: Cluster, node: Node, pods_broker: EmbeddedBroker, database: PostgresServer
) -> None:
    installed.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "serving-db"},
            "stringData": {"password": PASSWORD},
        },
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": TOPIC},
            "spec": {
                "partitions": 2,
                "compaction": True,
                "key": ["id"],
                "schema": "id INT, owner STRING, balance BIGINT",
            },
        },
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Sink",
            "metadata": {"name": "accounts"},
            "spec": {
                "log": TOPIC,
                "postgres": {
                    "host": node.address,
                    "port": database.port,
                    "database": DATABASE,
                    "user": "server",
                    "passwordSecret": {"name": "serving-db"},
                    "sslMode": "disable",
                    "table": "public.accounts",
                },
            },
        },
    )
    wait_for("Log Ready", lambda: is_true(installed.get("dlog", TOPIC), "Ready"), 120)
    with Writer(pods_broker.bootstrap_servers) as writer:
        wait_for("the Sink Ready", lambda: is_true(installed.get("sink", "accounts"), "Ready"), 300)
        [first] = wait_for("the Sink's pod ready", lambda: sink_pods(node), timeout=120)
        assert first["spec"]["nodeName"] == node.name
        assert first["status"]["containerStatuses"][0]["image"].endswith(SPARK.tag)
        wait_for("rows in the table", lambda: table(database), timeout=120)
        installed.kubectl("delete", "pod", "-n", PIPELINES, first["metadata"]["name"])

        def replaced() -> bool:
            uids = {pod["metadata"]["uid"] for pod in sink_pods(node)}
            return bool(uids) and first["metadata"]["uid"] not in uids

        wait_for("another Sink pod ready", replaced, timeout=180)
        versions = writer.version
        wait_for("more records written after it", lambda: writer.version > versions + 4, 60)
    want = expected(pods_broker)
    assert want, "the log holds no account"
    wait_for("the table equal to the log", lambda: table(database) == want, timeout=180)
    installed.kubectl("delete", "sink", "accounts", "-n", PIPELINES)  # its pod leaves the node
