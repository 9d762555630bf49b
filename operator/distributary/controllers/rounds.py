"""How the operator drives the kind whose reconcile is one blocking round (Sources): on every change
of the spec, and at every round of the observer loop (`observer.py`).

A round (`round_(services, body) -> status`) runs in a thread, one at a time per resource (a
handler's and the interval's never overlap), and its status is written onto the version the
round read; a status written meanwhile by another round makes this one's be dropped (the next
writes it). A round that fails unexpectedly is logged in one line and tried again at the next
interval: the resource's status keeps what the last round found.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from distributary.api.common import Condition
from distributary.controllers.handling import one_at_a_time
from distributary.controllers.services import OperatorServices
from distributary.controllers.status import StatusRecorder
from distributary.plan.conditions import Observation, conditions
from distributary.plan.spark import owner_reference
from distributary.reconcile.ports import StatusConflictError


def owner_of_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The controlling ownerReference to the resource `body`, for its children."""
    meta = body.get("metadata") or {}
    return owner_reference(
        {
            "apiVersion": str(body.get("apiVersion")),
            "kind": str(body.get("kind")),
            "name": str(meta.get("name")),
            "uid": str(meta.get("uid")),
        }
    )


def round_status(
    observation: Observation, previous: Sequence[Condition], **fields: Any
) -> dict[str, Any]:
    """A round's status: the conditions of `observation` (transition times kept from
    `previous`), the generation it observed, and the kind's own `fields`."""
    listed = conditions(observation, previous, datetime.now(UTC))
    return {
        "observedGeneration": observation.generation,
        "conditions": [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in listed],
        **fields,
    }


Round = Callable[[OperatorServices, Mapping[str, Any]], dict[str, Any]]
LOGGER = logging.getLogger("distributary.reconcile")


async def run_round(
    kind: str, body: Mapping[str, Any], services: OperatorServices, round_: Round
) -> None:
    """One round of `body`, its status written onto the version `body` was read at."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    async with one_at_a_time(kind, namespace, name):
        recorder = StatusRecorder.of(services.kube, body)
        status = await asyncio.to_thread(round_, services, body)
        try:
            await recorder.finish(status)
        except StatusConflictError:
            LOGGER.debug("%s %s/%s changed while reconciled", kind, namespace, name)
