"""`distributary wait`: what covers a record, and how the wait ends."""

from __future__ import annotations

import pytest

from distributary.cli.errors import UserError
from distributary.cli.wait import Positions, Probe, refuse_suspended, wait_for_view
from distributary.plan.revisions.positions import CoverError, parse_cover, uncovered


def test_a_cover_is_log_partition_offset_and_a_log_name_may_hold_colons() -> None:
    assert parse_cover("page-views:0:41") == ("page-views", 0, 41)
    assert parse_cover("a:b:3:7") == ("a:b", 3, 7)
    for bad in ("page-views:0", "page-views:x:1", ":0:1", "page-views:0:-1"):
        with pytest.raises(CoverError, match="LOG:P"):
            parse_cover(bad)


def test_a_record_is_covered_once_the_position_is_past_it() -> None:
    covers = [("clicks", 0, 41), ("clicks", 1, 0)]
    assert uncovered(covers, {"clicks": {0: 42, 1: 1}}) == []
    assert uncovered(covers, {"clicks": {0: 41, 1: 1}}) == ["clicks:0:41 (at 41)"]
    assert uncovered(covers, {"clicks": {0: 42}}) == ["clicks:1:0 (at -)"]


def scripted(*states: tuple[Positions, bool]) -> Probe:
    """A probe answering `states` in turn (then the last one again)."""
    seen = list(states)

    def probe() -> tuple[Positions, bool, str]:
        positions, caught_up = seen.pop(0) if len(seen) > 1 else seen[0]
        return positions, caught_up, "revision 1"

    return probe


def test_the_wait_ends_when_the_position_moves_past_the_record() -> None:
    lines: list[str] = []
    probe = scripted(({"clicks": {0: 3}}, False), ({"clicks": {0: 9}}, False))
    detail = wait_for_view(probe, [("clicks", 0, 5)], False, 5, lines.append, interval=0)
    assert detail == "revision 1"
    assert lines == ["waiting for clicks:0:5 (at 3) (revision 1)"]


def test_caught_up_waits_for_the_view_to_say_so() -> None:
    lines: list[str] = []
    probe = scripted(({"clicks": {0: 9}}, False), ({"clicks": {0: 9}}, True))
    wait_for_view(probe, [], True, 5, lines.append, interval=0)
    assert lines == ["waiting for caught up (revision 1)"]


def test_a_timeout_names_what_is_still_missing() -> None:
    probe = scripted(({"clicks": {0: 3}}, False))
    with pytest.raises(
        UserError, match=r"timed out after 0s; still waiting for clicks:0:5 \(at 3\)"
    ):
        wait_for_view(probe, [("clicks", 0, 5)], False, 0, lambda _: None, interval=0)


def test_a_log_the_view_does_not_read_is_refused() -> None:
    probe = scripted(({"clicks": {0: 3}}, False))
    with pytest.raises(UserError, match="does not read log 'orders'; it reads clicks"):
        wait_for_view(probe, [("orders", 0, 1)], False, 5, lambda _: None, interval=0)


def test_a_suspended_view_is_refused_at_once_naming_the_fix() -> None:
    ready = {"type": "Ready", "status": "False", "reason": "Suspended", "message": "spec.suspend"}
    with pytest.raises(UserError, match=r"is suspended .* set spec\.suspend to false"):
        refuse_suspended("DerivedView shop/totals", {"conditions": [ready]})
    refuse_suspended("DerivedView shop/totals", {"conditions": [{**ready, "reason": "Starting"}]})
