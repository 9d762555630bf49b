"""The Sink controller: kopf's handlers of Sinks.

A Sink's reconcile is `reconcile.sink`, driven as `handling.py` says: on every change of its
spec here, and at every round of the observer loop (`observer.py`), as views and jobs are. Where
its process runs is the services' `SinkRuntime`. Deleting a Sink stops its process and leaves its
table or keys as they are.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from distributary.controllers import metrics
from distributary.controllers.handling import handle
from distributary.controllers.indexes import GROUP, VERSION
from distributary.controllers.services import OperatorServices

PLURAL = "sinks"
LOGGER = logging.getLogger("distributary.sinks")


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def reconcile(body: kopf.Body, memo: kopf.Memo, old: Any = None, **found: Any) -> None:
    """Reconcile a Sink on every change of its spec."""
    await handle("Sink", body, memo, old, found)


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def delete(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Stop the Sink's process (it finishes its transaction); the store keeps its rows."""
    services: OperatorServices = memo.services
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    if services.sinks is not None:
        await asyncio.to_thread(services.sinks.stop, namespace, name)
    metrics.forget(namespace, name)
    LOGGER.info(
        "Sink %s/%s deleted: its process stopped; its store keeps its rows", namespace, name
    )
