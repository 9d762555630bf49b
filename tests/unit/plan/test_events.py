"""Events about a resource, as the operator posts them."""

from __future__ import annotations

from datetime import UTC, datetime

from distributary.plan.status.events import MAX_MESSAGE, event_manifest

VIEW = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": "big", "namespace": "shop", "uid": "u-1", "resourceVersion": "7"},
}


def test_an_event_names_the_resource_it_is_about() -> None:
    event = event_manifest(VIEW, "Normal", "StartRevision", "Starting revision 2.", NOW)
    assert event["involvedObject"] == {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "name": "big",
        "namespace": "shop",
        "uid": "u-1",
        "resourceVersion": "7",
    }
    assert (event["type"], event["reason"], event["message"]) == (
        "Normal",
        "StartRevision",
        "Starting revision 2.",
    )
    assert event["metadata"]["namespace"] == "shop"
    assert event["metadata"]["name"].startswith("big.")
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-11-24T05:00:00Z"


def test_each_event_has_a_name_of_its_own_and_a_bounded_message() -> None:
    first = event_manifest(VIEW, "Warning", "ReconcileError", "x" * 5000, NOW)
    second = event_manifest(VIEW, "Warning", "ReconcileError", "again", NOW)
    assert first["metadata"]["name"] != second["metadata"]["name"]
    assert len(first["message"]) == MAX_MESSAGE


NOW = datetime(2026, 11, 24, 5, 0, tzinfo=UTC)
