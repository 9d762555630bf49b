"""`distributary run` reprocesses a three-level cascade in order while records keep arriving.

`cc-big` filters the events, `cc-mid` filters `cc-big`'s output and `cc-per-user` counts and sums
`cc-mid`'s per user (upsert). A first run makes revision 1 of each. Then all three are edited as a
person adds a column end to end: `cc-big` gains `twice`, `cc-mid` passes it on and `cc-per-user`
sums it. A second run starts while a producer appends records at a steady rate throughout. Each
reader's definition changed at the edit, but its revision 2 must start only after the view it
reads serves revision 2 (until then it waits, reason `WaitingForUpstream`), and read that
revision's topic: a reader that started early would read a topic without `twice`. When the
producer stops and every level has read the rest, each revision 2 must hold exactly what its
query makes of every record appended. A reader follows `cc-big` throughout, as `distributary tail
--follow` does: it switches to revision 2's topic once, at the cutover, and sees it whole.
"""

from __future__ import annotations

import functools
import itertools
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.integration.spark_pipelines import (
    SteadyProducer,
    latest_table,
    read_topic,
    wait_for_run,
)
from tests.integration.test_local_run import ROOT, distributary, summary_of

from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker

LEVELS = ("cc-big", "cc-mid", "cc-per-user")
FIRST_RECORDS = 200


def pipeline(edited: bool) -> str:
    """The pipeline before the edit, or after it (a column `twice` from top to bottom)."""
    twice = ", amount * 2 AS twice" if edited else ""
    passed = ", twice" if edited else ""
    summed = "twice" if edited else "amount"
    return f"""
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {{name: cc-events}}
spec: {{partitions: 2, schema: "{SteadyProducer.SCHEMA}"}}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {{name: cc-big}}
spec:
  inputs: [{{log: cc-events, alias: e}}]
  sql: SELECT id, user, amount{twice} FROM e WHERE amount >= 5
  upgrade: {{cutoverWindow: 3s}}
  spark: {{trigger: 2s}}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {{name: cc-mid}}
spec:
  inputs: [{{log: cc-big, alias: big}}]
  sql: SELECT id, user, amount{passed} FROM big WHERE user <> 'u0'
  upgrade: {{cutoverWindow: 3s}}
  spark: {{trigger: 2s}}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {{name: cc-per-user}}
spec:
  inputs: [{{log: cc-mid, alias: mid}}]
  sql: SELECT user, count(*) AS n, sum({summed}) AS total FROM mid GROUP BY user
  output: {{mode: upsert, key: [user]}}
  upgrade: {{cutoverWindow: 3s}}
  spark: {{trigger: 2s}}
"""


def statuses(state: Path) -> dict[str, dict[str, Any]]:
    """Each level's status, as the run last recorded it (empty before it has)."""
    try:
        views = json.loads((state / "revisions.json").read_text())["views"]
    except (OSError, ValueError, KeyError):
        return {name: {} for name in LEVELS}
    return {name: dict((views.get(f"default/{name}") or {}).get("status") or {}) for name in LEVELS}


