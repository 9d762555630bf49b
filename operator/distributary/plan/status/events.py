"""Kubernetes events about a resource, as the operator posts them (core v1 `Event`).

An event says what the operator did or found (a revision started, a cutover, a refused edit) on
the resource it concerns, so `kubectl describe` and `kubectl get events` show it beside the
resource's conditions.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from distributary.plan.status.conditions import rfc3339

COMPONENT = "distributary-operator"
MAX_MESSAGE = 1024  # Kubernetes truncates longer event messages anyway


def event_manifest(
    body: Mapping[str, Any],
    kind: Literal["Normal", "Warning"],
    reason: str,
    message: str,
    now: datetime,
) -> dict[str, Any]:
    """The core v1 Event saying `reason: message` about the resource `body`."""
    meta = body.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace") or "default")
    involved = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "name": name,
        "namespace": namespace,
        **{k: meta[k] for k in ("uid", "resourceVersion") if meta.get(k)},
    }
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name[:200]}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": involved,
        "type": kind,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": rfc3339(now),
        "lastTimestamp": rfc3339(now),
        "count": 1,
    }
