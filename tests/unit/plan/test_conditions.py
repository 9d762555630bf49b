"""Conditions in the kstatus convention: Ready always, Reconciling and Stalled only while True."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from distributary.api.common import Condition
from distributary.plan.status.conditions import (
    ExtraCondition,
    Observation,
    Problem,
    Work,
    condition_of,
    conditions,
    is_ready,
    is_stalled,
    rfc3339,
)

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)
STAMP0, STAMP1 = "2025-03-01T12:00:00Z", "2025-03-01T12:05:00Z"

READY = Observation(generation=2, ready_reason="Serving", ready_message="Serving revision 1.")
WORKING = Observation(generation=2, work=(Work("CreatingTopic", "Creating topic clicks."),))
STUCK = Observation(generation=2, problems=(Problem("ChangeForbidden", "Rejected."),))


def shape(found: list[Condition]) -> list[tuple[str, str]]:
    return [(c.type, c.status) for c in found]


def test_first_sight_is_unknown_and_reconciling() -> None:
    found = conditions(Observation(generation=1, first_sight=True), [], T0)
    assert shape(found) == [("Ready", "Unknown"), ("Reconciling", "True")]
    assert {c.observed_generation for c in found} == {1}
    assert {c.last_transition_time for c in found} == {STAMP0}
    assert found[0].reason == "Progressing"


def test_ready_shows_only_ready_and_removes_the_abnormal_conditions() -> None:
    before = conditions(WORKING, [], T0)
    found = conditions(READY, before, T1)
    assert shape(found) == [("Ready", "True")]
    assert (found[0].reason, found[0].message) == ("Serving", "Serving revision 1.")
    assert found[0].last_transition_time == STAMP1


def test_work_under_way_reconciles_with_ready_unknown() -> None:
    work = (Work("StartingRevision", "Starting revision 2."), Work("CreatingTopic", "Creating."))
    found = conditions(Observation(generation=3, work=work), [], T0)
    assert shape(found) == [("Ready", "Unknown"), ("Reconciling", "True")]
    assert all(c.reason == "StartingRevision" for c in found)
    assert found[1].message == "Starting revision 2. Creating."


def test_a_problem_stalls_with_ready_false_and_no_reconciling() -> None:
    both = Observation(
        generation=4,
        first_sight=True,
        work=(Work("CreatingTopic", "Creating topic."),),
        problems=(Problem("InputMissing", "Log users does not exist."), Problem("Other", "Too.")),
    )
    found = conditions(both, [], T0)
    assert shape(found) == [("Ready", "False"), ("Stalled", "True")]
    assert found[1].reason == "InputMissing"
    assert found[1].message == "Log users does not exist. Too."
    assert is_stalled(found)


def test_an_unchanged_status_keeps_its_transition_time() -> None:
    before = conditions(WORKING, [], T0)
    again = Observation(generation=3, work=(Work("CatchingUp", "Lag is 12 records."),))
    found = conditions(again, before, T1)
    assert [c.last_transition_time for c in found] == [STAMP0, STAMP0]
    assert found[1].reason == "CatchingUp"
    assert {c.observed_generation for c in found} == {3}


def test_a_status_change_moves_the_transition_time() -> None:
    stalled = conditions(STUCK, conditions(WORKING, [], T0), T1)
    assert condition_of(stalled, "Ready") == Condition(
        type="Ready",
        status="False",
        reason="ChangeForbidden",
        message="Rejected.",
        observed_generation=2,
        last_transition_time=STAMP1,
    )


def test_a_condition_that_comes_back_starts_a_new_transition() -> None:
    reconciling = conditions(WORKING, conditions(READY, conditions(WORKING, [], T0), T0), T1)
    assert condition_of(reconciling, "Reconciling") is not None
    assert {c.last_transition_time for c in reconciling} == {STAMP1}


def test_extras_follow_the_standard_conditions_sorted_by_type() -> None:
    observation = Observation(
        generation=5,
        work=(Work("Reprocessing", "Revision 2 is 40% through its inputs."),),
        extras=(
            ExtraCondition("Reprocessing", "True", "CatchingUp", "Revision 2 is catching up."),
            ExtraCondition("DataLossRisk", "False", "HistoryComplete", "All history retained."),
            ExtraCondition("CaughtUp", "False", "Lagging", "Lag is 1200 records."),
        ),
    )
    found = conditions(observation, [], T0)
    assert [c.type for c in found] == [
        "Ready",
        "Reconciling",
        "CaughtUp",
        "DataLossRisk",
        "Reprocessing",
    ]
    assert condition_of(found, "DataLossRisk") is not None


def test_extras_keep_their_time_and_vanish_when_no_longer_given() -> None:
    caught = ExtraCondition("CaughtUp", "True", "LagBelowThreshold", "Lag is 0.")
    before = conditions(Observation(generation=1, extras=(caught,)), [], T0)
    kept = conditions(Observation(generation=1, extras=(caught,)), before, T1)
    assert condition_of(kept, "CaughtUp") == condition_of(before, "CaughtUp")
    assert condition_of(conditions(Observation(generation=1), kept, T1), "CaughtUp") is None


@pytest.mark.parametrize("kind", ["Ready", "Stalled"])
def test_an_extra_may_not_stand_for_a_standard_condition(kind: str) -> None:
    with pytest.raises(ValueError, match=kind):
        conditions(Observation(1, extras=(ExtraCondition(kind, "True", "Bad", "No."),)), [], T0)


def test_an_extra_may_not_be_given_twice() -> None:
    twice = (
        ExtraCondition("CaughtUp", "True", "A", "A."),
        ExtraCondition("CaughtUp", "False", "B", "B."),
    )
    with pytest.raises(ValueError, match="CaughtUp"):
        conditions(Observation(1, extras=twice), [], T0)


def test_a_reason_must_be_camel_case() -> None:
    with pytest.raises(ValidationError, match="reason"):
        conditions(Observation(1, problems=(Problem("not a reason", "Broken."),)), [], T0)


def test_conditions_are_written_as_kubernetes_writes_them() -> None:
    written = conditions(READY, [], T0)[0].to_yaml_dict()
    assert written == {
        "type": "Ready",
        "status": "True",
        "observedGeneration": 2,
        "lastTransitionTime": STAMP0,
        "reason": "Serving",
        "message": "Serving revision 1.",
    }


def test_times_are_utc_to_the_second() -> None:
    paris = timezone(timedelta(hours=1))
    assert rfc3339(datetime(2025, 3, 1, 13, 0, 0, 999, tzinfo=paris)) == STAMP0
    assert rfc3339(datetime(2025, 3, 1, 12, 0, 0)) == STAMP0


def test_ready_means_true_for_the_current_generation() -> None:
    found = conditions(READY, [], T0)
    assert is_ready(found, 2)
    assert not is_ready(found, 3)
    assert not is_ready(conditions(WORKING, [], T0), 2)
    assert not is_ready([], 2)
    assert not is_stalled(found)
    assert condition_of(found, "Stalled") is None
