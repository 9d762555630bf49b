"""A checkpoint root the operator refuses (`plan.applications.checkpoint_storage`) stalls every view
and job before anything is planned or started, and says how to fix it."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import replace
from typing import Any

from tests.unit.reconcile.fakes import Parts, parts
from tests.unit.reconcile.test_job_reconcile import job
from tests.unit.reconcile.test_view_reconcile import log, view

from distributary.plan.applications.checkpoint_storage import checkpoint_problem
from distributary.plan.pipelines.pipeline import DEFAULT_CHECKPOINT_ROOT
from distributary.reconcile.job import reconcile_job
from distributary.reconcile.view import reconcile_view

PROBLEM = checkpoint_problem(DEFAULT_CHECKPOINT_ROOT, "spark-operator")


def refused(p: Parts, body: dict[str, Any]) -> None:
    read = {**copy.deepcopy(body), "status": p.store.status}
    p.world.writers = [read]
    services = replace(p.services(), checkpoint_problem=PROBLEM)
    reconcile = reconcile_view if body["kind"] == "DerivedView" else reconcile_job
    asyncio.run(reconcile(read, services, p.store, p.world, p.events))


def stalled(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Stalled")


def test_a_view_is_stalled_and_nothing_is_made_or_started() -> None:
    assert PROBLEM is not None
    p = parts([log("clicks")], [])
    refused(p, view())
    # The status and a warning saying so, and nothing else.
    assert p.journal == [("finish", p.journal[0][1]), ("warning", "CheckpointNotDurable")]
    condition = stalled(p.store.status)
    assert (condition["status"], condition["reason"]) == ("True", "CheckpointNotDurable")
    assert condition["message"] == PROBLEM.message
    ready = next(c for c in p.store.status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"


def test_a_job_is_stalled_and_nothing_starts() -> None:
    p = parts([log("clicks"), log("enriched")], [])
    refused(p, job())
    assert p.journal == [("finish", p.journal[0][1]), ("warning", "CheckpointNotDurable")]
    assert p.runtime.running == {}
    assert stalled(p.store.status)["reason"] == "CheckpointNotDurable"
