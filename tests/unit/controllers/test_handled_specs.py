"""What kopf last handled of each resource is kept without writing to the resource (`handled.py`):
in memory while the operator runs, and as `status.handledSpec` across restarts.

kopf's default recorded it in an annotation: a PATCH of every object after each handling (and a
mark in another annotation), a quarter of the operator's requests when a thousand Logs were applied
at once. What kopf decides from the record (a creation, an edit with the spec it replaced, nothing
new) must stay the same, including for an edit made while no operator ran.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import kopf
import pytest

from distributary.controllers.handled import (
    HANDLED_FIELD,
    LAST_HANDLED,
    HandledSpecs,
    ProgressRecords,
    handled_text,
)
from distributary.controllers.status import StatusRecorder

OLD = {"partitions": 3, "retention": {"ms": 1000}}
NEW = {"partitions": 6, "retention": {"ms": 1000}}


def body(spec: dict[str, Any], status: dict[str, Any] | None = None, **annotations: str) -> Any:
    raw = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {
            "name": "clicks",
            "namespace": "ns",
            "uid": "u-1",
            "resourceVersion": "7",
            "labels": {"team": "web"},
            "annotations": dict(annotations),
        },
        "spec": spec,
        "status": status or {},
    }
    return kopf.Body(cast(kopf.RawBody, raw))


def test_a_new_object_has_no_record_and_what_kopf_stores_is_kept_in_memory() -> None:
    storage = HandledSpecs()
    new = body(NEW)
    assert storage.fetch(body=new) is None  # kopf: a creation
    patch = kopf.Patch()
    essence = storage.build(body=new)
    storage.store(body=new, patch=patch, essence=essence)
    assert not patch  # nothing written to the object
    assert storage.fetch(body=new) == essence  # kopf: nothing new
    assert storage.replaced_spec(new) is None


def test_after_a_restart_the_status_record_tells_an_edit_from_nothing_new() -> None:
    storage = HandledSpecs()  # a new operator: nothing in memory
    unchanged = body(NEW, {HANDLED_FIELD: handled_text(NEW)})
    assert storage.fetch(body=unchanged) == storage.build(body=unchanged)  # kopf: resumed
    storage = HandledSpecs()  # another start, after an edit
    edited = body(NEW, {HANDLED_FIELD: handled_text(OLD)})
    found = storage.fetch(body=edited)
    assert found["spec"] == OLD  # kopf: an edit, with the spec it replaced
    assert {k: v for k, v in found.items() if k != "spec"} == {
        k: v for k, v in storage.build(body=edited).items() if k != "spec"
    }  # only the spec differs: no other change is made up
    assert storage.replaced_spec(edited) == OLD


def test_a_new_object_stays_new_to_kopf_until_kopf_stores_what_it_handled() -> None:
    """A creation handler that asks to run again (Strimzi has not made the topic yet) is run
    again by kopf only if the object is still new to it: the handler's reconcile has written
    `handledSpec` meanwhile, which must not make kopf see no change (seen as a Log that never
    turned Stalled when Strimzi refused its topic)."""
    storage = HandledSpecs()
    new = body(NEW)
    assert storage.fetch(body=new) is None  # kopf: a creation
    retried = body(NEW, {HANDLED_FIELD: handled_text(NEW), "topicName": "clicks"})
    assert storage.fetch(body=retried) is None  # still a creation, retried
    assert storage.replaced_spec(retried) is None
    storage.store(body=retried, patch=kopf.Patch(), essence=storage.build(body=retried))
    assert storage.fetch(body=retried) == storage.build(body=retried)  # handled now


def test_an_earlier_versions_annotation_is_read_until_status_has_a_record() -> None:
    storage = HandledSpecs()
    kopfs = json.dumps({"spec": OLD, "metadata": {"labels": {"team": "web"}}})
    edited = body(NEW, None, **{LAST_HANDLED: kopfs})
    assert storage.fetch(body=edited)["spec"] == OLD
    assert storage.replaced_spec(edited) == OLD
    recorded = body(NEW, {HANDLED_FIELD: handled_text(NEW)}, **{LAST_HANDLED: kopfs})
    assert HandledSpecs().replaced_spec(recorded) is None  # status is newer than the annotation


def test_memory_comes_before_status_while_the_operator_runs() -> None:
    """kopf retries a handler that asked to run again by comparing with its own record: a
    reconcile that wrote `handledSpec` before asking must not make kopf think nothing is new."""
    storage = HandledSpecs()
    first = body(OLD)
    storage.store(body=first, patch=kopf.Patch(), essence=storage.build(body=first))
    edited = body(NEW, {HANDLED_FIELD: handled_text(NEW)})  # a reconcile of the edit wrote it
    assert storage.fetch(body=edited)["spec"] == OLD  # kopf still runs its update handler
    assert storage.replaced_spec(edited) == OLD


def test_a_handler_that_succeeds_leaves_no_mark_alone_and_one_retried_keeps_it() -> None:
    storage = ProgressRecords()
    new = body(NEW)
    patch = kopf.Patch()
    record: Any = {"started": "2026-11-30T00:00:00", "success": True}
    storage.store(key=cast(Any, "reconcile"), record=record, body=new, patch=patch)
    storage.purge(key=cast(Any, "reconcile"), body=new, patch=patch)
    assert not patch  # kopf makes no request
    retried = kopf.Patch()
    storage.store(key=cast(Any, "reconcile"), record={"retries": 1}, body=new, patch=retried)
    assert retried["metadata"]["annotations"]["distributary.dev/kopf-managed"] == "yes"


class FakeKube:
    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []

    def patch_status(self, *args: Any) -> dict[str, Any]:
        self.written.append(dict(args[4]))
        return {"metadata": {"resourceVersion": str(8 + len(self.written))}}


def test_a_reconciles_final_status_records_the_spec_it_carried_out_and_observing_does_not() -> None:
    kube = FakeKube()
    read = body(NEW, {"topicName": "clicks"})
    reconciled = StatusRecorder.of(cast(Any, kube), read)
    asyncio.run(reconciled.record_ahead({"phase": "starting"}))
    assert HANDLED_FIELD not in kube.written[-1]  # ahead of acting: nothing is carried out yet
    asyncio.run(reconciled.finish({"topicName": "clicks"}))
    assert json.loads(kube.written[-1][HANDLED_FIELD]) == NEW
    observed = StatusRecorder.of(cast(Any, kube), read, reconciles=False)
    asyncio.run(observed.finish({"endOffsets": {"0": 5}}))
    assert HANDLED_FIELD not in kube.written[-1]
    done = StatusRecorder.of(cast(Any, kube), body(NEW, {HANDLED_FIELD: handled_text(NEW)}))
    assert not asyncio.run(done.finish({}))  # recorded already: nothing to write


def test_records_unused_for_an_hour_are_let_go_so_deleted_objects_do_not_pile_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every object kopf sees gets a record, SparkApplications included, and nothing tells the
    record that its object was deleted: records unused for `KEEP_SECONDS` are let go (a quiet
    object's status answers for it again when it is next seen)."""
    from distributary.controllers import handled

    storage = HandledSpecs()
    now = [1000.0]
    monkeypatch.setattr(handled.time, "monotonic", lambda: now[0])
    for n in range(handled.PRUNE_EVERY - 2):
        deleted = body(NEW)
        deleted["metadata"]["uid"] = f"gone-{n}"
        assert storage.fetch(body=kopf.Body(cast(kopf.RawBody, deleted))) is None
    now[0] += handled.KEEP_SECONDS - 1
    storage.fetch(body=body(NEW, {HANDLED_FIELD: handled_text(NEW)}))  # u-1, used lately
    now[0] += 2
    new = body(OLD)
    new["metadata"]["uid"] = "u-2"
    storage.fetch(body=kopf.Body(cast(kopf.RawBody, new)))  # the 1,000th record: prunes
    assert set(storage._memory) == {"u-1", "u-2"}
