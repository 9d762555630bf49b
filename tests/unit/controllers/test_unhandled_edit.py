"""An edit kopf's update handler has not handled yet is classified field by field by whatever
reconciles the resource first.

kopf records the configuration its update handler last handled in an annotation. A reconcile
started by something else meanwhile (an application's change, the observer) used to get no
previous spec, carried the edit out as an unknown change of definition ("the job's definition
changed") and recorded that; the update handler, second, found the change done and kept that
record, so `lastChange` never said "arguments changed" (seen in a loaded run of
`kube/test_job_spark_operator`). Every reconcile now gets the spec the edit replaced.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import kopf
import pytest
from tests.unit.controllers.test_reconcile_failure import FakeKube, log, services, view
from tests.unit.reconcile.fakes import NS, parts

from distributary.controllers import handling
from distributary.controllers.handled import LAST_HANDLED
from distributary.controllers.handling import handle, unhandled_spec

OLD = {"inputs": [{"log": "clicks", "alias": "src"}], "sql": "SELECT user FROM src"}
NEW = {"inputs": [{"log": "clicks", "alias": "src"}], "sql": "SELECT user, n FROM src"}


def body(spec: dict[str, Any], handled: str | None) -> dict[str, Any]:
    annotations = {LAST_HANDLED: handled} if handled is not None else {}
    return {"metadata": {"annotations": annotations}, "spec": spec}


def essence(spec: dict[str, Any]) -> str:
    """What kopf writes: the spec and metadata it handled, compact JSON."""
    return json.dumps({"spec": spec, "metadata": {"labels": {}}}, separators=(",", ":"))


def test_the_spec_an_edit_replaced_is_read_from_what_kopf_last_handled() -> None:
    assert unhandled_spec(body(NEW, essence(OLD))) == OLD


def test_no_edit_pending_or_nothing_recorded_gives_none() -> None:
    assert unhandled_spec(body(NEW, essence(NEW))) is None  # handled already
    assert unhandled_spec(body(NEW, None)) is None  # a new resource
    assert unhandled_spec(body(NEW, "{not json")) is None
    assert unhandled_spec(body(NEW, '"a string"')) is None


def test_a_reconcile_kopf_did_not_start_for_the_edit_gets_the_replaced_spec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Any] = []

    async def reconcile(*args: Any) -> None:
        seen.append(args[-1])  # the old spec

    monkeypatch.setitem(handling.RECONCILES, "DerivedView", reconcile)
    raw = view({})
    raw["metadata"]["annotations"] = {LAST_HANDLED: essence({**raw["spec"], "sql": "SELECT 1"})}
    found = {
        "logs_by_namespace": {NS: [log("clicks")]},
        "views_by_namespace": {NS: [raw]},
        "jobs_by_namespace": {},
        "retry": 0,
    }
    memo = kopf.Memo(services=services(parts([log("clicks")], []), FakeKube()))
    asyncio.run(handle("DerivedView", kopf.Body(cast(kopf.RawBody, raw)), memo, None, found))
    assert seen == [{**raw["spec"], "sql": "SELECT 1"}]
    # kopf's own update handler passes the old spec it has: that one is kept.
    seen.clear()
    given = {**raw["spec"], "sql": "SELECT 2"}
    asyncio.run(handle("DerivedView", kopf.Body(cast(kopf.RawBody, raw)), memo, given, found))
    assert seen == [given]
