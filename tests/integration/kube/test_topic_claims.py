"""Two teams' namespaces applying the same Logs, on a real API server and a real broker (`direct`
backend): a topic belongs to one Log across the cluster.

The second Log of a name is Stalled (`TopicTaken`) naming the first and makes nothing; deleting it
(`deletionPolicy: Delete`) leaves the first's topic and records exactly as they were; the claim
holds across an operator restart; deleting the owner releases it and the waiting Log becomes
Ready on a topic of its own. A topic that was in Kafka before any Log claimed it is adopted and
kept when its Log is deleted. A Log deleted while the operator was down has its claims released
by the operator's sweep once it runs again. With per-namespace topic names both teams get their
own topics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kube.operator_harness import Cluster, Operator, condition, is_true, waiting

from distributary.devtools.controlplane import ControlPlane
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.records import TopicReader, produce
from distributary.local.broker import EmbeddedBroker
from distributary.plan.kafka_topics.topics import CreateTopic
from distributary.schema import EncodedRecord

NS_A, NS_B = "claims-team-a", "claims-team-b"
CLAIMS = "distributary.claims-test.claims"
API = "distributary.dev/v1alpha1"


def log(name: str, **spec: Any) -> dict[str, Any]:
    body = {"partitions": 1, "deletionPolicy": "Delete", **spec}
    return {"apiVersion": API, "kind": "Log", "metadata": {"name": name}, "spec": body}


@pytest.fixture(scope="module")
def teams(control_plane: ControlPlane) -> tuple[Cluster, Cluster]:
    first, second = Cluster(control_plane.kubeconfig, NS_A), Cluster(control_plane.kubeconfig, NS_B)
    first.install_crds()
    second.install_crds()
    return first, second


@pytest.fixture(scope="module")
def operator(
    teams: tuple[Cluster, Cluster], broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """One operator watching both teams' namespaces (as cluster admin: the chart's RBAC is
    tested elsewhere), on a claims topic of this module's own."""
    folder: Path = tmp_path_factory.mktemp("operator")
    flags = ("--namespace", NS_B, "--claims-topic", CLAIMS, "--claims-sweep-interval", "2")
    running = Operator(teams[0], broker.bootstrap_servers, folder, flags)
    running.start()
    yield running
    running.stop()


def records(count: int) -> list[EncodedRecord]:
    return [EncodedRecord(b"k", f"v{n}".encode()) for n in range(count)]


def stalled_by(cluster: Cluster, name: str, reason: str) -> dict[str, Any] | None:
    found = condition(cluster.get("dlog", name), "Stalled")
    return found if found and found["status"] == "True" and found["reason"] == reason else None


def events(cluster: Cluster, name: str, reason: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "events", "-n", cluster.namespace, "-o", "json")
    return [
        item
        for item in json.loads(out)["items"]
        if item["involvedObject"]["name"] == name and item["reason"] == reason
    ]


def ends(admin: KafkaAdmin, topic: str) -> dict[int, tuple[int, int]]:
    return admin.watermarks([topic]).get(topic, {})


def test_the_second_teams_log_of_a_name_is_taken_and_its_deletion_touches_nothing(
    teams: tuple[Cluster, Cluster], operator: Operator, broker: EmbeddedBroker
) -> None:
    first, second = teams
    admin = KafkaAdmin(broker.bootstrap_servers)
    first.apply(log("orders"))
    waiting(
        operator, "team a's Log orders Ready", lambda: is_true(first.get("dlog", "orders"), "Ready")
    )
    produce(broker.bootstrap_servers, "orders", records(3))

    second.apply(log("orders"))
    taken = waiting(
        operator,
        "team b's Log orders TopicTaken",
        lambda: stalled_by(second, "orders", "TopicTaken"),
    )
    assert "topic orders belongs to Log claims-team-a/orders" in taken["message"]
    assert "Log claims-team-b/orders makes and changes nothing" in taken["message"]
    ready = condition(second.get("dlog", "orders"), "Ready")
    assert ready is not None
    assert ready["status"] == "False"
    assert "topicName" not in (second.get("dlog", "orders") or {})["status"]
    warning = waiting(
        operator, "a TopicTaken event", lambda: events(second, "orders", "TopicTaken")
    )
    assert warning[0]["type"] == "Warning"

    second.kubectl("delete", "dlog", "orders", "-n", NS_B, "--wait=true", "--timeout=60s")
    assert second.get("dlog", "orders") is None
    assert ends(admin, "orders") == {0: (0, 3)}
    assert is_true(first.get("dlog", "orders"), "Ready")
    kept = waiting(operator, "a TopicKept event", lambda: events(second, "orders", "TopicKept"))
    assert (
        "it belongs to Log claims-team-a/orders, not to Log claims-team-b/orders"
        in kept[0]["message"]
    )


