"""A rewind to a place its logs do not have is refused in the view's or job's conditions, with
a Warning event, and nothing moves: no record in status, no stop, no fence, no commit; the
revision runs on where it was. Once the spec asks for a place the logs have, it is carried out.
A view's first revision whose starting position an input does not have does not start, nor
does any revision of a job (a later one refused while the running one runs on, observed)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from tests.unit.reconcile import test_job_reconcile as jobs
from tests.unit.reconcile.fakes import NS, Parts, parts
from tests.unit.reconcile.test_view_reconcile import log, run, view

GROUP = f"distributary.{NS}.big.r1"
BAD = [
    ({"from": "Offsets", "offsets": {"3": 0}}, "spec.rewind.to.offsets names partition 3"),
    ({"from": "Offsets", "offsets": {"0": 60}}, "spec.rewind.to.offsets asks for offset 60"),
    ({"from": "Offsets", "offsets": {"0": 2}}, "retention deleted offsets 2 to 4"),
    ({"from": "Timestamp", "timestamp": "2099-01-01T00:00:00Z"}, "has reached that time yet"),
]


def rewind(to: dict[str, Any], request: str = "bad") -> dict[str, Any]:
    return {"requestId": request, "to": to}


def moved(p: Parts, mark: int) -> list[Any]:
    return [e for e in p.since(mark) if e[0] in ("record", "stop", "fence", "commit", "remove")]


def stalled(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Stalled")


@pytest.mark.parametrize(("to", "said"), BAD)
def test_a_views_impossible_rewind_is_refused_and_nothing_moves(
    to: dict[str, Any], said: str
) -> None:
    p = parts([log("clicks")], [])
    p.admin.marks = {"clicks": {0: (5, 50)}}
    p.admin.by_time = {"clicks": {0: -1}}
    run(p, view())
    p.admin.groups = {GROUP: {"clicks": {0: 40}}}
    mark = len(p.journal)
    run(p, view(generation=2, rewind=rewind(to)))
    assert moved(p, mark) == []
    assert p.admin.groups[GROUP] == {"clicks": {0: 40}}
    assert "lastRewind" not in p.store.status
    condition = stalled(p.store.status)
    assert (condition["status"], condition["reason"]) == ("True", "RewindRefused")
    assert said in condition["message"]
    assert ("warning", "RewindRefused") in p.since(mark)
    assert p.runtime.running  # the revision runs on, on its checkpoint


def test_the_refusal_is_said_once_and_a_possible_rewind_then_goes_ahead() -> None:
    p = parts([log("clicks")], [])
    p.admin.ends = {"clicks": 50}
    run(p, view())
    p.admin.groups = {GROUP: {"clicks": {0: 40}}}
    bad = view(generation=2, rewind=rewind({"from": "Offsets", "offsets": {"1": 0}}))
    run(p, bad)
    mark = len(p.journal)
    run(p, bad)
    assert ("warning", "RewindRefused") not in p.since(mark)
    good = view(generation=3, rewind=rewind({"from": "Offsets", "offsets": {"0": 7}}, "good"))
    run(p, good)
    assert p.admin.groups[GROUP] == {"clicks": {0: 7}}
    assert p.store.status["lastRewind"]["phase"] == "Done"
    assert not [c for c in p.store.status["conditions"] if c["reason"] == "RewindRefused"]


def test_a_view_that_allows_partial_history_may_rewind_into_what_retention_left() -> None:
    p = parts([log("clicks")], [])
    p.admin.marks = {"clicks": {0: (5, 50)}}
    allowed: dict[str, Any] = {"upgrade": {"allowPartialHistory": True}}
    run(p, view(**allowed))
    p.admin.groups = {GROUP: {"clicks": {0: 40}}}
    to = {"from": "Offsets", "offsets": {"0": 2}}
    run(p, view(generation=2, rewind=rewind(to), **allowed))
    assert p.admin.groups[GROUP] == {"clicks": {0: 5}}  # from the oldest record it keeps


def test_a_jobs_impossible_rewind_is_refused_and_nothing_moves() -> None:
    p = parts([log("clicks"), log("enriched")], [])
    p.admin.ends = {"clicks": 50}
    jobs.run(p, jobs.job())
    group = next(iter(p.admin.groups), None)
    mark = len(p.journal)
    to = {"from": "Offsets", "offsets": {"0": 99}}
    jobs.run(p, jobs.job(2, rewind=rewind(to)))
    assert moved(p, mark) == []
    assert group is None or p.admin.groups[group] == {}
    condition = stalled(p.store.status)
    assert condition["reason"] == "RewindRefused"
    assert "spec.rewind.to.offsets asks for offset 99 of partition 0" in condition["message"]
    assert "allowPartialHistory" not in condition["message"]


def starting_at(position: dict[str, Any]) -> dict[str, Any]:
    return {"inputs": [{"log": "clicks", "alias": "src", "startingPosition": position}]}


@pytest.mark.parametrize(
    ("position", "said"),
    [
        ({"from": "Offsets", "offsets": {"2": 0}}, "spec.inputs[0].startingPosition.offsets names "
         "partition 2, but log clicks has 1 partition (partition 0)"),
        ({"from": "Offsets", "offsets": {"0": 51}}, "asks for offset 51 of partition 0"),
        ({"from": "Timestamp", "timestamp": "2099-01-01T00:00:00Z"},
         "spec.inputs[0].startingPosition.timestamp is 2099-01-01T00:00:00.000Z, but no record"),
    ],
)  # fmt: skip
def test_a_first_revision_is_not_started_where_its_input_has_no_such_place(
    position: dict[str, Any], said: str
) -> None:
    p = parts([log("clicks")], [])
    p.admin.ends = {"clicks": 50}
    p.admin.by_time = {"clicks": {0: -1}}
    run(p, view(**starting_at(position)))
    assert not [e for e in p.journal if e[0] in ("record", "start", "runner", "topic")], p.journal
    condition = stalled(p.store.status)
    assert (condition["status"], condition["reason"]) == ("True", "StartingPositionRefused")
    assert said in condition["message"]
    assert ("warning", "StartingPositionRefused") in p.journal
    assert not p.store.status.get("revisions")


def test_a_first_revision_starts_once_records_reach_its_starting_time() -> None:
    p = parts([log("clicks")], [])
    p.admin.ends = {"clicks": 50}
    p.admin.by_time = {"clicks": {0: -1}}
    body = view(**starting_at({"from": "Timestamp", "timestamp": "2030-01-01T00:00:00Z"}))
    run(p, body)
    assert ("start", 1) not in p.journal
    p.admin.by_time = {"clicks": {0: 49}}
    run(p, body)
    assert ("start", 1) in p.journal
    [spec] = [s for s in p.runtime.specs if s.revision == 1]
    assert spec.inputs[0].starting_position.kind == "timestamp"


@pytest.mark.parametrize(
    "position",
    [
        {"from": "Offsets", "offsets": {"0": 50}},
        {"from": "Earliest"},
        {"from": "Latest"},
        {"from": "Timestamp", "timestamp": "2020-01-01T00:00:00Z"},
    ],
)
def test_a_first_revision_starts_where_its_input_has_the_place(position: dict[str, Any]) -> None:
    p = parts([log("clicks")], [])
    p.admin.ends = {"clicks": 50}
    p.admin.by_time = {"clicks": {0: 0}}
    run(p, view(**starting_at(position)))
    assert ("start", 1) in p.journal
    assert not [c for c in p.store.status["conditions"] if c["reason"].endswith("Refused")]


def test_a_jobs_first_revision_is_not_started_where_its_input_has_no_such_place() -> None:
    p = parts([log("clicks"), log("enriched")], [])
    p.admin.ends = {"clicks": 50}
    position = {"from": "Offsets", "offsets": {"4": 0}}
    jobs.run(p, jobs.job(inputs=[{"log": "clicks", "startingPosition": position}]))
    assert not [e for e in p.journal if e[0] in ("record", "start")], p.journal
    condition = stalled(p.store.status)
    assert (condition["status"], condition["reason"]) == ("True", "StartingPositionRefused")
    assert "spec.inputs[0].startingPosition.offsets names partition 4" in condition["message"]
    good = {"from": "Offsets", "offsets": {"0": 3}}
    jobs.run(p, jobs.job(2, inputs=[{"log": "clicks", "startingPosition": good}]))
    assert ("start", 1) in p.journal


@pytest.mark.parametrize(
    ("position", "said"),
    [
        ({"from": "Offsets", "offsets": {"4": 0}},
         "spec.inputs[0].startingPosition.offsets names partition 4, but log clicks has 1 "
         "partition (partition 0)"),
        ({"from": "Offsets", "offsets": {"0": 2}}, "retention deleted offsets 2 to 4"),
        ({"from": "Timestamp", "timestamp": "2099-01-01T00:00:00Z"},
         "spec.inputs[0].startingPosition.timestamp is 2099-01-01T00:00:00.000Z, but no record"),
    ],
)  # fmt: skip
def test_a_jobs_later_revision_is_not_started_where_its_input_has_no_such_place(
    position: dict[str, Any], said: str
) -> None:
    p = parts([log("clicks"), log("enriched")], [])
    p.admin.marks = {"clicks": {0: (5, 50)}}
    p.admin.by_time = {"clicks": {0: -1}}
    reprocess = {"upgrade": {"strategy": "Reprocess"}}
    first = jobs.job(**reprocess)
    jobs.run(p, first)
    running = copy.deepcopy(p.store.status)
    p.admin.groups = {running["consumerGroup"]: {"clicks": {0: 40}}}
    mark = len(p.journal)
    edited = jobs.job(
        2, image="registry/enrich:2", inputs=[{"log": "clicks", "startingPosition": position}],
        **reprocess,
    )  # fmt: skip
    jobs.run(p, edited, old_spec=first["spec"])
    p.admin.groups[running["consumerGroup"]] = {"clicks": {0: 45}}  # revision 1 reads on
    jobs.run(p, edited)  # and on the observer's rounds, without the spec it replaced
    assert moved(p, mark) == [], p.since(mark)
    assert not [e for e in p.since(mark) if e[0] in ("start", "topic")], p.since(mark)
    assert p.runtime.running == {"enrich-job-r1": 1}  # runs on, on its checkpoint
    status = p.store.status
    kept = ("revision", "specHash", "consumerGroup")
    assert {k: status[k] for k in kept} == {k: running[k] for k in kept}
    # Still observed: its position and lag as its group has them now.
    assert status["inputs"] == [
        {"log": "clicks", "topic": "clicks", "position": {"0": 45}, "lag": 5}
    ]
    assert (status["lag"], status["sparkApplication"]["name"]) == (5, "enrich-job-r1")
    condition = stalled(status)
    assert (condition["status"], condition["reason"]) == ("True", "StartingPositionRefused")
    assert condition["message"].startswith("revision 2 does not start: ")
    assert said in condition["message"]
    assert condition["message"].endswith("revision 1 runs on unchanged until the starting "
                                         "position is one the log has")  # fmt: skip
    assert p.since(mark).count(("warning", "StartingPositionRefused")) == 1


def test_a_jobs_later_revision_starts_once_its_starting_position_is_one_the_log_has() -> None:
    p = parts([log("clicks"), log("enriched")], [])
    p.admin.ends = {"clicks": 50}
    reprocess = {"upgrade": {"strategy": "Reprocess"}}
    jobs.run(p, jobs.job(**reprocess))
    bad = {"from": "Offsets", "offsets": {"0": 99}}
    edited = {"image": "registry/enrich:2", **reprocess}
    jobs.run(p, jobs.job(2, inputs=[{"log": "clicks", "startingPosition": bad}], **edited))
    assert p.runtime.running == {"enrich-job-r1": 1}
    mark = len(p.journal)
    good = {"from": "Offsets", "offsets": {"0": 30}}
    jobs.run(p, jobs.job(3, inputs=[{"log": "clicks", "startingPosition": good}], **edited))
    after = p.since(mark)
    assert ("start", 2) in after
    assert ("stop", "enrich-job-r1") in after
    assert p.runtime.running == {"enrich-job-r2": 2}
    assert p.store.status["revision"] == 2
    assert not [c for c in p.store.status["conditions"] if c["reason"].endswith("Refused")]
