"""The runner on real Kafka and real Spark: what views write, dead letters, groups, a clean stop.

One runner process runs three views together, as `distributary run` does (a JVM and Spark start
cost most of a minute on a small machine): an append view (filter and projection), an upsert view
(count and sum per key) over the same log, and an upsert view over the append view's output. The
log gets good records in two rounds, the second after the views caught up with the first, so the
tables change across batches, and bad records (not JSON, a wrong type, JSON arrays) between good
ones. Then the runner is stopped with SIGTERM and every test asserts on what is left in Kafka.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from tests.integration.spark_pipelines import (
    PipelineRun,
    Read,
    as_multiset,
    committed_total,
    describe_groups,
    latest_table,
    produce,
    progress_of,
    read_topic,
    values,
)

from distributary.local.broker import EmbeddedBroker
from distributary.plan.revisions.positions import Offsets, offsets_json

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: rt-events}
spec:
  partitions: 3
  format: json
  schema: user_id STRING, action STRING, amount INT
  key: [user_id]
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: rt-big-buys}
spec:
  inputs: [{log: rt-events, alias: events}]
  sql: |
    SELECT user_id, amount * 2 AS doubled, upper(action) AS action
    FROM events WHERE action = 'buy' AND amount >= 10
  output: {mode: append}
  spark: {trigger: 500ms}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: rt-user-totals}
spec:
  inputs: [{log: rt-events, alias: events}]
  sql: SELECT user_id, count(*) AS events, sum(amount) AS total FROM events GROUP BY user_id
  output: {mode: upsert, key: [user_id]}
  spark: {trigger: 500ms}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: rt-buyer-totals}
spec:
  inputs: [{log: rt-big-buys, alias: buys}]
  sql: SELECT user_id, count(*) AS buys, max(doubled) AS biggest FROM buys GROUP BY user_id
  output: {mode: upsert, key: [user_id]}
  spark: {trigger: 500ms}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: rt-small-spenders}
spec:
  inputs: [{log: rt-events, alias: events}]
  sql: |
    SELECT user_id, sum(amount) AS total, sum(amount) > 150 AS __deleted
    FROM events GROUP BY user_id
  output: {mode: upsert, key: [user_id]}
  spark: {trigger: 500ms}
"""
EVENTS = "rt-events"
APPEND, UPSERT, CHAINED = "rt-big-buys", "rt-user-totals", "rt-buyer-totals"
DELETING = "rt-small-spenders"
VIEWS = (APPEND, UPSERT, CHAINED, DELETING)  # upstream first: the chained view waits on append
PARTITIONS = 3


@dataclass(frozen=True)
class Bad:
    """A record that does not match the log's schema, and what its dead letter must say."""

    partition: int
    key: bytes | None
    value: bytes
    error: str


BAD_FIRST_ROUND = (
    Bad(0, b'{"user_id":"u1"}', b"not json at all", "rt-events: not valid JSON"),
    Bad(1, b'{"user_id":"u2"}', b'{"user_id":"u2","action":"buy","amount":"lots"}', "amount"),
    Bad(2, None, b'[{"user_id":"u3","action":"buy","amount":30}]', "not a JSON object"),
)
BAD_SECOND_ROUND = (Bad(0, None, b"[1, 2, 3]", "rt-events: not a JSON object"),)


def event(i: int) -> dict[str, Any]:
    return {
        "user_id": f"u{i % 7}",
        "action": ("buy", "view", "buy", "click")[i % 4],
        "amount": (i * 13) % 40,
    }


Row = tuple[int, dict[str, Any] | Bad]  # (partition, a good record or a bad one)