def test_a_claim_survives_a_restart_and_a_deleted_owner_hands_the_topic_on(
    teams: tuple[Cluster, Cluster], operator: Operator, broker: EmbeddedBroker
) -> None:
    first, second = teams
    admin = KafkaAdmin(broker.bootstrap_servers)
    first.apply(log("payments"))
    waiting(
        operator,
        "team a's Log payments Ready",
        lambda: is_true(first.get("dlog", "payments"), "Ready"),
    )
    produce(broker.bootstrap_servers, "payments", records(2))

    operator.stop()
    operator.start()  # a new process: what it knew of claims is only what the claims topic says
    second.apply(log("payments"))
    taken = waiting(
        operator,
        "team b's Log payments TopicTaken after a restart",
        lambda: stalled_by(second, "payments", "TopicTaken"),
    )
    assert "topic payments belongs to Log claims-team-a/payments" in taken["message"]
    assert ends(admin, "payments") == {0: (0, 2)}

    # The owner goes (Delete: its topic with it); the waiting Log gets a topic of its own.
    first.kubectl("delete", "dlog", "payments", "-n", NS_A, "--wait=true", "--timeout=60s")
    waiting(
        operator,
        "team b's Log payments Ready",
        lambda: is_true(second.get("dlog", "payments"), "Ready"),
        timeout=90,
    )
    status = (second.get("dlog", "payments") or {})["status"]
    assert status["topicName"] == "payments"
    assert status["endOffsets"] == {"0": 0}
    assert ends(admin, "payments") == {0: (0, 0)}


def test_a_topic_in_kafka_before_any_log_is_adopted_and_kept(
    teams: tuple[Cluster, Cluster], operator: Operator, broker: EmbeddedBroker
) -> None:
    first, _ = teams
    admin = KafkaAdmin(broker.bootstrap_servers)
    admin.create_topic(CreateTopic("legacy-ledger", 1, None, {}))
    produce(broker.bootstrap_servers, "legacy-ledger", records(1))
    first.apply(log("legacy-ledger"))
    waiting(
        operator,
        "Log legacy-ledger Ready",
        lambda: is_true(first.get("dlog", "legacy-ledger"), "Ready"),
    )
    first.kubectl("delete", "dlog", "legacy-ledger", "-n", NS_A, "--wait=true", "--timeout=60s")
    kept = waiting(
        operator, "a TopicKept event", lambda: events(first, "legacy-ledger", "TopicKept")
    )
    assert "adopted, not created by Distributary" in kept[0]["message"]
    assert ends(admin, "legacy-ledger") == {0: (0, 1)}


def test_a_log_deleted_while_the_operator_was_down_has_its_claim_swept(
    teams: tuple[Cluster, Cluster], operator: Operator, broker: EmbeddedBroker
) -> None:
    first, second = teams
    first.apply(log("ledger", deletionPolicy="Retain"))
    waiting(operator, "Log ledger Ready", lambda: is_true(first.get("dlog", "ledger"), "Ready"))
    produce(broker.bootstrap_servers, "ledger", records(3))
    second.apply(log("books", deletionPolicy="Retain", topicName="ledger"))
    waiting(
        operator,
        "team b's Log books TopicTaken",
        lambda: stalled_by(second, "books", "TopicTaken"),
    )

    operator.stop()  # no operator sees the deletion: no on.delete handler, no finalizer
    first.kubectl("delete", "dlog", "ledger", "-n", NS_A, "--wait=true", "--timeout=30s")
    operator.start()
    waiting(
        operator,
        "team b's Log books Ready on topic ledger",
        lambda: is_true(second.get("dlog", "books"), "Ready"),
    )
    assert (second.get("dlog", "books") or {})["status"]["topicName"] == "ledger"
    with TopicReader(broker.bootstrap_servers) as reader:
        kept, ends_then = reader.last("ledger", 10)
    assert ends_then == {0: 3}
    assert [(r.offset, r.key, r.value) for r in kept] == [
        (n, b"k", f"v{n}".encode()) for n in range(3)
    ]
    said = operator.log_file.read_text(errors="replace").splitlines()
    swept = [line for line in said if f"{NS_A}/ledger is gone" in line]
    assert len(swept) == 1
    assert swept[0].endswith(f"Log {NS_A}/ledger is gone: released its claims on ledger")


def test_per_namespace_topic_names_give_each_team_its_own_topic(
    teams: tuple[Cluster, Cluster], operator: Operator, broker: EmbeddedBroker
) -> None:
    first, second = teams
    admin = KafkaAdmin(broker.bootstrap_servers)
    first.apply(log("kept-name"))
    waiting(
        operator, "Log kept-name Ready", lambda: is_true(first.get("dlog", "kept-name"), "Ready")
    )

    operator.stop()
    operator.extra = (*operator.extra, "--topic-names", "{namespace}.{name}")
    operator.start()
    first.apply(log("inventory"))
    second.apply(log("inventory"))
    for team in teams:
        waiting(
            operator,
            f"Log {team.namespace}/inventory Ready",
            lambda team=team: is_true(team.get("dlog", "inventory"), "Ready"),  # type: ignore[misc]
        )
    assert (first.get("dlog", "inventory") or {})["status"]["topicName"] == f"{NS_A}.inventory"
    assert (second.get("dlog", "inventory") or {})["status"]["topicName"] == f"{NS_B}.inventory"
    assert ends(admin, f"{NS_A}.inventory") == {0: (0, 0)}
    assert ends(admin, f"{NS_B}.inventory") == {0: (0, 0)}
    # A Log made under the old naming keeps its topic: a Log's topic never changes.
    first.apply(log("kept-name", retention={"time": "2h"}))
    waiting(
        operator,
        "Log kept-name Ready again",
        lambda: is_true(first.get("dlog", "kept-name"), "Ready"),
    )
    assert (first.get("dlog", "kept-name") or {})["status"]["topicName"] == "kept-name"
    assert admin.describe_topic(f"{NS_A}.kept-name") is None
