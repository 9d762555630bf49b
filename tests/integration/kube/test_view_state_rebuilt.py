"""A view that keeps state never resumes on empty state: real API server, broker and Spark.

An upsert view counts each user's records (and sums their amounts) while records arrive at a
steady rate. Once revision 1 serves and has read live records, its runner is killed (its whole
process group, as a lost node would) and its checkpoint folder deleted. The operator starts the
ended application again; the runner finds no checkpoint while its group has read records, so it
does not resume with empty counts (which would overwrite correct rows with partial ones): it
reports CheckpointLost and revision 2 rebuilds the state from the start of the input beside it,
serving once it keeps up. Then the view is deleted and created again with the same name: its
first revision is numbered past the old ones, so it writes a topic of its own from a group of
its own, never appending to the old topics or resuming from the old positions. Each time, once
every record is read, the serving topic's table must equal what the input implies, row by row.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kube.operator_harness import (
    Cluster,
    Operator,
    is_true,
    wait_for,
    waiting,
)
from tests.integration.spark_pipelines import SteadyProducer, read_topic

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.records import produce
from distributary.kafka.transactions import TRANSACTION_TIMEOUT_MS
from distributary.local.broker import EmbeddedBroker
from distributary.schema import RecordSchema

NAMESPACE = "state-rebuilt-test"
OPERATOR_FLAGS = ("--spark-runtime", "local")
VIEW = "sr-counts"
EVENTS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "sr-events"},
    "spec": {"partitions": 2, "schema": SteadyProducer.SCHEMA},
}
COUNTS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": VIEW},
    "spec": {
        "inputs": [{"log": "sr-events", "alias": "e"}],
        "sql": "SELECT user, COUNT(*) AS n, SUM(amount) AS total FROM e GROUP BY user",
        "output": {"mode": "upsert", "key": ["user"]},
        "upgrade": {"cutoverWindow": "3s"},
        "spark": {"trigger": "2s"},
    },
}
Table = dict[str, tuple[int, int]]


def status(cluster: Cluster) -> dict[str, Any]:
    return (cluster.get("dview", VIEW) or {}).get("status") or {}


def rows(cluster: Cluster) -> dict[int, dict[str, Any]]:
    return {r["revision"]: r for r in status(cluster).get("revisions") or []}


def position(cluster: Cluster) -> int:
    inputs = status(cluster).get("inputs") or [{}]
    return sum(int(o) for o in (inputs[0].get("position") or {}).values())


def input_end(broker: EmbeddedBroker) -> int:
    ends = KafkaAdmin(broker.bootstrap_servers).end_offsets(["sr-events"])["sr-events"]
    return sum(ends.values())


def seen(cluster: Cluster, operator: Operator) -> str:
    """Where the view stood, for a failure message: its rows, serving revision, position, lag,
    conditions and what its runners said last."""
    now = status(cluster)
    found = {
        r: (row["phase"], row.get("reason"), row.get("checkpointLost"), row.get("lag"))
        for r, row in rows(cluster).items()
    }
    conditions = [(c["type"], c["status"], c.get("reason")) for c in now.get("conditions") or []]
    said = []
    for log in sorted((operator.folder / "local" / NAMESPACE / VIEW).glob("r*/runner.log")):
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if "runner:" in ln]
        said += [f"{log.parent.name}| {ln}" for ln in lines[-4:]]
    return (
        f"rows {found}, serving {now.get('servingRevision')}, position {position(cluster)}, "
        f"lag {now.get('lag')}, conditions {conditions}\nrunners said:\n" + "\n".join(said)
    )


def until(
    cluster: Cluster, operator: Operator, what: str, done: Callable[[], bool], timeout: float
) -> None:
    """Wait until `done()`; fail saying where the view stood, with the operator's log."""
    try:
        wait_for(what, done, timeout)
    except AssertionError as exc:
        where = seen(cluster, operator)
        raise AssertionError(f"{exc}\n{where}\n--- operator log ---\n{operator.logs()}") from None


def read_everything(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker, total: int
) -> None:
    """Wait until the input holds the `total` records appended and the serving revision has
    read them all (its group at the input's end, lag 0)."""
    ends: list[int] = []

    def read_all() -> bool:
        ends.append(input_end(broker))
        return ends[-1] == total and status(cluster).get("lag") == 0 and position(cluster) == total

    what = f"the input at {total} records and the serving revision at its end with lag 0"
    try:
        until(cluster, operator, what, read_all, timeout=240)
    except AssertionError as exc:
        raise AssertionError(f"input end {ends[-1:]}; {exc}") from None


