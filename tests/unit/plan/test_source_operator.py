"""What the operator makes of a Source: its conditions from what it observed, the password as a
reference Connect resolves, and the KafkaConnector that carries its connector under Strimzi."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api.source import SecretKey, Source
from distributary.plan.sources.source_plan import (
    ConnectorState,
    SlotReading,
    connector_config,
    kafka_connector_manifest,
    password_reference,
    source_observation,
)
from distributary.plan.status.conditions import Problem


def _source(**spec: Any) -> Source:
    return Source.model_validate(
        {
            "metadata": {"name": "shop", "namespace": "sales"},
            "spec": {
                "postgres": {
                    "host": "db.example",
                    "database": "shop",
                    "user": "cdc",
                    "passwordSecret": {"name": "shop-db"},
                },
                "tables": [{"name": "public.orders", "schema": "id INT", "key": ["id"]}],
                "walWarning": "1Mi",
                **spec,
            },
        }
    )


RUNNING = ConnectorState("RUNNING", ("RUNNING",))


def test_a_running_connector_is_ready_and_capturing() -> None:
    seen = source_observation(_source(), 3, connector=RUNNING, slot=SlotReading(True, True, 10))
    assert (seen.problems, seen.work, seen.extras) == ((), (), ())
    assert seen.ready_reason == "Capturing"
    assert "public.orders" in seen.ready_message
    assert seen.generation == 3


@pytest.mark.parametrize(
    ("connector", "unreachable", "reason"),
    [
        (None, None, "Starting"),
        (ConnectorState("RUNNING", ()), None, "Starting"),
        (ConnectorState("UNASSIGNED", ("UNASSIGNED",)), None, "Starting"),
        (ConnectorState("RUNNING", ("FAILED",), "ERROR: slot in use"), None, "ConnectorFailed"),
        (ConnectorState("FAILED", ()), None, "ConnectorFailed"),
        (RUNNING, "spec.postgres.host: refused", "DatabaseUnreachable"),
    ],
)
def test_work_under_way_makes_it_reconciling(
    connector: ConnectorState | None, unreachable: str | None, reason: str
) -> None:
    seen = source_observation(_source(), 1, connector=connector, unreachable=unreachable)
    assert [w.reason for w in seen.work] == [reason]
    assert seen.problems == ()


def test_a_failed_task_says_why() -> None:
    failed = ConnectorState("RUNNING", ("FAILED",), "ERROR: replication slot is active")
    (work,) = source_observation(_source(), 1, connector=failed).work
    assert "replication slot is active" in work.message
    assert "back-off" in work.message


def test_paused_as_the_spec_asks_is_ready_with_reason_paused() -> None:
    paused = ConnectorState("PAUSED", ("PAUSED",))
    seen = source_observation(_source(paused=True), 1, connector=paused)
    assert seen.work == ()
    assert seen.ready_reason == "Paused"


def test_problems_make_it_stalled_before_anything_else() -> None:
    problem = Problem("TableProblem", "spec.tables[0].name: no such table")
    seen = source_observation(_source(), 1, problems=[problem], connector=RUNNING)
    assert seen.problems == (problem,)


def test_a_slot_keeping_more_wal_than_the_warning_adds_data_loss_risk() -> None:
    kept = SlotReading(True, False, 2 * 1024 * 1024)
    (risk,) = source_observation(_source(), 1, connector=RUNNING, slot=kept).extras
    assert (risk.type, risk.status, risk.reason) == ("DataLossRisk", "True", "DataLossRisk")
    assert "nobody reads it" in risk.message
    below = SlotReading(True, True, 1024)
    assert source_observation(_source(), 1, connector=RUNNING, slot=below).extras == ()


def test_the_password_is_a_reference_the_workers_resolve() -> None:
    secret = SecretKey(name="shop-db", key="password")
    assert password_reference("kubernetes", "sales", secret) == "${secrets:sales/shop-db:password}"
    assert (
        password_reference("/opt/kafka/secrets/", "sales", secret)
        == "${dir:/opt/kafka/secrets/shop-db:password}"
    )


def test_the_kafka_connector_carries_the_config_without_its_reserved_keys() -> None:
    config = connector_config(
        _source(), {"public.orders": "shop-orders"}, "${secrets:sales/shop-db:password}"
    )
    owner = {"apiVersion": "distributary.dev/v1alpha1", "kind": "Source", "name": "shop",
             "uid": "u-1", "controller": True}  # fmt: skip
    manifest = kafka_connector_manifest(
        "kafka.strimzi.io/v1", "distributary.sales.shop", "sales", "connect", config, True, owner
    )
    assert manifest["apiVersion"] == "kafka.strimzi.io/v1"
    assert manifest["kind"] == "KafkaConnector"
    assert manifest["metadata"]["labels"]["strimzi.io/cluster"] == "connect"
    assert manifest["metadata"]["ownerReferences"] == [owner]
    spec = manifest["spec"]
    assert spec["class"] == "io.debezium.connector.postgresql.PostgresConnector"
    assert spec["tasksMax"] == 1
    assert spec["state"] == "paused"
    assert not {"name", "connector.class", "tasks.max"} & set(spec["config"])
    assert spec["config"]["plugin.name"] == "pgoutput"
    assert spec["config"]["database.password"] == "${secrets:sales/shop-db:password}"
    elsewhere = kafka_connector_manifest(
        "kafka.strimzi.io/v1", "c", "kafka", "connect", config, False, None
    )
    assert "ownerReferences" not in elsewhere["metadata"]
    assert elsewhere["spec"]["state"] == "running"


def test_an_interrupted_snapshot_adds_snapshot_interrupted_saying_what_to_do() -> None:
    (found,) = source_observation(
        _source(), 1, connector=RUNNING, interrupted="delete the Source and apply it again"
    ).extras
    assert (found.type, found.status, found.reason) == (
        "SnapshotInterrupted",
        "True",
        "SnapshotInterrupted",
    )
    assert found.message == "delete the Source and apply it again"
