"""kopf's indexes of every Log, DerivedView and StreamJob, by namespace.

A view or job is planned against the Logs, views and jobs of its namespace (to find its inputs,
cycles and each log's one writer), and the handlers (and the observer, when a SparkApplication
changes) read them from these indexes rather than from the API server. An index keeps of each object
only what planning and observing read: in a namespace of thousands of objects, managedFields and
kopf's annotations would make up most of the operator's memory.
"""

from __future__ import annotations

import copy
from typing import Any

import kopf

from distributary.api.common import GROUP_VERSION
from distributary.controllers.handled import HANDLED_FIELD
from distributary.plan.views.view_plan import LATEST_ANNOTATION, SERVING_ANNOTATION

GROUP, VERSION = GROUP_VERSION.split("/")
INDEXED_METADATA = (
    "name", "namespace", "uid", "resourceVersion", "generation", "labels", "ownerReferences",
    "deletionTimestamp",
)  # fmt: skip
INDEXED_ANNOTATIONS = (SERVING_ANNOTATION, LATEST_ANNOTATION)
KINDS = {"logs": "logs_by_namespace", "views": "views_by_namespace", "jobs": "jobs_by_namespace"}


def index_entry(body: kopf.Body) -> dict[str, Any]:
    """What the indexes keep of an object: its spec, status and identity."""
    meta = body.get("metadata") or {}
    kept = {key: copy.deepcopy(meta[key]) for key in INDEXED_METADATA if key in meta}
    annotations = meta.get("annotations") or {}
    kept["annotations"] = {k: annotations[k] for k in INDEXED_ANNOTATIONS if k in annotations}
    entry = {key: copy.deepcopy(body[key]) for key in ("spec", "status") if key in body}
    if isinstance(entry.get("status"), dict):  # a copy of the spec, read by no planner
        entry["status"].pop(HANDLED_FIELD, None)
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": kept,
        **entry,
    }


@kopf.index(GROUP, VERSION, "logs")
def logs_by_namespace(body: kopf.Body, namespace: str | None, **_: Any) -> dict[str, Any]:
    """Every Log, by namespace: the inputs and outputs views are checked against."""
    return {str(namespace): index_entry(body)}


@kopf.index(GROUP, VERSION, "derivedviews")
def views_by_namespace(body: kopf.Body, namespace: str | None, **_: Any) -> dict[str, Any]:
    """Every DerivedView, by namespace: the graph needs all of them to find cycles and writers."""
    return {str(namespace): index_entry(body)}


@kopf.index(GROUP, VERSION, "streamjobs")
def jobs_by_namespace(body: kopf.Body, namespace: str | None, **_: Any) -> dict[str, Any]:
    """Every StreamJob, by namespace: the graph needs them to find each log's one writer."""
    return {str(namespace): index_entry(body)}


def indexes_of(found: dict[str, Any]) -> dict[str, Any]:
    """The indexes views and jobs are planned against, from what kopf passes to every handler
    (by the index functions' names)."""
    return {kind: found.get(name, {}) for kind, name in KINDS.items()}


def namespace_indexes(indexes: Any, namespace: str) -> dict[str, dict[str, list[Any]]]:
    """A copy of `namespace`'s part of the indexes: they change on the event loop while a
    thread plans from them."""
    return {
        kind: {namespace: list(indexes.get(kind, {}).get(namespace, []))}
        for kind in ("logs", "views", "jobs")
    }
