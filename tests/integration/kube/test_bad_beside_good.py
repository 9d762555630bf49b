"""A batch of resources with mistakes applied beside good ones, in one `kubectl apply`, on a real
API server, a real broker and real Spark (`local` runtime).

Each bad resource is one the API server accepts and only the operator or Kafka can refuse: a
Log asking for more replicas than there are brokers or for a config the broker's settings forbid,
a Log whose key is not a column, views whose SQL reads an unknown column or none of its inputs
or calls a function that runs code in the driver, a view whose input does not exist, a view
whose output asks for more replicas than there are brokers, views that start at a partition
the input does not have or at a time no record has reached. Every one ends with a condition that
names its field and a Warning event; every good one is Ready and its output right; the
operator's log holds no traceback, and a Kafka refusal is not asked again and again.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.kube.operator_harness import Cluster, Operator, condition, is_true, waiting
from tests.integration.spark_pipelines import read_topic

from distributary.kafka.records import produce
from distributary.local.broker import EmbeddedBroker
from distributary.schema import RecordSchema

NAMESPACE = "bad-beside-good"
OPERATOR_FLAGS = ("--spark-runtime", "local")
SCHEMA = "user STRING, amount INT"
API = "distributary.dev/v1alpha1"


def log(name: str, **spec: Any) -> dict[str, Any]:
    body = {"partitions": 1, "schema": SCHEMA, **spec}
    return {"apiVersion": API, "kind": "Log", "metadata": {"name": name}, "spec": body}


def view(name: str, sql: str, inputs: tuple[str, ...] = ("bg-orders",), **output: Any) -> dict:
    return {
        "apiVersion": API,
        "kind": "DerivedView",
        "metadata": {"name": name},
        "spec": {
            "inputs": [{"log": i, "alias": i.replace("-", "_")} for i in inputs],
            "sql": sql,
            "output": {"mode": "append", **output},
            "spark": {"trigger": "2s"},
        },
    }


def starting(name: str, position: dict[str, Any]) -> dict[str, Any]:
    """A view that starts its input at `position`."""
    body = view(name, "SELECT user, amount FROM bg_orders")
    body["spec"]["inputs"][0]["startingPosition"] = position
    return body


GOOD = [
    log("bg-orders"),
    view("bg-big", "SELECT user, amount FROM bg_orders WHERE amount >= 10"),
]
# name -> (kind, manifest, the field its condition must name, a phrase of its message)
BAD: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "bg-replicas": ("dlog", log("bg-replicas", replicas=3), "spec.replicas", "replication"),
    "bg-tiered": (
        "dlog",
        log("bg-tiered", config={"remote.storage.enable": "true"}),
        'spec.config["remote.storage.enable"]',
        "Tiered Storage",
    ),
    "bg-key": ("dlog", log("bg-key", key=["customer"]), "spec.key", "customer"),
    "bg-column": (
        "dview",
        view("bg-column", "SELECT user, price FROM bg_orders"),
        "spec.sql",
        "price",
    ),
    "bg-reads-nothing": (
        "dview",
        view("bg-reads-nothing", "SELECT 1 AS one"),
        "spec.sql",
        "bg_orders",
    ),
    "bg-reflect": (
        "dview",
        view(
            "bg-reflect",
            "SELECT reflect('java.lang.System', 'exit', '1') AS x, user FROM bg_orders",
        ),
        "spec.sql",
        "reflect",
    ),
    "bg-missing-input": (
        "dview",
        view("bg-missing-input", "SELECT user FROM bg_nowhere", inputs=("bg-nowhere",)),
        "spec.inputs",
        "bg-nowhere",
    ),
    "bg-view-replicas": (
        "dview",
        view("bg-view-replicas", "SELECT user FROM bg_orders", replicas=3),
        "spec.output.replicas",
        "replication",
    ),
    "bg-start-partition": (
        "dview",
        starting("bg-start-partition", {"from": "Offsets", "offsets": {"4": 0}}),
        "spec.inputs[0].startingPosition.offsets",
        "partition 4",
    ),
    "bg-start-future": (
        "dview",
        starting("bg-start-future", {"from": "Timestamp", "timestamp": "2099-01-01T00:00:00Z"}),
        "spec.inputs[0].startingPosition.timestamp",
        "reached",
    ),
}


@pytest.fixture(scope="module")
def applied(cluster: Cluster, operator: Operator, broker: EmbeddedBroker) -> None:
    """Everything in one apply, bad and good interleaved."""
    manifests = [GOOD[0], *(m for _, m, _, _ in BAD.values()), GOOD[1]]
    cluster.apply(*manifests)


def said(resource: dict[str, Any] | None) -> dict[str, Any] | None:
    """The condition that says what is wrong: Stalled, or a Ready False that says why."""
    stalled = condition(resource, "Stalled")
    if stalled is not None and stalled.get("status") == "True":
        return stalled
    ready = condition(resource, "Ready")
    if (
        ready is not None
        and ready.get("status") == "False"
        and ready.get("reason")
        not in (
            None,
            "Reconciling",
        )
    ):
        return ready
    return None


@pytest.mark.parametrize("name", list(BAD))
def test_each_bad_resource_has_a_condition_naming_its_field_and_a_warning_event(
    applied: None, cluster: Cluster, operator: Operator, name: str
) -> None:
    kind, _, field, phrase = BAD[name]

    def named() -> dict[str, Any] | None:
        found = said(cluster.get(kind, name))
        message = (found or {}).get("message") or ""
        return found if field in message and phrase in message else None

    waiting(operator, f"{kind} {name} saying {field}", named, 120)
    events = cluster.kubectl(
        "get", "events", "-n", cluster.namespace,
        "--field-selector", f"involvedObject.name={name},type=Warning", "-o", "name",
    )  # fmt: skip
    assert events.strip(), f"no Warning event on {kind} {name}"


def test_the_good_ones_are_ready_and_their_output_is_exact(
    applied: None, cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    schema = RecordSchema.parse(SCHEMA)
    rows = [{"user": f"u{i % 3}", "amount": i} for i in range(30)]
    produce(broker.bootstrap_servers, "bg-orders", [schema.encode(r) for r in rows])
    waiting(
        operator, "Log bg-orders Ready", lambda: is_true(cluster.get("dlog", "bg-orders"), "Ready")
    )
    waiting(
        operator, "view bg-big Ready", lambda: is_true(cluster.get("dview", "bg-big"), "Ready"), 180
    )
    expected = sorted((r["user"], r["amount"]) for r in rows if r["amount"] >= 10)

    def output() -> list[tuple[str, int]] | None:
        read = read_topic(broker.bootstrap_servers, "bg-big.r1")
        got = sorted((v["user"], v["amount"]) for v in (json.loads(r.value) for r in read))
        return got if len(got) >= len(expected) else None

    assert waiting(operator, "bg-big's output", output, 120) == expected


def test_the_operator_logged_no_traceback_and_did_not_ask_kafka_again_and_again(
    applied: None, cluster: Cluster, operator: Operator
) -> None:
    waiting(
        operator,
        "Log bg-replicas Stalled",
        lambda: said(cluster.get("dlog", "bg-replicas")),
        60,
    )
    text = operator.logs(tail=None)  # every start, whole
    assert "Traceback" not in text, text[-3000:]
    # A refusal is recorded once per change of the spec, not retried every few seconds.
    tries = [line for line in text.splitlines() if "bg-replicas" in line and "temporarily" in line]
    assert tries == [], tries
