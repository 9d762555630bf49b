"""What the operator's indexes keep of each object."""

from __future__ import annotations

from typing import Any, cast

import kopf

from distributary.controllers.indexes import index_entry
from distributary.plan.views.view_plan import LATEST_ANNOTATION, SERVING_ANNOTATION

IDENTITY = {
    "name": "sums",
    "namespace": "shop",
    "uid": "u-1",
    "resourceVersion": "42",
    "generation": 3,
    "labels": {"distributary.dev/view": "sums"},
    "ownerReferences": [{"kind": "DerivedView", "name": "sums"}],
}


def test_an_entry_keeps_identity_spec_and_status_but_not_managed_fields() -> None:
    raw: dict[str, Any] = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {
            **IDENTITY,
            "annotations": {
                SERVING_ANNOTATION: "2",
                LATEST_ANNOTATION: "3",
                "distributary.dev/last-handled-configuration": '{"spec": "..."}' * 100,
            },
            "managedFields": [{"manager": "kopf", "fieldsV1": {"f:status": {}}}] * 20,
            "creationTimestamp": "2026-11-22T12:00:00Z",
        },
        "spec": {"partitions": 2},
        "status": {"topicName": "sums.r2", "handledSpec": '{"partitions":2}'},
    }
    entry = index_entry(kopf.Body(cast(kopf.RawBody, raw)))
    assert entry == {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {
            **IDENTITY,
            "annotations": {SERVING_ANNOTATION: "2", LATEST_ANNOTATION: "3"},
        },
        "spec": {"partitions": 2},
        "status": {"topicName": "sums.r2"},
    }
    entry["spec"]["partitions"] = 4  # a copy: kopf's body is not changed through it
    assert raw["spec"]["partitions"] == 2
