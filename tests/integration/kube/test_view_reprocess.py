"""Kappa reprocessing under the operator: real API server, real broker, real Spark (`local`).

Changing a view's SQL starts revision 2 beside revision 1: it reads its input again from the
start into a topic of its own, while the output Log keeps serving revision 1's topic. Once
revision 2 has caught up (and stayed so for the cutover window), one status write makes it serve:
the output Log's topic moves to revision 2's, which by then holds the new query's complete
output. Revision 1's runner stops, and its topic is deleted after the grace period, since the
output says `deletionPolicy: Delete`, and its consumer group with it. (A view reading the edited
view's output reprocesses in turn, only once the edited view serves, and reads its new topic: the
chaos, under live input (`test_chaos.py`), and `test_local_cascade.py`, through the same view
reconcile.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kube.operator_harness import (
    Cluster,
    Operator,
    condition,
    is_true,
    read_to_the_end,
    wait_for,
)
from tests.integration.kube.operator_harness import waiting as harness_waiting
from tests.integration.spark_pipelines import read_topic

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.records import produce
from distributary.local.broker import EmbeddedBroker
from distributary.schema import RecordSchema

NAMESPACE = "reprocess-test"
OPERATOR_FLAGS = ("--spark-runtime", "local")
SCHEMA = "user STRING, amount INT"
UPGRADE = {"cutoverWindow": "4s", "retireAfter": "5s"}
EVENTS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "rp-events"},
    "spec": {"partitions": 2, "schema": SCHEMA, "key": ["user"]},
}
RECORDS = [{"user": f"u{i % 4}", "amount": i % 20} for i in range(60)]


def big(threshold: int) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "rp-big"},
        "spec": {
            "inputs": [{"log": "rp-events", "alias": "events"}],
            "sql": f"SELECT user, amount FROM events WHERE amount >= {threshold}",
            "output": {"mode": "append", "deletionPolicy": "Delete"},
            "upgrade": UPGRADE,
            "spark": {"trigger": "2s"},
        },
    }


def distributary(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distributary.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def view(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.get("dview", name) or {}


def serving(cluster: Cluster, name: str) -> int | None:
    return (view(cluster, name).get("status") or {}).get("servingRevision")


def serving_topic(cluster: Cluster, name: str) -> str | None:
    """The topic a reader of the Log `name` reads: its status says."""
    return ((cluster.get("dlog", name) or {}).get("status") or {}).get("topicName")


def values(broker: EmbeddedBroker, topic: str) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in read_topic(broker.bootstrap_servers, topic) if r.value]


def expected(threshold: int) -> list[tuple[str, int]]:
    return sorted((r["user"], r["amount"]) for r in RECORDS if r["amount"] >= threshold)


def pairs(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return sorted((r["user"], r["amount"]) for r in rows)


def runner_revisions(operator: Operator, name: str) -> list[str]:
    """The revisions of view `name` whose runner process lives."""
    found = []
    for pid_file in (operator.folder / "local" / NAMESPACE / name).glob("r*/runner.pid"):
        pid = int(pid_file.read_text().strip())
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(pid_file.parent / "runner-spec.json").encode() in cmdline:
            found.append(pid_file.parent.name)
    return sorted(found)


def caught_up(cluster: Cluster, broker: EmbeddedBroker, name: str, revision: int) -> bool:
    found = view(cluster, name)
    return (
        (found.get("status") or {}).get("servingRevision") == revision
        and not is_true(found, "Reprocessing")
        and read_to_the_end(found, broker.bootstrap_servers)
    )


def waiting(operator: Operator, what: str, probe: Any, timeout: float = 240) -> Any:
    """`waiting` with this module's longer default (Spark starts several times)."""
    return harness_waiting(operator, what, probe, timeout)


@pytest.fixture(scope="module")
def first(cluster: Cluster, operator: Operator, broker: EmbeddedBroker) -> None:
    """Revision 1 of the view, caught up with every record."""
    cluster.apply(EVENTS)
    wait_for("Log rp-events Ready", lambda: is_true(cluster.get("dlog", "rp-events"), "Ready"))
    schema = RecordSchema.parse(SCHEMA, ["user"])
    produce(broker.bootstrap_servers, "rp-events", [schema.encode(r) for r in RECORDS])
    cluster.apply(big(10))
    waiting(
        operator, "serving revision 1, caught up", lambda: caught_up(cluster, broker, "rp-big", 1)
    )


