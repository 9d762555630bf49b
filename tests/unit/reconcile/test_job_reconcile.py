"""The order of record and act in a StreamJob's reconcile, driven through in-memory parts."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from tests.unit.reconcile.fakes import NS, Parts, parts
from tests.unit.reconcile.test_view_reconcile import index, is_start_record, log

from distributary.reconcile.job import reconcile_job
from distributary.reconcile.ports import TryAgain


def job(generation: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "StreamJob",
        "metadata": {
            "name": "enrich",
            "namespace": NS,
            "uid": "uid-enrich",
            "generation": generation,
            "resourceVersion": str(generation),
        },
        "spec": {
            "image": "registry/enrich:1",
            "mainApplicationFile": "local:///app/enrich.py",
            "inputs": [{"log": "clicks"}],
            "outputs": [{"log": "enriched"}],
            **spec,
        },
    }


def run(p: Parts, body: dict[str, Any], old_spec: Any = None) -> None:
    read = {**copy.deepcopy(body), "status": p.store.status}
    p.world.writers = [read]
    asyncio.run(reconcile_job(read, p.services(), p.store, p.world, p.events, old_spec))


def test_a_jobs_revision_is_recorded_before_it_starts_and_the_replaced_one_stops() -> None:
    p = parts([log("clicks"), log("visits"), log("enriched")], [])
    reprocess = {"upgrade": {"strategy": "Reprocess"}}
    run(p, job(**reprocess))
    assert index(p.journal, is_start_record(1)) < index(p.journal, lambda e: e == ("start", 1))
    mark = len(p.journal)
    edited = job(2, inputs=[{"log": "visits"}], **reprocess)
    run(p, edited, old_spec=job(**reprocess)["spec"])
    after = p.since(mark)
    recorded = index(after, is_start_record(2))
    assert recorded < index(after, lambda e: e == ("stop", "enrich-job-r1"))
    assert recorded < index(after, lambda e: e == ("start", 2))
    assert p.runtime.running == {"enrich-job-r2": 2}
    assert p.store.status["revision"] == 2
    assert "pendingAction" not in p.store.status


def test_a_refused_change_of_a_jobs_inputs_in_place_changes_nothing() -> None:
    p = parts([log("clicks"), log("visits"), log("enriched")], [])
    in_place = {"upgrade": {"strategy": "InPlace"}}
    run(p, job(**in_place))
    before = copy.deepcopy(p.store.status)
    mark = len(p.journal)
    edited = job(2, inputs=[{"log": "visits"}], **in_place)
    run(p, edited, old_spec=job(**in_place)["spec"])
    after = p.since(mark)
    assert not [e for e in after if e[0] in ("record", "start", "stop")]
    assert p.runtime.running == {"enrich-job-r1": 1}
    status = p.store.status
    assert (status["revision"], status["specHash"]) == (before["revision"], before["specHash"])
    reasons = {c["type"]: c.get("reason") for c in status["conditions"]}
    assert reasons["Stalled"] == "ChangeForbidden"


def test_a_jobs_dead_letter_topic_is_made_before_the_job_runs() -> None:
    p = parts([log("clicks"), log("enriched")], [])
    run(p, job())
    made = index(p.journal, lambda e: e == ("topic", "distributary.shop.enrich.dlq"))
    assert made < index(p.journal, lambda e: e == ("start", 1))


def test_a_job_waits_while_kafka_cannot_make_its_dead_letter_topic() -> None:
    p = parts([log("clicks"), log("enriched")], [])
    p.topics.unreachable = "no broker"
    with pytest.raises(TryAgain, match="dead-letter topic: no broker"):
        run(p, job())
    assert not [e for e in p.journal if e[0] == "start"]


def test_a_dead_letter_topic_kafka_refuses_stalls_the_job_and_it_does_not_run() -> None:
    p = parts([log("clicks"), log("enriched")], [])
    p.topics.refused = "Kafka refused topic distributary.shop.enrich.dlq: Set spec.replicas to 1"
    run(p, job())
    assert not [e for e in p.journal if e[0] == "start"]
    stalled = next(c for c in p.store.status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "KafkaRefused")
    assert "spec.replicas" in stalled["message"]
