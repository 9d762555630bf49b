"""What a Sink's reconcile reads of its consumer group: its position, its lag, and a refusal its
process left in the commit metadata (an in-memory stand-in for Kafka's Admin API)."""

from __future__ import annotations

from typing import Any

from distributary.plan.sinks.sink_plan import SinkRun
from distributary.reconcile.sink import Held, held_by_group

RUN = SinkRun(name="shop/t", group="g", bootstrap_servers="k:9092", topic="t.r2",
              columns=[("id", "INT")], host="db", port=5432)  # fmt: skip


class _Admin:
    def __init__(self, committed: dict[str, Any], lag: dict[str, Any], said: list[str]) -> None:
        self._committed, self._lag, self.said = committed, lag, said
        self.asked: list[tuple[str, str | None]] = []

    def committed(self, group: str) -> dict[str, Any]:
        return self._committed

    def lag(self, group: str, topics: list[str]) -> dict[str, Any]:
        return self._lag

    def committed_metadata(self, group: str, topic: str | None = None) -> list[str]:
        self.asked.append((group, topic))
        return self.said


def test_the_position_and_lag_of_the_sinks_topic() -> None:
    admin = _Admin({"t.r2": {0: 4, 1: 6}, "t.r1": {0: 9}}, {"t.r2": {0: 1, 1: 0}}, ["", ""])
    assert held_by_group(admin, RUN) == Held({0: 4, 1: 6}, 1, None)  # type: ignore[arg-type]
    assert admin.asked == [("g", "t.r2")]  # the metadata of the Sink's topic only


def test_no_position_yet_is_no_lag_known() -> None:
    assert held_by_group(_Admin({}, {"t.r2": {0: 3}}, []), RUN) == Held()  # type: ignore[arg-type]


def test_a_refusal_left_in_the_metadata_is_read_back() -> None:
    said = ["refused: table public.t has column id of type text, not integer", ""]
    admin = _Admin({"t.r2": {0: 0}}, {"t.r2": {0: 5}}, said)
    held = held_by_group(admin, RUN)  # type: ignore[arg-type]
    assert held.refused == "table public.t has column id of type text, not integer"


def test_kafka_not_answering_is_nothing_known() -> None:
    class Down(_Admin):
        def committed(self, group: str) -> dict[str, Any]:
            raise RuntimeError("Kafka did not answer")

    assert held_by_group(Down({}, {}, []), RUN) == Held()  # type: ignore[arg-type]
