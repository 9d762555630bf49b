"""A Source's revisions: a re-snapshot started beside the serving revision, its cutover once it has
written what the serving one has, the retirement of the one it replaces, and the names and
topics each revision has."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api.log import Log
from distributary.api.source import Source
from distributary.plan.source_plan import connector_config, heartbeat_topic
from distributary.plan.source_revisions import (
    CATCHING_UP,
    RETIRED,
    RETIRING,
    SERVING,
    CapturePosition,
    capture_position,
    lsn_text,
    retired,
    revision_step,
    serving_topics,
)

NOW = "2026-11-28T06:00:00Z"


def _source(revision: int = 1, name: str = "shop") -> Source:
    return Source.model_validate(
        {
            "metadata": {"name": name, "namespace": "sales"},
            "spec": {
                "postgres": {"host": "db", "database": "shop", "user": "cdc",
                             "passwordSecret": {"name": "db"}},
                "tables": [{"name": "public.orders"}],
                "snapshot": {"revision": revision},
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
    step = revision_step(_source(2), LOGS, first.rows, {1: CapturePosition(True, 100)}, NOW)
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
        _source(2), LOGS, revision_step(_source(), LOGS, [], {}, NOW).rows, {}, NOW
    )
    step = revision_step(_source(2), LOGS, started.rows, {2: new, 1: old}, NOW)
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
    step = revision_step(_source(2), LOGS, rows, {}, NOW)
    assert step.retire == (1,)
    assert step.serving == 2


def test_a_revision_no_longer_asked_for_is_retired_and_a_lowered_one_is_refused() -> None:
    started = revision_step(
        _source(2), LOGS, revision_step(_source(), LOGS, [], {}, NOW).rows, {}, NOW
    )
    moved_on = revision_step(_source(3), LOGS, started.rows, {}, NOW)
    assert _rows(moved_on) == {1: SERVING, 2: RETIRING, 3: CATCHING_UP}
    assert moved_on.retire == (2,)
    back = revision_step(_source(1), LOGS, started.rows, {}, NOW)
    assert _rows(back) == {1: SERVING, 2: RETIRING}
    assert back.problem is None
    served = [{"revision": 3, "phase": SERVING, "connector": "c", "slot": "s", "topics": {}}]
    lowered = revision_step(_source(2), LOGS, served, {}, NOW)
    assert lowered.problem is not None
    assert lowered.problem.startswith("spec.snapshot.revision: 2 is below revision 3")
    assert lowered.serving == 3
    assert lowered.running == (3,)


def test_only_the_last_retired_revisions_are_listed() -> None:
    rows = [
        {"revision": n, "phase": RETIRED, "connector": "c", "slot": "s", "topics": {}}
        for n in range(1, 9)
    ]
    rows.append({"revision": 9, "phase": SERVING, "connector": "c", "slot": "s", "topics": {}})
    step = revision_step(_source(9), LOGS, rows, {}, NOW)
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
    assert capture_position({"offsets": [{"offset": streaming}]}) == CapturePosition(True, 52452000)
    assert lsn_text(52451856) == "0/3205A10"
    assert lsn_text((2 << 32) + 16) == "2/10"


def test_each_revision_has_its_own_connector_slot_publication_prefix_and_snapshot() -> None:
    source = _source(2)
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
                  "snapshot": {"mode": "NoData", "revision": 2}}}
    )  # fmt: skip
    assert connector_config(nodata, {"public.orders": "t"}, "x")["snapshot.mode"] == "no_data"
    assert connector_config(nodata, {"public.orders": "t"}, "x", 2)["snapshot.mode"] == "initial"


def test_a_long_sources_revision_identifiers_stay_within_63_bytes_and_distinct() -> None:
    source = _source(name="a" * 60)
    names = {source.revision_identifier(n) for n in (1, 2, 12345)}
    assert len(names) == 3
    assert all(len(n) <= 63 for n in names)
    assert source.revision_identifier(12345).endswith("_r12345")
