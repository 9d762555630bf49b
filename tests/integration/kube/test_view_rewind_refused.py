"""A rewind to a place its input does not have, refused by the operator: real API server, real
broker, real Spark (`local` runtime).

A view copies a two-partition Log while records keep arriving. Its spec then asks for a rewind
to a partition the Log does not have, and next for one to a time no record has reached. Each
becomes the view's Stalled condition with reason RewindRefused naming the field, and nothing
moves: no `lastRewind` is recorded, the revision's runner is the same process throughout, the
consumer group's offsets (read through the Admin API, sampled all along) never go back, and the
output has every record exactly once. A corrected rewind, to a time between the first records
and those that arrived later, is then carried out and reads exactly the later ones again.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import count
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.integration.kube.operator_harness import Cluster, Operator, condition, is_true, wait_for
from tests.integration.kube.operator_harness import waiting as harness_waiting
from tests.integration.spark_pipelines import committed_total, read_topic

from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.kafka.cluster import client_config
from distributary.local.broker import EmbeddedBroker
from distributary.plan.applications.runner_spec import consumer_group

NAMESPACE = "rewind-refused"
OPERATOR_FLAGS = ("--spark-runtime", "local")
LOG, VIEW = "rr-events", "rr-copy"
OUTPUT = f"{VIEW}.r1"
GROUP = consumer_group(NAMESPACE, VIEW, 1)
FIRST = range(20)  # stamped two minutes before the test starts
DAY_MS = 86_400_000
EVENTS = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": LOG},
    "spec": {"partitions": 2, "schema": "seq INT"},
}


def copy_view(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": VIEW},
        "spec": {
            "inputs": [{"log": LOG, "alias": "events"}],
            "sql": "SELECT seq FROM events",
            "output": {"mode": "append"},
            "spark": {"trigger": "2s"},
            **spec,
        },
    }


def moment(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def bad_rewinds(now_ms: int) -> dict[str, tuple[dict[str, Any], str]]:
    """Request id -> (where to, what the condition says)."""
    later = moment(now_ms + DAY_MS)
    return {
        "no-such-partition": (
            {"from": "Offsets", "offsets": {"5": 0}},
            f"spec.rewind.to.offsets names partition 5, but log {LOG} has 2 partitions (0 to 1)",
        ),
        "not-reached": (
            {"from": "Timestamp", "timestamp": later},
            f"spec.rewind.to.timestamp is {later[:19]}",
        ),
    }


def append(bootstrap: str, seqs: list[int], timestamp_ms: int | None = None) -> None:
    producer = Producer(client_config(bootstrap))
    for seq in seqs:
        stamp = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        value = json.dumps({"seq": seq}).encode()
        producer.produce(LOG, value=value, partition=seq % 2, timestamp=stamp)
    assert producer.flush(30) == 0


def output(bootstrap: str) -> Counter[int]:
    try:
        found = read_topic(bootstrap, OUTPUT)
    except KafkaAdminError:
        return Counter()
    return Counter(int(json.loads(r.value)["seq"]) for r in found if r.value)


def status(cluster: Cluster) -> dict[str, Any]:
    return (cluster.get("dview", VIEW) or {}).get("status") or {}


def runner_pid(operator: Operator) -> str:
    """The pid of the revision's runner (the `local` runtime's folder for revision 1)."""
    found = list((operator.folder / "local").glob(f"{NAMESPACE}/{VIEW}/r1/runner.pid"))
    return found[0].read_text().strip() if found else ""


@dataclass
class Seen:
    """One bad rewind: the view's Stalled condition, and whether anything moved."""

    stalled: dict[str, Any]
    last_rewind: Any
    before: dict[str, dict[int, int]]
    after: dict[str, dict[int, int]]
    pid_before: str
    pid_after: str


@dataclass
class Refusals:
    expected: dict[str, str] = field(default_factory=dict)
    seen: dict[str, Seen] = field(default_factory=dict)
    went_back: list[str] = field(default_factory=list)
    appended: list[int] = field(default_factory=list)
    output_after_refusals: Counter[int] = field(default_factory=Counter)
    good: dict[str, Any] = field(default_factory=dict)
    output_after_rewind: Counter[int] = field(default_factory=Counter)


def caught_up(cluster: Cluster, bootstrap: str, expected: Counter[int]) -> bool:
    return status(cluster).get("lag") == 0 and output(bootstrap) == expected


