"""A Source's revisions: a re-snapshot started beside the serving revision, its cutover once it has
written what the serving one has, the retirement of the one it replaces, and the names and
topics each revision has."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api.log import Log
from distributary.api.source import Source
from distributary.plan.sources.source_plan import connector_config, heartbeat_topic
from distributary.plan.sources.source_revisions import (
    CATCHING_UP,
    RETIRED,
    RETIRING,
    SERVING,
    CapturePosition,
    capture_position,
    interrupted,
    lsn_text,
    retired,
    revision_step,
    serving_topics,
    snapshot_check,
)

NOW = "2026-11-28T06:00:00Z"


def _source(epoch: int = 0, name: str = "shop") -> Source:
    return Source.model_validate(
        {
            "metadata": {"name": name, "namespace": "sales"},
            "spec": {
                "postgres": {"host": "db", "database": "shop", "user": "cdc",
                             "passwordSecret": {"name": "db"}},
                "tables": [{"name": "public.orders"}],
                "snapshot": {"epoch": epoch},
            },
        }
    )  # fmt: skip


LOGS = {"public.orders": Log.model_validate({"metadata": {"name": "shop-orders"}})}


def _rows(step: Any) -> dict[int, str]:
    return {r["revision"]: r["phase"] for r in step.rows}


def test_a_first_round_records_revision_1_serving_the_logs_own_topics() -> None:
    step = revision_step(_source(), LOGS, [], {}, NOW)
    assert _rows(step) == {1: SERVING}
    assert step.running == (1,)
    assert serving_topics(step.rows) == {"public.orders": "shop-orders"}
    assert step.rows[0]["slot"] == "distributary_sales_shop"
    assert step.rows[0]["connector"] == "distributary.sales.shop"


def test_a_raised_revision_starts_beside_the_serving_one_with_names_of_its_own() -> None:
    first = revision_step(_source(), LOGS, [], {}, NOW)
    step = revision_step(_source(1), LOGS, first.rows, {1: CapturePosition(True, 100)}, NOW)
    assert _rows(step) == {1: SERVING, 2: CATCHING_UP}
    assert step.running == (1, 2)
    assert not step.cut_over
    assert not step.retire
    second = next(r for r in step.rows if r["revision"] == 2)
    assert second["topics"] == {"public.orders": "shop-orders.r2"}
    assert second["slot"] == "distributary_sales_shop_r2"
    assert second["connector"] == "distributary.sales.shop.r2"
    assert serving_topics(step.rows) == {"public.orders": "shop-orders"}  # readers stay


@pytest.mark.parametrize(
    ("new", "old", "cut"),
    [
        (None, CapturePosition(True, 100), False),  # no offset yet
        (CapturePosition(False, 500), CapturePosition(True, 100), False),  # snapshot not whole
        (CapturePosition(True, 90), CapturePosition(True, 100), False),  # behind the serving one
        (CapturePosition(True, 100), CapturePosition(True, 100), True),
        (CapturePosition(True, 120), CapturePosition(True, 100), True),
        (CapturePosition(True, 120), None, True),  # the serving one wrote nothing yet
    ],
)
def test_the_new_revision_cuts_over_once_it_has_written_what_the_serving_one_has(
    new: CapturePosition | None, old: CapturePosition | None, cut: bool
) -> None:
    started = revision_step(
        _source(1), LOGS, revision_step(_source(), LOGS, [], {}, NOW).rows, {}, NOW
    )
    step = revision_step(_source(1), LOGS, started.rows, {2: new, 1: old}, NOW)
    assert step.cut_over is cut
    if cut:
        assert _rows(step) == {1: RETIRING, 2: SERVING}
        assert step.retire == (1,)
        assert step.running == (2,)
        assert serving_topics(step.rows) == {"public.orders": "shop-orders.r2"}
        assert _rows(type(step)(retired(step.rows, 1), 2, None)) == {1: RETIRED, 2: SERVING}
    else:
        assert _rows(step) == {1: SERVING, 2: CATCHING_UP}
        assert step.retire == ()


def test_a_retiring_revision_recorded_before_a_crash_is_retired_again() -> None:
    rows = [
        {"revision": 1, "phase": RETIRING, "connector": "c", "slot": "s", "topics": {}},
        {"revision": 2, "phase": SERVING, "connector": "c2", "slot": "s2", "topics": {}},
    ]
    step = revision_step(_source(1), LOGS, rows, {}, NOW)
    assert step.retire == (1,)
    assert step.serving == 2


def test_a_revision_no_longer_asked_for_is_retired_and_a_lowered_epoch_is_refused() -> None:
    started = revision_step(
        _source(1), LOGS, revision_step(_source(), LOGS, [], {}, NOW).rows, {}, NOW
    )
    moved_on = revision_step(_source(2), LOGS, started.rows, {}, NOW)
    assert _rows(moved_on) == {1: SERVING, 2: RETIRING, 3: CATCHING_UP}
    assert moved_on.retire == (2,)
    assert next(r for r in moved_on.rows if r["revision"] == 3)["epoch"] == 2
    back = revision_step(_source(0), LOGS, started.rows, {}, NOW)
    assert _rows(back) == {1: SERVING, 2: RETIRING}
    assert back.problem is None
    served = [
        {"revision": 3, "epoch": 2, "phase": SERVING, "connector": "c", "slot": "s", "topics": {}}
    ]
    lowered = revision_step(_source(1), LOGS, served, {}, NOW)
    assert lowered.problem is not None
    assert lowered.problem.startswith("spec.snapshot.epoch: 1 is below 2, the epoch of revision 3")
    assert lowered.serving == 3
    assert lowered.running == (3,)


def test_an_interrupted_snapshot_is_never_trusted_and_is_taken_again_beside() -> None:
    first = revision_step(_source(), LOGS, [], {}, NOW)
    again = CapturePosition(False, 5000)  # taken again after a crash, later than its slot
    step = revision_step(_source(), LOGS, first.rows, {1: again}, NOW, {1: 4000})
    assert next(r for r in step.rows if r["revision"] == 1)["snapshot"] == "Interrupted"
    assert interrupted(step.rows) == 1
    assert _rows(step) == {1: SERVING, 2: CATCHING_UP}  # a fresh one beside; 1 serves meanwhile
    bad = revision_step(_source(), LOGS, step.rows, {1: again, 2: again}, NOW, {2: 4500})
    assert _rows(bad) == {1: SERVING, 2: RETIRING, 3: CATCHING_UP}  # and again, if need be
    assert bad.retire == (2,)
    clean = CapturePosition(True, 6000)
    good = revision_step(_source(), LOGS, bad.rows, {1: again, 3: clean}, NOW, {3: 6000})
    assert _rows(good) == {1: RETIRING, 2: RETIRING, 3: SERVING}
    assert interrupted(good.rows) is None
    assert next(r for r in good.rows if r["revision"] == 3)["snapshot"] == "Clean"


@pytest.mark.parametrize(
    ("position", "confirmed", "check"),
    [
        (CapturePosition(False, 4000), 4000, "Clean"),
        (CapturePosition(True, 4000), 4000, "Clean"),  # whole, not streaming yet
        (CapturePosition(False, 4100), 4000, "Interrupted"),
        (CapturePosition(True, 4100, streaming=True), 4000, None),  # the slot moved on
        (CapturePosition(False, 4100), None, None),  # no slot read
        (None, 4000, None),
    ],
)
def test_a_snapshot_is_clean_when_taken_at_its_slots_starting_point(
    position: CapturePosition | None, confirmed: int | None, check: str | None
) -> None:
    assert snapshot_check(position, confirmed) == check


def test_only_the_last_retired_revisions_are_listed() -> None:
    rows = [
        {"revision": n, "phase": RETIRED, "connector": "c", "slot": "s", "topics": {}}
        for n in range(1, 9)
    ]
    rows.append({"revision": 9, "phase": SERVING, "connector": "c", "slot": "s", "topics": {}})
    step = revision_step(_source(0), LOGS, rows, {}, NOW)
    assert sorted(_rows(step)) == [4, 5, 6, 7, 8, 9]


def test_debeziums_offsets_say_whether_the_snapshot_is_whole_and_what_is_written() -> None:
    assert capture_position({"offsets": []}) is None
    assert capture_position(None) is None
    during = {"lsn": 52451856, "txId": 729, "snapshot": "INITIAL", "snapshot_completed": False,
              "last_snapshot_record": False}  # fmt: skip
    assert capture_position({"offsets": [{"offset": during}]}) == CapturePosition(False, 52451856)
    after = {"lsn": 52451856, "txId": 729, "ts_usec": 1}
    assert capture_position({"offsets": [{"offset": after}]}) == CapturePosition(True, 52451856)
    streaming = {"lsn_proc": 52452128, "lsn_commit": 52452000, "lsn": 52452128, "txId": 730}
    assert capture_position({"offsets": [{"offset": streaming}]}) == CapturePosition(
        True, 52452000, streaming=True
    )
    assert lsn_text(52451856) == "0/3205A10"
    assert lsn_text((2 << 32) + 16) == "2/10"


def test_each_revision_has_its_own_connector_slot_publication_prefix_and_snapshot() -> None:
    source = _source(1)
    first = connector_config(source, {"public.orders": "shop-orders"}, "${dir:/s:password}")
    second = connector_config(source, {"public.orders": "shop-orders.r2"}, "x", 2)
    assert first["slot.name"] == first["publication.name"] == "distributary_sales_shop"
    assert second["slot.name"] == second["publication.name"] == "distributary_sales_shop_r2"
    assert second["topic.prefix"] == "distributary.sales.shop.r2"
    assert second["transforms.route0.replacement"] == "shop-orders.r2"
    assert heartbeat_topic(source, 2) == "distributary-heartbeat.distributary.sales.shop.r2"
    nodata = Source.model_validate(
        {**source.model_dump(by_alias=True, exclude_none=True),
         "spec": {**source.spec.model_dump(by_alias=True, exclude_none=True),
                  "snapshot": {"mode": "NoData", "epoch": 1}}}
    )  # fmt: skip
    assert connector_config(nodata, {"public.orders": "t"}, "x")["snapshot.mode"] == "no_data"
    assert connector_config(nodata, {"public.orders": "t"}, "x", 2)["snapshot.mode"] == "initial"


def test_a_long_sources_revision_identifiers_stay_within_63_bytes_and_distinct() -> None:
    source = _source(name="a" * 60)
    names = {source.revision_identifier(n) for n in (1, 2, 12345)}
    assert len(names) == 3
    assert all(len(n) <= 63 for n in names)
    assert source.revision_identifier(12345).endswith("_r12345")


def test_a_connector_started_again_before_its_snapshot_was_whole_is_not_trusted() -> None:
    first = revision_step(_source(), LOGS, [], {1: CapturePosition(False, 4000)}, NOW, {1: 4000})
    assert first.rows[0]["snapshot"] == "Clean"  # so far
    assert first.rows[0]["snapshotDone"] is False
    # The run died; the next one's worker starts the connector again: it snapshots again.
    again = revision_step(_source(), LOGS, first.rows, {1: None}, NOW, {1: 4000}, restarted={1})
    assert again.rows[0]["snapshot"] == "Interrupted"
    assert _rows(again) == {1: SERVING, 2: CATCHING_UP}
    # Started again once its snapshot was whole, or before it made a slot: nothing retaken.
    whole = revision_step(_source(), LOGS, [], {1: CapturePosition(True, 4000)}, NOW, {1: 4000})
    later = revision_step(_source(), LOGS, whole.rows, {}, NOW, {1: 4000}, restarted={1})
    assert later.rows[0]["snapshot"] == "Clean"
    none = revision_step(_source(), LOGS, [], {}, NOW)
    no_slot = revision_step(_source(), LOGS, none.rows, {}, NOW, {1: None}, restarted={1})
    assert "snapshot" not in no_slot.rows[0]
    assert _rows(no_slot) == {1: SERVING}
