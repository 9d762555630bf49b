"""A Sink's process that refuses its store says so where the operator reads it, wherever the
process runs: the metadata of its consumer group's commit.

The real process (`python -m distributary.sinks`) on the session's Kafka and PostgreSQL: a table
whose column has another type than the Log's is refused (exit code 3, the reason on stderr and in
the group's commit metadata, the position kept); once the table is fixed, the next process fills
it and its first mirroring clears the refusal.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.spark_pipelines import produce

from distributary.devtools.postgres import PostgresServer
from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker
from distributary.plan.kafka_topics.topics import CreateTopic
from distributary.plan.sinks.sink_plan import REFUSED_METADATA, SinkRun

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "refusals"
TOPIC = "refusal-accounts"
GROUP = "distributary.default.refusing.sink"


def _sink(spec: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "distributary.sinks", "--spec", str(spec)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


def test_a_refused_store_is_said_in_the_groups_metadata_until_a_process_fills_it(
    postgres: PostgresServer, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    postgres.create_database(DATABASE)
    postgres.execute("CREATE TABLE public.accounts (id INT PRIMARY KEY, owner INT)",
                     database=DATABASE)  # fmt: skip
    admin = KafkaAdmin(broker.bootstrap_servers)
    admin.create_topic(CreateTopic(TOPIC, 1, None, {}))
    produce(broker.bootstrap_servers, TOPIC,
            [(0, b'{"id":%d}' % i, json.dumps({"id": i, "owner": f"o{i}"}).encode())
             for i in range(5)])  # fmt: skip
    password = tmp_path / "password"
    password.write_text(postgres.password)
    run = SinkRun(name="default/refusing", group=GROUP, bootstrap_servers=broker.bootstrap_servers,
                  topic=TOPIC, columns=[("id", "INT"), ("owner", "STRING")], key=["id"],
                  table="public.accounts", host=postgres.host, port=postgres.port,
                  database=DATABASE, user=postgres.superuser, ssl_mode="disable",
                  password_file=str(password))  # fmt: skip
    spec = tmp_path / "spec.json"
    spec.write_text(run.model_dump_json())

    refused = _sink(spec)
    _, err = refused.communicate(timeout=120)
    assert refused.returncode == 3, err
    assert "refused" in err
    said = admin.committed_metadata(GROUP, TOPIC)
    assert said
    assert all(m.startswith(REFUSED_METADATA) for m in said)
    assert "owner" in said[0]
    assert admin.committed(GROUP)[TOPIC] == {0: 0}  # the position kept: nothing applied

    postgres.execute("DROP TABLE public.accounts", database=DATABASE)
    filling = _sink(spec)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if admin.committed_metadata(GROUP, TOPIC) == [""]:
                break
            time.sleep(0.5)
        assert admin.committed_metadata(GROUP, TOPIC) == [""]
        assert admin.committed(GROUP)[TOPIC] == {0: 5}
    finally:
        filling.terminate()
        filling.communicate(timeout=30)
    rows = postgres.execute("SELECT id, owner FROM public.accounts ORDER BY id", database=DATABASE)
    assert [tuple(r) for r in rows] == [(i, f"o{i}") for i in range(5)]
