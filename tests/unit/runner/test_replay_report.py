"""Spark 4.1.1's failed report of a batch replayed after a restart (SPARK-55271) restarts the
query without counting as one of its restarts, once per batch reported: a crash costs one
restart, not two, and a failure that keeps coming still ends the revision."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.plan.applications.spark_state import CHECKPOINT_LOST
from distributary.runner import main
from distributary.runner.main import MAX_RESTARTS, Revision, replay_report, unreadable_state

NPE = (
    'Cannot invoke "scala.collection.IterableOps.map(scala.Function1)" because the return value '
    'of "scala.Option.get()" is null'
)


class QueryError(Exception):
    def __init__(self, message: str, trace: str = "") -> None:
        super().__init__(message)
        self.trace = trace

    def getStackTrace(self) -> str:  # noqa: N802 (pyspark's name)
        return self.trace


class Query:
    def __init__(self, failure: BaseException | None) -> None:
        self.failure = failure

    def exception(self) -> BaseException | None:
        return self.failure


def test_the_report_failure_is_told_from_other_failures() -> None:
    trace = "at org.apache.spark.sql.kafka010.KafkaMicroBatchStream$.metrics(...)"
    assert replay_report(QueryError(NPE, trace))
    assert replay_report(QueryError(NPE))  # the message alone names it
    assert not replay_report(QueryError("Python worker failed to connect back."))
    assert not replay_report(QueryError('the return value of "scala.Option.get()" is null'))


def revision(monkeypatch: pytest.MonkeyPatch, failures: list[BaseException]) -> Revision:
    """A revision whose query fails with `failures`, one per start."""
    monkeypatch.setattr(main.time, "sleep", lambda _s: None)
    rev = Revision(spec=Any, session=Any, admin=Any, publisher=None)  # type: ignore[arg-type]
    rev.state = "Running"
    queue = list(failures)

    def start() -> None:
        rev.query = Query(queue.pop(0) if queue else None)  # type: ignore[assignment]

    monkeypatch.setattr(rev, "start", start)
    monkeypatch.setattr(rev, "publish", lambda batch=None: None)
    monkeypatch.setattr(Revision, "label", "ns/view r1")
    rev.query = Query(failures[0])  # type: ignore[assignment]
    queue.pop(0)
    return rev


def test_a_crash_then_the_replays_report_costs_one_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    rev = revision(
        monkeypatch, [QueryError("Python worker failed to connect back."), QueryError(NPE)]
    )
    rev.finish()  # the crash: restart 1, the query replays its batch ...
    rev.finish()  # ... and Spark fails to report it: resumed, not counted
    assert (rev.restarts, rev.replay_forgiven, rev.state) == (1, True, "Running")


def test_the_report_failing_again_before_any_batch_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    rev = revision(monkeypatch, [QueryError(NPE)] * (MAX_RESTARTS + 2))
    for _ in range(MAX_RESTARTS + 2):
        rev.finish()
    assert rev.restarts == MAX_RESTARTS
    assert rev.state == "Failed"


UNREADABLE = (
    "[STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA] Streaming stateful operator name "
    "does not match with the operator in state metadata. This likely to happen when user "
    "adds/removes/changes stateful operator of existing streaming query."
)


def test_a_checkpoint_another_version_wrote_is_rebuilt_not_restarted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark refuses, at every start, a checkpoint whose state another version of the view's
    operators wrote: the revision reports CheckpointLost at once (the view rebuilds it as a new
    revision), without a restart."""
    rev = revision(monkeypatch, [QueryError(UNREADABLE), QueryError(UNREADABLE)])
    rev.finish()
    assert rev.state == CHECKPOINT_LOST
    assert rev.restarts == 0
    assert "rebuilds it as a new revision" in str(rev.error)
    assert "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA" in str(rev.error)
    assert unreadable_state(QueryError("Python worker failed to connect back.")) is None