def table(broker: EmbeddedBroker, topic: str) -> Table:
    """The upsert table a reader of `topic` holds: the last row of each user."""
    found: Table = {}
    for record in read_topic(broker.bootstrap_servers, topic):
        if record.value is not None:
            row = json.loads(record.value)
            found[row["user"]] = (row["n"], row["total"])
    return found


def expected(records: list[dict[str, Any]]) -> Table:
    counts = Counter(r["user"] for r in records)
    sums = Counter[str]()
    for r in records:
        sums[r["user"]] += r["amount"]
    return {user: (counts[user], sums[user]) for user in counts}


def lowered(broker: EmbeddedBroker, topic: str) -> list[str]:
    """Rows of `topic` whose count is lower than one written before for the same user."""
    best: dict[str, int] = {}
    found = []
    for record in read_topic(broker.bootstrap_servers, topic):
        if record.value is None:
            continue
        row = json.loads(record.value)
        if row["n"] < best.get(row["user"], 0):
            found.append(f"{row['user']}: {row['n']} after {best[row['user']]}")
        best[row["user"]] = max(best.get(row["user"], 0), row["n"])
    return found


def view_topics(broker: EmbeddedBroker) -> dict[str, int]:
    """The view's revision topics and the records each holds."""
    admin = KafkaAdmin(broker.bootstrap_servers)
    prefix = f"{VIEW}.r"
    topics = sorted(
        t for t in admin.topic_names() if t.startswith(prefix) and t[len(prefix) :].isdigit()
    )
    return {t: sum(admin.end_offsets([t])[t].values()) for t in topics}


def lose_checkpoint(cluster: Cluster, operator: Operator, revision: int) -> None:
    """SIGKILL the revision's runner (its process group: the JVM too) and delete its checkpoint
    folder, as a lost node and its disk would."""
    app = operator.folder / "local" / NAMESPACE / VIEW / f"r{revision}"
    pid = int((app / "runner.pid").read_text())
    assert str(app).encode() in Path(f"/proc/{pid}/cmdline").read_bytes(), f"{pid} is not r1's"
    os.killpg(pid, signal.SIGKILL)
    uid = (cluster.get("dview", VIEW) or {})["metadata"]["uid"]
    folder = operator.folder / "checkpoints" / NAMESPACE / VIEW / uid / f"r{revision}"
    seen = sorted(str(p) for p in (operator.folder / "checkpoints").rglob("*") if p.is_dir())
    assert (folder / "offsets").is_dir(), f"no checkpoint at {folder}; folders: {seen[:20]}"
    for _ in range(20):  # a dying JVM may still write into it for a moment
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            return
        time.sleep(0.5)
    raise AssertionError(f"{folder} could not be deleted")