@pytest.fixture(scope="module")
def cutover(
    first: None, cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> dict[str, Any]:
    """The SQL edit, watched until revision 2 serves: what a reader saw on the way."""
    cluster.apply(big(15))
    seen: dict[str, Any] = {"while_catching_up": set(), "phases": set()}

    def served() -> bool:
        topic = serving_topic(cluster, "rp-big")  # read first: the Log follows the view
        found = view(cluster, "rp-big")
        rows = (found.get("status") or {}).get("revisions") or []
        phases = {(r["revision"], r["phase"]) for r in rows}
        seen["phases"] |= phases
        if (2, "CatchingUp") in phases and (found.get("status") or {}).get("servingRevision") == 1:
            seen["while_catching_up"].add(topic)
            seen["reprocessing"] = condition(found, "Reprocessing")
            seen["runners_during"] = runner_revisions(operator, "rp-big")
        if serving_topic(cluster, "rp-big") == "rp-big.r2":
            # Read at once: whatever a reader finds now is what cutover handed over.
            seen["at_cutover"] = values(broker, "rp-big.r2")
            return True
        return False

    waiting(operator, "revision 2 serving", served)
    return seen


def test_revision_2_runs_beside_revision_1_while_readers_read_revision_1(
    cutover: dict[str, Any],
) -> None:
    assert (2, "CatchingUp") in cutover["phases"]
    assert cutover["while_catching_up"] == {"rp-big.r1"}
    reprocessing = cutover["reprocessing"]
    assert reprocessing["status"] == "True"
    assert reprocessing["message"].startswith("revision 2 reprocessing")
    assert cutover["runners_during"] == ["r1", "r2"]


def test_after_cutover_readers_find_the_new_revisions_complete_output(
    cutover: dict[str, Any], broker: EmbeddedBroker
) -> None:
    assert pairs(cutover["at_cutover"]) == expected(15)
    # The old revision's output was complete too, and is another query's.
    assert pairs(values(broker, "rp-big.r1")) == expected(10)


def test_the_old_revision_stops_and_its_topic_and_group_go_after_the_grace_period(
    cutover: dict[str, Any], cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    waiting(
        operator,
        "revision 1's runner stopped",
        lambda: runner_revisions(operator, "rp-big") == ["r2"],
    )
    admin = KafkaAdmin(broker.bootstrap_servers)
    waiting(operator, "rp-big.r1 deleted", lambda: admin.describe_topic("rp-big.r1") is None)

    def rows() -> dict[int, dict[str, Any]]:
        return {r["revision"]: r for r in view(cluster, "rp-big")["status"]["revisions"]}

    waiting(operator, "revision 1 recorded as deleted", lambda: rows()[1].get("topicDeleted"))
    assert rows()[1]["phase"] == "Retired"
    # Its consumer group goes too: it never runs again.
    group = f"distributary.{NAMESPACE}.rp-big.r1"
    waiting(operator, "revision 1's group deleted", lambda: group not in admin.group_names())
    waiting(operator, "its group recorded as deleted", lambda: rows()[1].get("groupDeleted"))
    assert f"distributary.{NAMESPACE}.rp-big.r2" in admin.group_names()
    assert rows()[2]["phase"] == "Serving"
    assert view(cluster, "rp-big")["status"]["lastChange"]["classification"] == "Reprocess"


def test_wait_returns_once_the_serving_revision_covers_a_record(
    cutover: dict[str, Any], cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> None:
    ends = KafkaAdmin(broker.bootstrap_servers).end_offsets(["rp-events"])["rp-events"]
    partition, end = next((p, o) for p, o in sorted(ends.items()) if o > 0)
    common = ("-n", NAMESPACE, "--kubeconfig", str(cluster.kubeconfig))
    covered = distributary(
        "wait", "rp-big", "--covers", f"rp-events:{partition}:{end - 1}", "--caught-up",
        "--timeout", "120", *common,
    )  # fmt: skip
    assert covered.returncode == 0, covered.stderr
    assert covered.stdout.startswith("rp-big: done (revision 2, lag 0)")
    beyond = distributary(
        "wait", "rp-big", "--covers", f"rp-events:{partition}:{end}", "--timeout", "2", *common
    )
    assert beyond.returncode == 1
    assert f"still waiting for rp-events:{partition}:{end} (at {end})" in beyond.stderr