@pytest.fixture(scope="module")
def refusals(cluster: Cluster, operator: Operator, broker: EmbeddedBroker) -> Iterator[Refusals]:
    bootstrap = broker.bootstrap_servers
    admin = KafkaAdmin(bootstrap)
    found = Refusals()
    cluster.apply(EVENTS)
    wait_for(f"Log {LOG} Ready", lambda: is_true(cluster.get("dlog", LOG), "Ready"))
    start_ms = int(time.time() * 1000)
    append(bootstrap, list(FIRST), start_ms - 120_000)
    cluster.apply(copy_view())
    harness_waiting(
        operator,
        "the view read the first records",
        lambda: committed_total(admin.committed(GROUP)) >= len(FIRST),
        240,
    )
    stop = threading.Event()
    numbers = count(1000)

    def keep_appending() -> None:
        while not stop.wait(0.2):
            seq = next(numbers)
            append(bootstrap, [seq])
            found.appended.append(seq)

    def watch_group() -> None:  # the group's offsets, sampled: they must never go back
        last: dict[int, int] = {}
        own = KafkaAdmin(bootstrap)
        while not stop.wait(0.1):
            now = own.committed(GROUP).get(LOG, {})
            if any(at < last.get(p, 0) for p, at in now.items()):
                found.went_back.append(f"{last} -> {now}")
            last = {p: max(at, last.get(p, 0)) for p, at in now.items()}

    threads = [threading.Thread(target=f, daemon=True) for f in (keep_appending, watch_group)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(1)
        for request, (to, said) in bad_rewinds(int(time.time() * 1000)).items():
            found.expected[request] = said
            before, pid = admin.committed(GROUP), runner_pid(operator)
            cluster.apply(copy_view(rewind={"requestId": request, "to": to}))
            stalled = harness_waiting(
                operator,
                f"rewind {request} refused",
                lambda said=said: (
                    (c := condition(cluster.get("dview", VIEW), "Stalled")) is not None
                    and c.get("reason") == "RewindRefused"
                    and said in c.get("message", "")
                    and c
                ),
                120,
            )
            time.sleep(3)  # observer rounds go on looking at the refused rewind
            found.seen[request] = Seen(
                stalled,
                status(cluster).get("lastRewind"),
                before,
                admin.committed(GROUP),
                pid,
                runner_pid(operator),
            )
        stop.set()
        for thread in threads:
            thread.join(10)
        expected = Counter([*FIRST, *found.appended])
        harness_waiting(
            operator,
            "the view caught up",
            lambda: caught_up(cluster, bootstrap, expected),
            180,
        )
        found.output_after_refusals = output(bootstrap)
        between = {"from": "Timestamp", "timestamp": moment(start_ms)}
        cluster.apply(copy_view(rewind={"requestId": "between", "to": between}))
        again = expected + Counter(found.appended)
        harness_waiting(
            operator,
            "the corrected rewind done and the view caught up again",
            lambda: (
                (status(cluster).get("lastRewind") or {}).get("phase") == "Done"
                and caught_up(cluster, bootstrap, again)
            ),
            240,
        )
        found.good = status(cluster)
        found.output_after_rewind = output(bootstrap)
        yield found
    finally:
        stop.set()


@pytest.mark.parametrize("request_id", list(bad_rewinds(0)))
def test_the_refusal_names_the_field_in_the_stalled_condition(
    refusals: Refusals, request_id: str
) -> None:
    seen = refusals.seen[request_id]
    assert (seen.stalled["status"], seen.stalled["reason"]) == ("True", "RewindRefused")
    to, _ = bad_rewinds(0)[request_id]
    field_name = "offsets" if to["from"] == "Offsets" else "timestamp"
    assert f"spec.rewind.to.{field_name}" in seen.stalled["message"]
    assert refusals.expected[request_id] in seen.stalled["message"]


@pytest.mark.parametrize("request_id", list(bad_rewinds(0)))
def test_nothing_moves(refusals: Refusals, request_id: str) -> None:
    seen = refusals.seen[request_id]
    assert seen.last_rewind is None
    assert seen.pid_before
    assert seen.pid_after == seen.pid_before  # never stopped
    assert set(seen.after.get(LOG, {})) == {0, 1}
    for partition, at in seen.before.get(LOG, {}).items():
        assert seen.after[LOG][partition] >= at


def test_the_group_never_went_back_and_every_record_was_written_once(refusals: Refusals) -> None:
    assert not refusals.went_back
    assert len(refusals.appended) >= 10  # records arrived while the rewinds were refused
    assert refusals.output_after_refusals == Counter([*FIRST, *refusals.appended])


def test_a_corrected_rewind_then_moves_the_group_and_reads_again(refusals: Refusals) -> None:
    last = refusals.good["lastRewind"]
    assert (last["requestId"], last["phase"], last["revision"]) == ("between", "Done", 1)
    assert not [c for c in refusals.good["conditions"] if c.get("reason") == "RewindRefused"]
    again = refusals.output_after_rewind - refusals.output_after_refusals
    assert again == Counter(refusals.appended)