def live_runners(operator: Operator) -> list[str]:
    """The view's runner processes that still run."""
    found = []
    for pid_file in (operator.folder / "local" / NAMESPACE / VIEW).glob("r*/runner.pid"):
        try:
            cmdline = Path(f"/proc/{pid_file.read_text().strip()}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if str(pid_file.parent).encode() in cmdline:
            found.append(pid_file.parent.name)
    return found


@pytest.fixture(scope="module")
def lost(
    cluster: Cluster, operator: Operator, broker: EmbeddedBroker
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every record appended, and the view's status once revision 2 rebuilt the lost state and
    read them all (with `said`: the conditions that told of the loss meanwhile)."""
    cluster.apply(EVENTS)
    ready = lambda: is_true(cluster.get("dlog", "sr-events"), "Ready")  # noqa: E731
    waiting(operator, "Log sr-events Ready", ready)
    producer = SteadyProducer(broker.bootstrap_servers, "sr-events").start()
    try:
        cluster.apply(COUNTS)
        until(
            cluster,
            operator,
            "revision 1 serving and reading live records",
            lambda: status(cluster).get("servingRevision") == 1 and position(cluster) >= 120,
            timeout=300,
        )
        lose_checkpoint(cluster, operator, 1)
        # Killed inside a transaction, revision 1 leaves its offsets unstable until Kafka aborts
        # that transaction (its timeout, then the coordinator's next look): read past that.
        admin = KafkaAdmin(broker.bootstrap_servers, timeout=TRANSACTION_TIMEOUT_MS / 1000 + 60)
        group = f"distributary.{NAMESPACE}.{VIEW}.r1"
        at_loss = admin.committed(group)
        said: set[tuple[str, str, str | None, str]] = set()  # conditions that told of the loss

        def rebuilt() -> bool:
            """Revision 2 serves; fails at once when revision 1 resumed on empty state (its
            group read on from where it was when the checkpoint was lost)."""
            read_on = admin.committed(group)
            assert read_on == at_loss, (
                f"revision 1 resumed without its checkpoint, on empty state: its group read on "
                f"from {at_loss} to {read_on}"
            )
            now = status(cluster)
            said.update(
                (c["type"], c["status"], c.get("reason"), c.get("message") or "")
                for c in now.get("conditions") or []
                if "checkpoint is gone" in (c.get("message") or "")
            )
            return now.get("servingRevision") == 2

        until(cluster, operator, "revision 2 rebuilt and serving", rebuilt, timeout=300)
        time.sleep(2)  # records still arrive after the cutover
    finally:
        records = producer.stop()
    read_everything(cluster, operator, broker, len(records))
    return records, {**status(cluster), "said": said}


def test_a_lost_checkpoint_is_rebuilt_as_a_new_revision(
    lost: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    _, now = lost
    found = {r["revision"]: r for r in now["revisions"]}
    assert found[1]["checkpointLost"], found[1]
    assert found[1]["phase"] in ("Retiring", "Retired"), found[1]
    assert (found[2]["phase"], found[2].get("reason")) == ("Serving", "CheckpointLost"), found[2]
    told = [m for kind, state, _, m in now["said"] if (kind, state) == ("Reconciling", "True")]
    assert any("revision 1 keeps state and its checkpoint is gone" in m for m in told), now["said"]


def test_the_rebuilt_table_is_exact_and_no_count_went_down(
    lost: tuple[list[dict[str, Any]], dict[str, Any]], cluster: Cluster, broker: EmbeddedBroker
) -> None:
    records, _ = lost
    serving = (cluster.get("dlog", VIEW) or {})["status"]["topicName"]
    assert serving == f"{VIEW}.r2"
    assert table(broker, serving) == expected(records)
    for topic in view_topics(broker):
        assert lowered(broker, topic) == [], topic


def test_a_view_created_again_starts_past_the_old_revisions(
    lost: tuple[list[dict[str, Any]], dict[str, Any]],
    cluster: Cluster,
    operator: Operator,
    broker: EmbeddedBroker,
) -> None:
    records, _ = lost
    old_uid = (cluster.get("dview", VIEW) or {})["metadata"]["uid"]
    cluster.kubectl("delete", "dview", VIEW, "-n", NAMESPACE, "--timeout=60s")
    waiting(operator, "the output Log collected", lambda: cluster.get("dlog", VIEW) is None)
    until(cluster, operator, "the view's runners stopped", lambda: not live_runners(operator), 90)
    old = view_topics(broker)
    groups = KafkaAdmin(broker.bootstrap_servers).group_names()
    assert set(old) >= {f"{VIEW}.r1", f"{VIEW}.r2"}, old  # the default policy keeps them
    more = [SteadyProducer.record(i) for i in range(len(records), len(records) + 40)]
    schema = RecordSchema.parse(SteadyProducer.SCHEMA, [])
    produce(broker.bootstrap_servers, "sr-events", [schema.encode(r) for r in more])
    cluster.apply(COUNTS)
    until(cluster, operator, "the view created again started", lambda: bool(rows(cluster)), 60)
    first = min(rows(cluster))
    assert first == 3, f"first revision {first}, not past the old ones {old}: {rows(cluster)}"
    until(
        cluster,
        operator,
        "revision 3 serving",
        lambda: status(cluster).get("servingRevision") == 3,
        timeout=240,
    )
    read_everything(cluster, operator, broker, len(records) + len(more))
    row = rows(cluster)[3]
    assert (row["topic"], row["consumerGroup"]) == (
        f"{VIEW}.r3",
        f"distributary.{NAMESPACE}.{VIEW}.r3",
    )
    assert row["consumerGroup"] not in groups, sorted(g for g in groups if VIEW in g)
    assert (cluster.get("dlog", VIEW) or {})["status"]["topicName"] == f"{VIEW}.r3"
    uid = (cluster.get("dview", VIEW) or {})["metadata"]["uid"]
    assert uid != old_uid
    assert (operator.folder / "checkpoints" / NAMESPACE / VIEW / uid / "r3" / "offsets").is_dir()
    assert table(broker, f"{VIEW}.r3") == expected(records + more)
    assert {t: n for t, n in view_topics(broker).items() if t in old} == old  # none appended to
    assert lowered(broker, f"{VIEW}.r3") == []