def rows(status: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {int(r["revision"]): r for r in status.get("revisions") or []}


def position(status: dict[str, Any]) -> int:
    """Records the serving revision has read, over its inputs' partitions."""
    return sum(
        int(o) for i in status.get("inputs") or [] for o in (i.get("position") or {}).values()
    )


def when(row: dict[str, Any], field_name: str) -> datetime:
    return datetime.fromisoformat(str(row[field_name]).replace("Z", "+00:00"))


@dataclass
class Watched:
    """What was seen of the levels while the second run went: each reader's revision 2 seen
    while the view it reads did not serve its own yet, and the reasons they waited for."""

    early: list[str] = field(default_factory=list)
    waited: dict[str, set[str]] = field(default_factory=lambda: {n: set() for n in LEVELS})
    last: dict[str, dict[str, Any]] = field(default_factory=dict)

    def look(self, state: Path) -> dict[str, dict[str, Any]]:
        seen = statuses(state)
        self.last = seen
        for upstream, reader in itertools.pairwise(LEVELS):
            early = f"{reader} has revision 2 while {upstream} serves no revision 2"
            if 2 in rows(seen[reader]) and seen[upstream].get("servingRevision") != 2:
                self.early += [early] if early not in self.early else []
        for name in LEVELS:
            for condition in seen[name].get("conditions") or []:
                if condition["type"] == "Reconciling" and condition["status"] == "True":
                    self.waited[name].add(condition["reason"])
        return seen

    def all_serve_revision_2(self, state: Path) -> bool:
        """Whether every level serves revision 2; fails once one has gone past it (a revision 3
        means a reader reprocessed before the level above it cut over, and again after)."""
        seen = self.look(state)
        past = {n: r for n, s in seen.items() for r in rows(s) if r > 2}
        if past:
            pytest.fail(f"revisions past 2 {past}; seen early: {self.early}; {self.where()}")
        return all(s.get("servingRevision") == 2 for s in seen.values())

    def has_read(self, state: Path, name: str, records: int) -> bool:
        """Whether `name`'s serving revision has read `records` records and lags by none."""
        status = self.look(state)[name]
        return position(status) == records and status.get("lag") == 0

    def where(self) -> str:
        """Where each level stood last, for failure messages."""
        return "; ".join(
            f"{name}: serving {s.get('servingRevision')}, rows "
            f"{ {r: row['phase'] for r, row in rows(s).items()} }, read {position(s)}, "
            f"lag {s.get('lag')}"
            for name, s in self.last.items()
        )


def wait_until(
    what: str,
    probe: Callable[[], bool],
    run: subprocess.Popen[bytes],
    said: Path,
    watched: Watched,
    timeout: float,
) -> None:
    wait_for_run(what, probe, run, said, timeout, where=watched.where)


def ends(bootstrap: str, topic: str) -> int:
    return sum(KafkaAdmin(bootstrap).end_offsets([topic])[topic].values())


@dataclass
class Cascade:
    records: list[dict[str, Any]]
    watched: Watched
    said: str
    runner_log: str
    folder: Path


@pytest.fixture(scope="module")
def cascade(tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker) -> Cascade:
    """Revision 1 of every level, the edit, and a run with records arriving until every level
    serves revision 2; then the producer stops and every level reads the rest."""
    folder = tmp_path_factory.mktemp("cascade")
    files = folder / "pipeline"
    files.mkdir()
    (files / "pipeline.yaml").write_text(pipeline(edited=False))
    state = folder / "state"
    bootstrap = broker.bootstrap_servers
    common = (str(files), "--state-dir", str(state), "--bootstrap-servers", bootstrap)
    first_records = [SteadyProducer.record(i) for i in range(FIRST_RECORDS)]
    data = folder / "first.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in first_records))
    summary_of(distributary("run", *common, "--until-caught-up", "--produce", f"cc-events={data}"))
    (files / "pipeline.yaml").write_text(pipeline(edited=True))
    producer = SteadyProducer(bootstrap, "cc-events", first=FIRST_RECORDS).start()
    said = folder / "run.stderr"
    watched = Watched()
    # A reader follows the first level's output from here, as `distributary tail --follow` does.
    following = ("tail", "cc-big", "-f", "-n", "0", *common[1:])
    with open(folder / "tail.stdout", "wb") as out, open(folder / "tail.stderr", "wb") as err:
        follower = subprocess.Popen(
            [sys.executable, "-m", "distributary.cli", *following],
            cwd=ROOT,
            stdout=out,
            stderr=err,
        )
    with open(said, "wb") as err:
        run = subprocess.Popen(
            [sys.executable, "-m", "distributary.cli", "run", *common, "--cores", "2"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        try:
            wait_until(
                "every level serves revision 2 while records arrive",
                functools.partial(watched.all_serve_revision_2, state),
                run,
                said,
                watched,
                timeout=480,
            )
            time.sleep(2)  # records still arrive after the last cutover
        finally:
            records = first_records + producer.stop()
        # In order: a level's output is whole once it has read all of its input.
        total = len(records)
        for name, topic in zip(LEVELS, ("cc-events", "cc-big.r2", "cc-mid.r2"), strict=True):
            expected = total if name == "cc-big" else ends(bootstrap, topic)
            wait_until(
                f"{name} has read all {expected} records of {topic}",
                functools.partial(watched.has_read, state, name, expected),
                run,
                said,
                watched,
                timeout=240,
            )
    finally:
        follower.send_signal(signal.SIGINT)
        try:
            follower.wait(60)
        finally:
            run.send_signal(signal.SIGTERM)
            run.wait(120)
    runner_log = (state / "runner.log").read_text(errors="replace")
    return Cascade(records, watched, said.read_text(), runner_log, folder)


def test_every_level_serves_revision_2_reading_the_new_topic_of_the_level_above(
    cascade: Cascade,
) -> None:
    last = cascade.watched.last
    for name in LEVELS:
        assert {r: row["phase"] for r, row in rows(last[name]).items()} == {
            1: "Retiring",
            2: "Serving",
        }, name
    assert [i["topic"] for i in rows(last["cc-mid"])[2]["inputs"]] == ["cc-big.r2"]
    assert [i["topic"] for i in rows(last["cc-per-user"])[2]["inputs"]] == ["cc-mid.r2"]


def test_each_reader_starts_its_revision_2_only_after_the_level_above_serves_its_own(
    cascade: Cascade,
) -> None:
    watched = cascade.watched
    assert watched.early == []
    assert "WaitingForUpstream" in watched.waited["cc-mid"], watched.waited
    assert "WaitingForUpstream" in watched.waited["cc-per-user"], watched.waited
    last = watched.last
    for upstream, reader in itertools.pairwise(LEVELS):
        served = when(rows(last[upstream])[2], "servingSince")
        assert when(rows(last[reader])[2], "startedAt") >= served, (upstream, reader)
    # The run's own lines say the same, in this order.
    lines = cascade.said.splitlines()
    order = [
        "view cc-big: starting revision 2",
        "view cc-big: revision 2 caught up and serves now",
        "view cc-mid: starting revision 2",
        "view cc-mid: revision 2 caught up and serves now",
        "view cc-per-user: starting revision 2",
        "view cc-per-user: revision 2 caught up and serves now",
    ]
    found = [[i for i, line in enumerate(lines) if line == text] for text in order]
    assert all(len(f) == 1 for f in found), dict(zip(order, found, strict=True))
    assert [f[0] for f in found] == sorted(f[0] for f in found), cascade.said[-3000:]


def test_each_revision_2_holds_exactly_what_its_query_makes_of_every_record(
    cascade: Cascade, broker: EmbeddedBroker
) -> None:
    bootstrap = broker.bootstrap_servers
    big = [{**r, "twice": r["amount"] * 2} for r in cascade.records if r["amount"] >= 5]
    mid = [r for r in big if r["user"] != "u0"]
    for topic, expected in (("cc-big.r2", big), ("cc-mid.r2", mid)):
        written = [json.loads(r.value) for r in read_topic(bootstrap, topic) if r.value]
        assert Counter(tuple(sorted(w.items())) for w in written) == Counter(
            tuple(sorted(e.items())) for e in expected
        ), topic
    table = latest_table(read_topic(bootstrap, "cc-per-user.r2"))
    by_user = {row["user"]: row for row in table.values()}
    assert len(by_user) == len(table)  # one key per user
    users = sorted({r["user"] for r in mid})
    assert by_user == {
        u: {
            "user": u,
            "n": sum(1 for r in mid if r["user"] == u),
            "total": sum(r["twice"] for r in mid if r["user"] == u),
        }
        for u in users
    }


def test_the_running_spark_took_each_revision_without_starting_again(cascade: Cascade) -> None:
    # One Spark process for the whole second run: each cutover stopped the old revision and
    # started the reader's new one in it, while the other views' queries ran on.
    assert cascade.said.count("Starting Spark") == 1, cascade.said[-3000:]
    for upstream, reader in itertools.pairwise(LEVELS):
        assert f"Spark (running): stopping {upstream} r1" in cascade.said
        assert f"Spark (running): starting {reader} r2" in cascade.said
    # cc-big's revision 2 started once: the later changes did not touch its query.
    assert cascade.runner_log.count("default/cc-big r2: started") == 1


def tailed(line: str) -> tuple[int, int, str]:
    """(partition, offset, value) of a line `distributary tail` printed."""
    place, _key, value = line.split(" ", 2)
    partition, offset = place.split("/")
    return int(partition), int(offset), value


def test_a_follower_switches_at_the_cutover_and_sees_revision_2_whole(
    cascade: Cascade, broker: EmbeddedBroker
) -> None:
    said = (cascade.folder / "tail.stderr").read_text()
    assert said.count("a new revision serves from topic cc-big.r2 (was cc-big.r1)") == 1, said
    lines = [tailed(line) for line in (cascade.folder / "tail.stdout").read_text().splitlines()]

    def written(topic: str) -> list[tuple[int, int, str]]:
        records = read_topic(broker.bootstrap_servers, topic)
        return [(r.partition, r.offset, r.value.decode()) for r in records if r.value]

    revision_2 = written("cc-big.r2")
    before, after = lines[: len(lines) - len(revision_2)], lines[len(lines) - len(revision_2) :]
    # After the switch: revision 2 whole, from its first record, each once.
    assert Counter(after) == Counter(revision_2)
    # Before it: records revision 1 wrote while it served, each once, none of revision 2's.
    assert before, "the follower saw nothing of revision 1 before the cutover"
    assert set(before) <= set(written("cc-big.r1"))
    assert len(set(before)) == len(before)
