"""`LocalRun.stop` destroys every Kafka client it made before it stops the broker.

librdkafka destroys a client when Python frees it. A client still alive when `distributary run`
has stopped its embedded broker is destroyed by the interpreter's last collection, against a
broker that is gone, and that teardown can block: a run printed its summary and then did not
exit (the process bounds its exit, `cli.run.leave_within`, and failed instead). So once `stop`
returns, none of the run's clients may be left: the ones alive in this process before the run
and after it are compared, the collector run first so that only what is still referenced
counts.
"""

from __future__ import annotations

import gc
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from tests.integration.spark_pipelines import TEST_SPARK_CONF

from distributary.graph import load_pipeline
from distributary.local.broker import EmbeddedBroker
from distributary.local.run import LocalRun

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: lst-events}
spec: {partitions: 1, schema: "who STRING, amount INT"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: lst-totals}
spec:
  inputs: [{log: lst-events, alias: e}]
  sql: SELECT who, sum(amount) AS amount FROM e GROUP BY who
  output: {mode: upsert, key: [who]}
"""


def open_clients() -> set[int]:
    """The Kafka clients of this process whose librdkafka handle is not destroyed: every admin
    client (it has no close), consumers and producers not closed."""
    gc.collect()
    found = set()
    for obj in gc.get_objects():
        try:
            if isinstance(obj, AdminClient):
                pass
            elif isinstance(obj, Consumer):
                obj.assignment()  # RuntimeError once closed
            elif isinstance(obj, Producer):
                obj.poll(0)  # RuntimeError once closed
            else:
                continue
        except RuntimeError:
            continue
        found.add(id(obj))
    return found


def test_a_stopped_run_holds_no_kafka_client(tmp_path: Path, broker: EmbeddedBroker) -> None:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    before = open_clients()
    local = LocalRun(
        load_pipeline([tmp_path]),
        [tmp_path],
        tmp_path / "state",
        bootstrap_servers=broker.bootstrap_servers,
        say=lambda _text: None,
        spark_conf=TEST_SPARK_CONF,
    )
    local.state_dir.mkdir()
    local.start_kafka()
    local.prepare(broker.bootstrap_servers)
    local.reconcile()  # a round asks Kafka through every client the run keeps
    during = open_clients() - before
    assert during, "the run made no Kafka client: the test would prove nothing"
    local.stop()
    left = open_clients() - before
    assert not left, f"{len(left)} of the run's {len(during)} Kafka client(s) left after stop"
