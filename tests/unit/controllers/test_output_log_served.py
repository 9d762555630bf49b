"""A view points its output Log at the serving revision's topic. A Log it has just made is left
to its own first reconcile, which names that topic from the annotation: a status write here
changed the Log under that reconcile, which then failed on it and ran again (300 failed status
writes and 300 reconciles more for 300 new views). At a cutover the view writes it first."""

from __future__ import annotations

import asyncio
import copy
from types import SimpleNamespace
from typing import Any, cast

from distributary.controllers.handling import Namespace
from distributary.plan.views.view_plan import SERVING_ANNOTATION

NS = "shop"


def output(revision: int) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {
            "name": "enriched",
            "namespace": NS,
            "labels": {"distributary.dev/view": "enriched"},
            "annotations": {SERVING_ANNOTATION: str(revision)},
        },
        "spec": {"schema": "user STRING"},
    }


class Kube:
    """The API server's copy of the output Log; the writes made to it."""

    def __init__(self, stored: dict[str, Any] | None) -> None:
        self.stored = stored
        self.writes: list[str] = []

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.writes.append("apply")
        status = (self.stored or {}).get("status")
        self.stored = {**copy.deepcopy(manifest), **({"status": status} if status else {})}
        self.stored["metadata"]["resourceVersion"] = "5"
        return copy.deepcopy(self.stored)

    def patch_status(self, *args: Any) -> dict[str, Any]:
        self.writes.append(f"status {args[4]}")
        assert self.stored is not None
        return {**self.stored, "status": args[4]}


def serve(kube: Kube, index: list[dict[str, Any]], revision: int, topic: str) -> None:
    services = SimpleNamespace(kube=kube)
    world = Namespace(cast(Any, services), {"logs": {NS: index}, "views": {}, "jobs": {}})
    asyncio.run(world.serve(output(revision), topic))


def test_a_new_output_log_is_left_to_its_own_reconcile() -> None:
    kube = Kube(None)
    serve(kube, [], 1, "enriched.r1")
    assert kube.writes == ["apply"]


def test_a_new_output_log_that_would_name_another_topic_is_pointed_at_the_served_one() -> None:
    kube = Kube(None)
    serve(kube, [], 1, "enriched.legacy")
    assert kube.writes == ["apply", "status {'topicName': 'enriched.legacy'}"]


def test_at_a_cutover_the_view_points_its_output_log_first() -> None:
    before = {**output(1), "status": {"topicName": "enriched.r1"}}
    kube = Kube(copy.deepcopy(before))
    serve(kube, [before], 2, "enriched.r2")
    assert kube.writes == ["apply", "status {'topicName': 'enriched.r2'}"]
