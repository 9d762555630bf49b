"""The order of record and act in a view's reconcile, driven through in-memory parts.

The write-ahead discipline is what lets a restarted operator (or `distributary run`) carry on
what was decided instead of deciding anew: each test reads the journal of status writes and
actions. The integration tests drive the same reconcile through the real broker, Spark and API
server; these run in milliseconds.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from tests.unit.reconcile.fakes import NS, FakeStore, Parts, parts

from distributary.plan.pipelines.pipeline import SOURCE_LABEL
from distributary.plan.revisions.progress import progress_key
from distributary.reconcile.ports import StatusConflictError, TryAgain
from distributary.reconcile.view import reconcile_view

SQL = "SELECT user, n FROM src WHERE n > 1"


def log(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": "1"},
        "spec": {"partitions": 1, "schema": "user STRING, n INT"},
    }


def view(sql: str = SQL, generation: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {
            "name": "big",
            "namespace": NS,
            "uid": "uid-big",
            "generation": generation,
            "resourceVersion": str(generation),
        },
        "spec": {
            "inputs": [{"log": "clicks", "alias": "src"}],
            "sql": sql,
            "output": {"mode": "append"},
            "upgrade": {"cutoverWindow": "0s"},
            **spec,
        },
    }


def run(p: Parts, body: dict[str, Any], old_spec: Any = None) -> None:
    """One reconcile of `body` as the front end would run it: from the status it holds."""
    read = {**copy.deepcopy(body), "status": p.store.status}
    p.world.writers = [read]
    asyncio.run(reconcile_view(read, p.services(), p.store, p.world, p.events, old_spec))


def index(journal: list[tuple[Any, ...]], match: Any) -> int:
    return next(i for i, entry in enumerate(journal) if match(entry))


def is_start_record(revision: int) -> Any:
    return lambda e: (
        e[0] == "record" and (e[1].get("pendingAction") or {}).get("revision") == revision
    )


def test_the_start_record_is_written_before_the_application_starts() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    started = index(p.journal, lambda e: e == ("start", 1))
    assert index(p.journal, is_start_record(1)) < started
    record = next(e[1] for e in p.journal if is_start_record(1)(e))
    assert record["pendingAction"]["action"] == "StartRevision"
    assert [r["revision"] for r in record["revisions"]] == [1]
    # The reconcile's last write clears the pending action: the start was carried out.
    assert p.journal[-1][0] == "finish"
    assert "pendingAction" not in p.store.status
    assert p.store.status["servingRevision"] == 1


def reprocessed(p: Parts) -> dict[str, Any]:
    """The view at revision 1, then its SQL edited: revision 2 catches up beside it."""
    run(p, view())
    edited = view("SELECT user, n FROM src WHERE n > 5", generation=2)
    run(p, edited, old_spec=view()["spec"])
    return edited


def test_a_reprocess_records_revision_2_before_starting_it_and_revision_1_keeps_serving() -> None:
    p = parts([log("clicks")], [])
    mark = len(p.journal)
    reprocessed(p)
    after = p.since(mark)
    assert index(after, is_start_record(2)) < index(after, lambda e: e == ("start", 2))
    phases = {r["revision"]: r["phase"] for r in p.store.status["revisions"]}
    assert phases == {1: "Serving", 2: "CatchingUp"}
    assert p.world.served == {"big": "big.r1"}
    assert set(p.runtime.running.values()) == {1, 2}


def test_a_cutover_is_recorded_before_the_output_log_moves() -> None:
    p = parts([log("clicks")], [])
    p.admin.ends = {"clicks": 10}
    edited = reprocessed(p)
    p.admin.groups = {f"distributary.{NS}.big.r1": {"clicks": {0: 10}}}
    run(p, edited)
    assert [r["phase"] for r in p.store.status["revisions"]] == ["Serving", "CatchingUp"]
    p.admin.groups[f"distributary.{NS}.big.r2"] = {"clicks": {0: 10}}
    run(p, edited)  # observes revision 2's lag: 0
    mark = len(p.journal)
    run(p, edited)  # caught up for the window (0s): cuts over
    after = p.since(mark)
    cutover = index(after, lambda e: e[0] == "record" and e[1].get("servingRevision") == 2)
    moved = index(after, lambda e: e == ("serve", "big", "big.r2"))
    stopped = index(after, lambda e: e == ("stop", (1,)))
    assert cutover < moved < stopped
    assert p.world.served == {"big": "big.r2"}
    phases = {r["revision"]: r["phase"] for r in p.store.status["revisions"]}
    assert phases == {1: "Retiring", 2: "Serving"}


def test_a_record_left_by_a_crash_resumes_the_same_revision() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    edited = view("SELECT user, n FROM src WHERE n > 5", generation=2)
    # The operator writes revision 2's start record, then dies before starting it.
    crash = parts([log("clicks")], [])
    crash.store.saved = copy.deepcopy(p.store.saved)
    crash.runtime.running = dict(p.runtime.running)
    crash.world.served = dict(p.world.served)

    class DiedError(Exception):
        pass

    def die(*_: Any) -> Any:
        raise DiedError

    crash.runtime.view_app = die  # type: ignore[method-assign]
    with pytest.raises(DiedError):
        run(crash, edited, old_spec=view()["spec"])
    assert (crash.store.status.get("pendingAction") or {}).get("revision") == 2
    # A restarted operator: no update event (no old spec), the same status.
    again = parts([log("clicks")], [])
    again.store.saved = copy.deepcopy(crash.store.saved)
    again.runtime.running = dict(crash.runtime.running)
    again.world.served = dict(crash.world.served)
    run(again, edited)
    assert not any(is_start_record(3)(e) for e in again.journal)
    assert ("start", 2) in again.journal
    revisions = [r["revision"] for r in again.store.status["revisions"]]
    assert revisions == [1, 2]
    assert "pendingAction" not in again.store.status


def test_a_refused_edit_changes_nothing() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    before = copy.deepcopy(p.store.status)
    p.lost.append("log clicks partition 0 starts at offset 7, not 0")
    mark = len(p.journal)
    edited = view("SELECT user, n FROM src WHERE n > 5", generation=2)
    run(p, edited, old_spec=view()["spec"])
    after = p.since(mark)
    assert not [e for e in after if e[0] in ("record", "start", "stop", "serve", "delete topic")]
    assert p.runtime.running == {"big-r1": 1}
    assert p.world.served == {"big": "big.r1"}
    status = p.store.status
    assert status["revisions"] == before["revisions"]
    reasons = {c["type"]: c.get("reason") for c in status["conditions"]}
    assert reasons["Stalled"] == "HistoryIncomplete"


def test_the_retention_guard_is_told_which_inputs_are_a_sources_tables() -> None:
    table = log("clicks")
    table["metadata"]["labels"] = {SOURCE_LABEL: "shop"}  # made by a Source (the operator's)
    p = parts([table], [])
    run(p, view())
    run(p, view("SELECT user, n FROM src WHERE n > 5", generation=2), old_spec=view()["spec"])
    assert p.asked == [({"clicks": "clicks"}, {"clicks"})]
    plain = parts([log("clicks")], [])
    run(plain, view())
    run(plain, view("SELECT user, n FROM src WHERE n > 5", generation=2), old_spec=view()["spec"])
    assert plain.asked == [({"clicks": "clicks"}, set())]


def test_a_conflict_on_the_start_record_acts_on_nothing() -> None:
    p = parts([log("clicks")], [])
    p.store.conflict = True
    with pytest.raises(StatusConflictError):
        run(p, view())
    assert p.journal == []
    assert p.runtime.running == {}


def test_a_failed_application_is_restarted_after_its_back_off() -> None:
    p = parts([log("clicks")], [])
    run(p, view())
    assert p.store.status["sparkApplication"]["runningSince"]
    p.runtime.failing.add(1)
    with pytest.raises(TryAgain) as waited:
        run(p, view())
    # 10 s from when the reconcile saw the failure (due to the whole second after), asked for
    # when it ends: a busy machine's reconcile may take a moment of that.
    assert 9.5 <= waited.value.delay <= 11
    app = p.store.status["sparkApplication"]
    assert (app["state"], app["attempts"], app["lastError"]) == ("FAILED", 1, "it failed")
    assert len(app["failures"]) == 1
    assert "runningSince" not in app
    # Seen again before its restart is due: the failure is counted once, nothing restarts.
    mark = len(p.journal)
    with pytest.raises(TryAgain):
        run(p, view())
    assert p.store.status["sparkApplication"] == app
    assert not [e for e in p.since(mark) if e[0] in ("remove", "start")]
    # Its due time is in status, so a restarted operator honours it too; once it has passed,
    # the application is removed and started again, and the history goes on.
    p.store.saved["sparkApplication"] = {**app, "restartAt": "2020-01-01T00:00:00Z"}
    run(p, view())
    assert [e for e in p.since(mark) if e[0] in ("remove", "start")] == [
        ("remove", 1),
        ("start", 1),
    ]
    again = p.store.status["sparkApplication"]
    assert (again["state"], again["attempts"], again["failures"]) == (
        "RUNNING",
        1,
        app["failures"],
    )
    assert "restartAt" not in again


def test_unreachable_topics_are_tried_again_before_anything_runs() -> None:
    p = parts([log("clicks")], [])
    p.topics.unreachable = "Kafka does not answer"
    with pytest.raises(TryAgain, match="Kafka does not answer"):
        run(p, view())
    assert not [e for e in p.journal if e[0] == "start"]


REFUSED = "Kafka refused topic v.r1 (INVALID_REPLICATION_FACTOR): only 1 broker(s)."


def test_a_topic_kafka_refuses_stalls_the_view_once_with_a_warning_and_nothing_runs() -> None:
    p = parts([log("clicks")], [])
    p.topics.refused = REFUSED
    run(p, view())
    run(p, view())  # the observer's next round: no second warning
    assert not [e for e in p.journal if e[0] == "start"]
    assert [e for e in p.journal if e[0] == "warning"] == [("warning", "KafkaRefused")]
    stalled = next(c for c in p.store.status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"], stalled["message"]) == (
        "True",
        "KafkaRefused",
        REFUSED,
    )


TAKEN = "topic v.r1 belongs to Log team-a/v.r1; DerivedView team-b/v makes and changes nothing"


def test_a_revision_topic_another_log_owns_stalls_the_view_as_taken() -> None:
    p = parts([log("clicks")], [])
    p.topics.taken = TAKEN
    run(p, view())
    assert not [e for e in p.journal if e[0] == "start"]
    assert [e for e in p.journal if e[0] == "warning"] == [("warning", "TopicTaken")]
    stalled = next(c for c in p.store.status["conditions"] if c["type"] == "Stalled")
    assert (stalled["reason"], stalled["message"]) == ("TopicTaken", TAKEN)


def test_a_refused_edit_leaves_the_output_log_as_it_is() -> None:
    """An append view edited into an upsert one whose reprocess is refused: the live topic's
    Log is not made compacted under the serving revision."""
    p = parts([log("clicks")], [])
    run(p, view())
    applied = dict(p.world.applied)
    p.lost.append("log clicks partition 0 starts at offset 7, not 0")
    mark = len(p.journal)
    upsert = {"mode": "upsert", "key": ["user"]}
    edited = view("SELECT user, n FROM src", generation=2, output=upsert)
    run(p, edited, old_spec=view()["spec"])
    assert not [e for e in p.since(mark) if e[0] in ("apply", "record", "start", "stop")]
    assert p.world.applied == applied
    reasons = {c["type"]: c.get("reason") for c in p.store.status["conditions"]}
    assert reasons["Stalled"] == "HistoryIncomplete"


def test_fewer_output_partitions_than_the_topic_has_are_refused_and_nothing_moves() -> None:
    p = parts([log("clicks")], [])
    run(p, view(output={"mode": "append", "partitions": 4}))
    p.world.partitions["big"] = 4
    before = copy.deepcopy(p.store.status["revisions"])
    mark = len(p.journal)
    run(p, view(generation=2, output={"mode": "append", "partitions": 2}))
    after = p.since(mark)
    assert not [e for e in after if e[0] in ("apply", "record", "start", "stop", "topic")]
    assert ("keep", (1,)) in after  # the serving revision runs on as it is
    assert p.runtime.running == {"big-r1": 1}
    stalled = next(c for c in p.store.status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "PartitionsLowered")
    assert "set it to 4 or more" in stalled["message"]
    assert p.store.status["revisions"] == before


def test_a_reader_of_a_reprocessing_view_waits_for_its_cutover_then_reads_the_new_topic() -> None:
    """The upstream view's edit changes its output's schema: the downstream view's definition
    changes at once, but its new revision must not read the old revision's topic with the new
    schema. It waits, its serving revision running on, and starts once the upstream serves."""
    p = parts([log("clicks")], [])
    down_store = FakeStore(p.journal)
    counts = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "per-user", "namespace": NS, "uid": "uid-per-user",
                     "generation": 1, "resourceVersion": "1"},
        "spec": {
            "inputs": [{"log": "big", "alias": "b"}],
            "sql": "SELECT user, count(*) AS n FROM b GROUP BY user",
            "output": {"mode": "upsert", "key": ["user"]},
            "upgrade": {"cutoverWindow": "0s"},
        },
    }  # fmt: skip

    def both(upstream: dict[str, Any], old: Any = None) -> None:
        up = {**copy.deepcopy(upstream), "status": p.store.status}
        down = {**copy.deepcopy(counts), "status": down_store.status}
        p.world.writers = [up, down]
        asyncio.run(reconcile_view(up, p.services(), p.store, p.world, p.events, old))
        p.world.writers = [{**up, "status": p.store.status}, down]  # as the index shows it
        asyncio.run(reconcile_view(down, p.services(), down_store, p.world, p.events))

    p.admin.ends = {"clicks": 10}
    both(view())
    p.admin.groups = {f"distributary.{NS}.big.r1": {"clicks": {0: 10}}}
    assert p.runtime.running == {"big-r1": 1, "per-user-r1": 1}
    wider = view("SELECT user, n, n * 2 AS twice FROM src", generation=2)
    both(wider, old=view()["spec"])
    assert [r["phase"] for r in p.store.status["revisions"]] == ["Serving", "CatchingUp"]
    waiting = next(c for c in down_store.status["conditions"] if c["type"] == "Reconciling")
    assert waiting["reason"] == "WaitingForUpstream"
    assert [r["revision"] for r in down_store.status["revisions"]] == [1]
    assert p.runtime.running == {"big-r1": 1, "big-r2": 2, "per-user-r1": 1}
    # The upstream's revision 2 catches up and serves; then the reader reprocesses from it.
    p.admin.groups[f"distributary.{NS}.big.r2"] = {"clicks": {0: 10}}
    for _ in range(3):
        both(wider)
    assert p.world.served["big"] == "big.r2"
    rows = {r["revision"]: r for r in down_store.status["revisions"]}
    assert rows[2]["phase"] in ("CatchingUp", "Serving")
    assert [i["topic"] for i in rows[2]["inputs"]] == ["big.r2"]
    started = [e for e in p.journal if e[0] == "runner" and "/per-user/uid-per-user/r2" in e[2]]
    assert started, "the reader's revision 2 never ran"


def test_a_view_created_again_goes_on_past_what_the_one_before_left_in_kafka() -> None:
    p = parts([log("clicks")], [])
    # A view of the same name, deleted, left its revision 2's topic and revision 3's group.
    p.admin.left = {"big.r1", "big.r2", "clicks"}
    p.admin.groups[f"distributary.{NS}.big.r3"] = {"clicks": {0: 40}}
    p.admin.groups[f"distributary.{NS}.bigger.r9"] = {"clicks": {0: 1}}  # another view's
    latest = {"from": "Latest"}
    run(p, view(inputs=[{"log": "clicks", "alias": "src", "startingPosition": latest}]))
    rows = p.store.status["revisions"]
    assert [(r["revision"], r["phase"], r["topic"]) for r in rows] == [(4, "Serving", "big.r4")]
    [spec] = p.runtime.specs
    assert spec.consumer_group == f"distributary.{NS}.big.r4"
    assert spec.checkpoint_location.endswith(f"/{NS}/big/uid-big/r4")
    # Its first revision starts where the spec says, not from the start as a reprocess would.
    assert {s.starting_position.kind for s in spec.inputs} == {"latest"}


def test_a_view_that_keeps_state_and_lost_its_checkpoint_is_rebuilt_beside_it() -> None:
    p = parts([log("clicks")], [])
    counts = view(
        "SELECT user, count(*) AS n FROM src GROUP BY user",
        output={"mode": "upsert", "key": ["user"]},
    )
    run(p, counts)
    [spec] = p.runtime.specs
    assert spec.stateful
    # Its runner found no checkpoint after its group had read records, and did not start.
    lost = {"state": "CheckpointLost", "checkpoint": spec.checkpoint_location}
    p.progress.latest[progress_key("DerivedView", NS, "big", 1)] = lost
    run(p, counts)
    [row] = p.store.status["revisions"]
    assert row["checkpointLost"]
    mark = len(p.journal)
    run(p, counts)
    rows = {r["revision"]: r for r in p.store.status["revisions"]}
    assert (rows[1]["phase"], rows[2]["phase"], rows[2]["reason"]) == (
        "Serving",
        "CatchingUp",
        "CheckpointLost",
    )
    after = p.since(mark)
    assert ("event", "CheckpointLost") in after
    assert ("stop", (1,)) in after  # never resumed on empty state
    assert p.runtime.specs[-1].revision == 2
    assert {s.starting_position.kind for s in p.runtime.specs[-1].inputs} == {"earliest"}
    reconciling = next(c for c in p.store.status["conditions"] if c["type"] == "Reconciling")
    assert reconciling["reason"] == "CheckpointLost"


def test_a_report_about_another_checkpoint_is_not_a_loss() -> None:
    p = parts([log("clicks")], [])
    counts = view(
        "SELECT user, count(*) AS n FROM src GROUP BY user",
        output={"mode": "upsert", "key": ["user"]},
    )
    run(p, counts)
    # Left by an earlier view of the same name, under another uid's folder.
    stale = {"state": "CheckpointLost", "checkpoint": "file:///ck/shop/big/old-uid/r1"}
    p.progress.latest[progress_key("DerivedView", NS, "big", 1)] = stale
    run(p, counts)
    run(p, counts)
    assert [r["revision"] for r in p.store.status["revisions"]] == [1]
