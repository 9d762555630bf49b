"""The Source controller: kopf's handlers of Sources.

A Source's reconcile is `reconcile.source`, driven as `handling.py` says: on every change of its
spec here, and at every round of the observer loop (`observer.py`). Its connectors run where the
services' `Connectors` say (`backends.connect`: a plain REST endpoint, or Strimzi's
KafkaConnector).

Deleting a Source deletes the connector and drops the slot and publication of every revision not
retired (else the server keeps WAL for the slot until its disk fills); its Logs go with it as
children, and their topics stay unless a Log says `deletionPolicy: Delete`. A database that
cannot be reached holds the deletion for up to `DELETE_TIMEOUT`, after which the Source goes and a
Warning event names the slots to drop by hand.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from distributary.api import parse_body
from distributary.api.source import Source
from distributary.backends.connect import ConnectError
from distributary.controllers import metrics
from distributary.controllers.events import KubeEvents
from distributary.controllers.handling import handle
from distributary.controllers.indexes import GROUP, VERSION
from distributary.controllers.secrets import SecretMissingError, secret_value
from distributary.controllers.services import OperatorServices
from distributary.databases.postgres import DatabaseError
from distributary.kube.errors import KubeError
from distributary.plan.sources.source_plan import connector_name
from distributary.plan.sources.source_revisions import RETIRED

PLURAL = "sources"
DELETE_TIMEOUT = 300  # seconds a deletion waits for the database before the Source goes
LOGGER = logging.getLogger("distributary.sources")


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def reconcile(body: kopf.Body, memo: kopf.Memo, old: Any = None, **found: Any) -> None:
    """Reconcile a Source on every change of its spec."""
    await handle("Source", body, memo, old, found)


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def delete(
    body: kopf.Body, memo: kopf.Memo, retry: int = 0, runtime: Any = None, **_: Any
) -> None:
    """Delete the connectors and drop the slots and publications of every revision not yet
    retired; the Logs stay as their deletionPolicy says."""
    services: OperatorServices = memo.services
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    parsed = parse_body(body, Source)
    if isinstance(parsed, str):
        return  # never made anything it could find again
    source = parsed
    events = KubeEvents(services.kube, body)
    waited = runtime.total_seconds() if runtime is not None else 0.0
    recorded = [dict(r) for r in (body.get("status") or {}).get("revisions") or []]
    revisions = sorted({1, *(int(r["revision"]) for r in recorded if r.get("phase") != RETIRED)})
    try:
        if services.connectors is not None:
            for revision in revisions:
                await asyncio.to_thread(
                    services.connectors.delete, connector_name(source, revision), namespace
                )
        password = await asyncio.to_thread(
            secret_value, services, namespace, source.spec.postgres.password_secret,
            "spec.postgres.passwordSecret",
        )  # fmt: skip
        dropped = await asyncio.to_thread(_drop, services, source, password, revisions)
    except (SecretMissingError, DatabaseError, ConnectError, KubeError) as exc:
        if waited < DELETE_TIMEOUT and not isinstance(exc, SecretMissingError):
            raise kopf.TemporaryError(
                f"Source {namespace}/{name}: {exc}; trying again", delay=10
            ) from exc
        slots = [source.revision_identifier(r) for r in revisions]
        by_hand = "; ".join(
            f"SELECT pg_drop_replication_slot('{slot}'); DROP PUBLICATION {slot}" for slot in slots
        )
        message = (
            f"the Source is deleted, but its replication slot(s) {', '.join(slots)} and "
            f"publication(s) could not be dropped ({exc}): drop them by hand ({by_hand}), or "
            "the server keeps WAL for the slot until its disk fills"
        )
        events.warn("SlotLeft", message)
        LOGGER.warning("Source %s/%s: %s", namespace, name, message)
        return
    for revision in revisions:
        services.memory.restarts.pop(f"{namespace}/{connector_name(source, revision)}", None)
    metrics.forget(namespace, name)
    what = " and ".join(dropped) if dropped else "nothing left to drop"
    LOGGER.info("Source %s/%s deleted: %s dropped; its Logs stay as their deletionPolicy says",
                namespace, name, what)  # fmt: skip


def _drop(
    services: OperatorServices, source: Source, password: str, revisions: list[int]
) -> list[str]:
    assert services.captures is not None
    return [d for revision in revisions for d in services.captures.drop(source, password, revision)]