def round_of(first: int, count: int, bad: tuple[Bad, ...]) -> list[Row]:
    """`count` good events, and in their middle each bad record between two good neighbours
    (`n<k>-before` and `n<k>-after`: buys big enough to reach the append view's output)."""
    rows: list[Row] = [(i % PARTITIONS, event(i)) for i in range(first, first + count // 2)]
    for k, item in enumerate(bad, start=first):
        rows.append((item.partition, {"user_id": f"n{k}-before", "action": "buy", "amount": 50}))
        rows.append((item.partition, item))
        rows.append((item.partition, {"user_id": f"n{k}-after", "action": "buy", "amount": 60}))
    rows += [(i % PARTITIONS, event(i)) for i in range(first + count // 2, first + count)]
    return rows


@dataclass
class Outcome:
    """What one runner run over the three views left behind."""

    run: PipelineRun
    good: list[dict[str, Any]]
    bad: list[tuple[Bad, tuple[int, int]]]  # each bad record and where it was appended
    exit_code: int | None
    outputs: dict[str, list[Read]]
    dead_letters: dict[str, list[Read]]
    progress: dict[str, dict[str, Any]]
    committed: dict[str, Offsets]
    input_ends: dict[str, Offsets]

    @property
    def bootstrap(self) -> str:
        return self.run.bootstrap


def append_round(run: PipelineRun, rows: list[Row]) -> list[tuple[Bad, tuple[int, int]]]:
    schema = run.schema(EVENTS)
    encoded = []
    for partition, item in rows:
        if isinstance(item, Bad):
            encoded.append((partition, item.key, item.value))
        else:
            record = schema.encode(item)
            encoded.append((partition, record.key, record.value))
    placed = produce(run.bootstrap, run.topics[EVENTS], encoded)
    return [(item, at) for (_, item), at in zip(rows, placed, strict=True) if isinstance(item, Bad)]


@pytest.fixture(scope="module")
def outcome(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    run = PipelineRun(tmp_path_factory.mktemp("runner"), PIPELINE, broker.bootstrap_servers)
    first, second = round_of(0, 90, BAD_FIRST_ROUND), round_of(90, 60, BAD_SECOND_ROUND)
    try:
        bad = append_round(run, first)
        run.start()
        run.wait_caught_up(VIEWS, timeout=240)
        bad += append_round(run, second)
        run.wait_caught_up(VIEWS, timeout=120)
        exit_code = run.stop()
        positions = run.positions(VIEWS)
        specs = {name: run.view(name) for name in VIEWS}
        yield Outcome(
            run=run,
            good=[item for _, item in first + second if not isinstance(item, Bad)],
            bad=bad,
            exit_code=exit_code,
            outputs={
                n: read_topic(run.bootstrap, s.output.topic) for n, s in specs.items() if s.output
            },
            dead_letters={
                n: read_topic(run.bootstrap, s.dead_letter_topic) for n, s in specs.items()
            },
            progress={n: progress_of(run.bootstrap, s) for n, s in specs.items()},
            committed={n: committed for n, (committed, _) in positions.items()},
            input_ends={n: ends for n, (_, ends) in positions.items()},
        )
    finally:
        run.stop()


def expected_big_buys(good: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"user_id": e["user_id"], "doubled": e["amount"] * 2, "action": "BUY"}
        for e in good
        if e["action"] == "buy" and e["amount"] >= 10
    ]


def key(user: str) -> str:
    """An upsert view's record key: the key columns as compact JSON."""
    return json.dumps({"user_id": user}, separators=(",", ":"))


# 1. append -------------------------------------------------------------------------------------


def test_an_append_view_writes_exactly_the_filtered_projected_records(outcome: Outcome) -> None:
    written = outcome.outputs[APPEND]
    expected = expected_big_buys(outcome.good)
    assert len(expected) > 30  # the data really exercises the filter, both ways
    assert len(expected) < len(outcome.good)
    assert values(written) == as_multiset(expected)
    assert all(r.key is None for r in written)  # an append view's records have no key


# 2. upsert -------------------------------------------------------------------------------------


def test_an_upsert_view_leaves_exactly_the_expected_table(outcome: Outcome) -> None:
    expected: dict[str, dict[str, Any]] = {}
    for e in outcome.good:
        row = expected.setdefault(key(e["user_id"]), {"user_id": e["user_id"], "events": 0})
        row["events"] += 1
        row["total"] = row.get("total", 0) + e["amount"]
    written = outcome.outputs[UPSERT]
    assert latest_table(written) == expected
    # Both rounds changed every user's row: the table was updated across batches, not written once.
    assert len(written) > len(expected)


def test_an_upsert_view_deletes_the_rows_it_marks_with_tombstones(outcome: Outcome) -> None:
    totals: dict[str, int] = {}
    for e in outcome.good:
        totals[e["user_id"]] = totals.get(e["user_id"], 0) + e["amount"]
    expected = {key(u): {"user_id": u, "total": t} for u, t in totals.items() if t <= 150}
    deleted = {key(u) for u, t in totals.items() if t > 150}
    assert expected, "the data must leave some rows"
    assert deleted, "the data must delete some rows"
    written = outcome.outputs[DELETING]
    assert latest_table(written) == expected  # the marker column itself is not written
    tombstoned = {r.key.decode() for r in written if r.key is not None and r.value is None}
    assert tombstoned == deleted


# 3. a view of a view ---------------------------------------------------------------------------


def test_a_view_reading_another_views_output_sees_all_of_it(outcome: Outcome) -> None:
    expected: dict[str, dict[str, Any]] = {}
    for buy in expected_big_buys(outcome.good):
        row = expected.setdefault(key(buy["user_id"]), {"user_id": buy["user_id"], "buys": 0})
        row["buys"] += 1
        row["biggest"] = max(row.get("biggest", 0), buy["doubled"])
    assert latest_table(outcome.outputs[CHAINED]) == expected
    chained = outcome.run.view(CHAINED)
    append = outcome.run.view(APPEND)
    assert append.output is not None
    assert [i.topic for i in chained.inputs] == [append.output.topic]


# 5. dead letters -------------------------------------------------------------------------------


@pytest.mark.parametrize("view", [APPEND, UPSERT])
def test_bad_records_reach_the_dead_letter_topic_once_with_the_error(
    outcome: Outcome, view: str
) -> None:
    letters = outcome.dead_letters[view]
    where = {
        (r.headers["distributary.source.partition"], r.headers["distributary.source.offset"]): r
        for r in letters
    }
    assert len(where) == len(letters) == len(outcome.bad)
    for bad, (partition, offset) in outcome.bad:
        letter = where.get((str(partition), str(offset)))
        assert letter is not None, f"no dead letter for {bad.value!r} at {partition}:{offset}"
        assert (letter.key, letter.value) == (bad.key, bad.value)
        assert bad.error in letter.headers["distributary.error"]
        assert letter.headers["distributary.source.topic"] == outcome.run.topics[EVENTS]
        assert letter.headers["distributary.view"] == f"default/{view}"
        assert letter.headers["distributary.revision"] == "1"


def test_a_wrong_type_names_the_field_and_its_type(outcome: Outcome) -> None:
    wrong = next(r for r in outcome.dead_letters[UPSERT] if b'"lots"' in (r.value or b""))
    assert wrong.headers["distributary.error"] == "rt-events: field amount: not a valid INT"


def test_dead_letters_are_counted_in_progress(outcome: Outcome) -> None:
    assert outcome.progress[APPEND]["deadLetters"] == len(outcome.bad)
    assert outcome.progress[UPSERT]["deadLetters"] == len(outcome.bad)
    assert outcome.progress[CHAINED]["deadLetters"] == 0
    assert outcome.dead_letters[CHAINED] == []
    assert outcome.progress[DELETING]["deadLetters"] == len(outcome.bad)


def test_good_records_around_bad_ones_are_processed(outcome: Outcome) -> None:
    written = {r.json()["user_id"] for r in outcome.outputs[APPEND]}
    neighbours = {e["user_id"] for e in outcome.good if e["user_id"].startswith("n")}
    assert len(neighbours) == 2 * len(outcome.bad)
    assert neighbours <= written


# 6. positions in the consumer group ------------------------------------------------------------


@pytest.mark.parametrize("view", VIEWS)
def test_the_group_has_committed_the_views_position(outcome: Outcome, view: str) -> None:
    spec = outcome.run.view(view)
    assert spec.consumer_group == f"distributary.default.{view}.r1"
    committed = outcome.committed[view]
    assert committed == outcome.input_ends[view]  # caught up: the inputs' end offsets
    assert committed_total(committed) > 0
    assert outcome.progress[view]["position"] == offsets_json(committed)
    assert outcome.progress[view]["lag"] == 0


def test_kafkas_own_consumer_group_command_shows_the_same_offsets(outcome: Outcome) -> None:
    groups = {outcome.run.view(v).consumer_group: v for v in VIEWS}
    described = describe_groups(outcome.bootstrap, list(groups))
    assert described == {group: outcome.committed[view] for group, view in groups.items()}


# 7. graceful stop ------------------------------------------------------------------------------


def test_sigterm_stops_the_runner_cleanly(outcome: Outcome) -> None:
    assert outcome.exit_code == 0, outcome.run.failure("the runner did not exit 0 on SIGTERM")
    assert {v: outcome.progress[v]["state"] for v in VIEWS} == dict.fromkeys(VIEWS, "Stopped")
    assert all(outcome.progress[v]["error"] is None for v in VIEWS)
