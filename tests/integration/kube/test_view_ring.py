"""Three DerivedViews reading each other in a ring, applied to a real API server with the
operator running (`local` runtime, though the ring never starts Spark): each view is Stalled and
its condition says it is on the cycle, naming the cycle; none waits for an input
(WaitingForInput) that the ring keeps from ever having a topic."""

from __future__ import annotations

from typing import Any

from tests.integration.kube.operator_harness import Cluster, Operator, condition, waiting

NAMESPACE = "view-ring"
OPERATOR_FLAGS = ("--spark-runtime", "local")
RING = {"ring-a": "ring-c", "ring-b": "ring-a", "ring-c": "ring-b"}  # view -> the log it reads


def ring_view(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": name},
        "spec": {"inputs": [{"log": RING[name], "alias": "src"}], "sql": "SELECT user FROM src"},
    }


def test_each_view_on_a_ring_is_stalled_saying_it_is_on_the_cycle(
    cluster: Cluster, operator: Operator
) -> None:
    cluster.apply(*(ring_view(name) for name in RING))

    def all_stalled() -> dict[str, str] | None:
        said: dict[str, str] = {}
        for name in RING:
            stalled = condition(cluster.get("dview", name), "Stalled") or {}
            message = stalled.get("message") or ""
            if stalled.get("status") != "True" or "is on a cycle" not in message:
                return None
            said[name] = message
        return said

    def conditions() -> dict[str, Any]:
        return {n: (cluster.get("dview", n) or {}).get("status") for n in RING}

    said = waiting(operator, "each view of the ring Stalled on the cycle", all_stalled, 60,
                   conditions)  # fmt: skip
    for name, message in said.items():
        assert f"DerivedView/{NAMESPACE}/{name} -> Log/{NAMESPACE}/{name} -> " in message
        assert "remove one of these inputs" in message
        reconciling = condition(cluster.get("dview", name), "Reconciling") or {}
        assert reconciling.get("reason") != "WaitingForInput", (name, reconciling)
