"""Views reading each other in a ring are each Stalled, each saying it is on the cycle: none of
them waits for an input (WaitingForInput) that the ring keeps from ever having a topic."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.unit.reconcile.fakes import NS, FakeStore, parts

from distributary.reconcile.view import reconcile_view

RING = {"ring-a": "ring-c", "ring-b": "ring-a", "ring-c": "ring-b"}  # view -> the log it reads


def ring_view(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1,
                     "resourceVersion": "1"},
        "spec": {"inputs": [{"log": RING[name], "alias": "src"}], "sql": "SELECT user FROM src"},
    }  # fmt: skip


def test_each_view_on_a_ring_is_stalled_naming_the_cycle() -> None:
    p = parts([], [])
    stores = {name: FakeStore(p.journal) for name in RING}
    for _ in range(2):  # a second round, as the front end retries: still stalled, not waiting
        for name in RING:
            p.world.writers = [
                {**copy.deepcopy(ring_view(n)), "status": stores[n].status} for n in RING
            ]
            body = {**ring_view(name), "status": stores[name].status}
            asyncio.run(reconcile_view(body, p.services(), stores[name], p.world, p.events))
    for name in RING:
        conditions = {c["type"]: c for c in stores[name].status["conditions"]}
        assert conditions["Stalled"]["status"] == "True", (name, conditions)
        assert conditions["Stalled"]["reason"] == "InvalidSpec"
        message = conditions["Stalled"]["message"]
        assert f"is on a cycle: DerivedView/{NS}/{name} -> Log/{NS}/{name} -> " in message
        assert "remove one of these inputs" in message
        assert conditions.get("Reconciling", {}).get("reason") != "WaitingForInput"
    assert p.runtime.running == {}
