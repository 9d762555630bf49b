"""`distributary run` counts records per tumbling event-time window, in append mode.

The input declares a watermark (`ts`, 5 s). A producer appends records at a steady rate
throughout, with event times the test chooses: ten records per event-time second, every seventh
record three seconds late (within the delay), so Spark must wait for the watermark rather than
for the records' order. Once the window from `BASE` is written, every fiftieth record is made to
belong to it, closed by then: the watermark must drop it, and that window must not be written
again. (Record 0, three seconds late, makes a window before `BASE`: it closes first, while the
window from `BASE` may still be open and rightly count what arrives for it.)

What the output must hold is computed from the records appended: exactly one row per (window,
user) for every window the final watermark (the latest event time minus 5 s) has passed, with
the count of its records, and nothing else. Rows written while records still arrived must
already be final.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.integration.spark_pipelines import SteadyProducer, read_topic, wait_for_run
from tests.integration.test_local_run import ROOT

from distributary.kafka.admin import KafkaAdmin
from distributary.local.broker import EmbeddedBroker

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: et-events}
spec: {partitions: 2, schema: "id INT, user STRING, amount INT, ts TIMESTAMP"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: et-per-window}
spec:
  inputs:
    - log: et-events
      alias: e
      watermark: {column: ts, delay: 5s}
  sql: |
    SELECT window.start AS window_start, window.end AS window_end, user, count(*) AS n
    FROM e
    GROUP BY window(ts, '10 seconds'), user
  output: {mode: append}
  spark: {trigger: 500ms}
"""
OUTPUT_TOPIC = "et-per-window.r1"
BASE = datetime(2026, 1, 1, tzinfo=UTC)
STEP = timedelta(milliseconds=100)  # ten records per event-time second
LATE = timedelta(seconds=3)  # every seventh record, within the 5 s delay
DELAY = timedelta(seconds=5)
WINDOW = timedelta(seconds=10)

Row = tuple[datetime, datetime, str, int]


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class EventTimeProducer(SteadyProducer):
    """The steady producer's records with an event time `ts`; after `drop_late()`, every
    fiftieth record belongs to the first window, which the watermark has passed by then."""

    SCHEMA = "id INT, user STRING, amount INT, ts TIMESTAMP"

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(bootstrap, topic)
        self.too_late: set[int] = set()
        self.late_from: int | None = None

    def drop_late(self) -> None:
        self.late_from = self.next + 4  # records not yet generated

    def record(self, i: int) -> dict[str, Any]:  # type: ignore[override]
        at = BASE + i * STEP - (LATE if i % 7 == 0 else timedelta())
        if self.late_from is not None and i >= self.late_from and i % 50 == 0:
            at = BASE + timedelta(seconds=1)
            self.too_late.add(i)
        return {**SteadyProducer.record(i), "ts": at.isoformat(timespec="milliseconds")}


def written(bootstrap: str) -> Counter[Row]:
    """The view's output rows as a multiset."""
    if KafkaAdmin(bootstrap).describe_topic(OUTPUT_TOPIC) is None:
        return Counter()
    rows = [json.loads(r.value) for r in read_topic(bootstrap, OUTPUT_TOPIC) if r.value]
    return Counter(
        (instant(r["window_start"]), instant(r["window_end"]), r["user"], r["n"]) for r in rows
    )


def expected(records: list[dict[str, Any]], too_late: set[int]) -> Counter[Row]:
    """One row per (window, user) with its count, for every window the watermark has passed."""
    counted = [r for r in records if r["id"] not in too_late]
    watermark = max(instant(r["ts"]) for r in counted) - DELAY
    counts: Counter[tuple[datetime, str]] = Counter()
    for record in counted:
        at = instant(record["ts"])
        counts[(BASE + ((at - BASE) // WINDOW) * WINDOW, record["user"])] += 1
    return Counter(
        {
            (start, start + WINDOW, user, n): 1
            for (start, user), n in counts.items()
            if start + WINDOW <= watermark
        }
    )


def difference(want: Counter[Row], got: Counter[Row]) -> str:
    """What the output lacks and what it has beyond what the records imply."""
    missing, extra = sorted(want - got), sorted(got - want)
    show = lambda rows: ", ".join(f"{r[0]:%H:%M:%S} {r[2]} n={r[3]}" for r in rows[:6])  # noqa: E731
    return f"missing {len(missing)}: {show(missing)}; extra {len(extra)}: {show(extra)}"


def wait_until(
    what: str,
    probe: Any,
    run: subprocess.Popen[bytes],
    said: Path,
    timeout: float,
    where: Any = lambda: "",
) -> None:
    def failed() -> str | None:
        # The run restarts a failed view, but that it failed at all is the answer.
        lines = [line for line in said.read_text().splitlines() if "et-per-window failed" in line]
        return f"the view failed ({lines[0]})" if lines else None

    wait_for_run(what, probe, run, said, timeout, where=where, give_up=failed)


@pytest.fixture(scope="module")
def windows(
    tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker
) -> tuple[Counter[Row], Counter[Row], Counter[Row], set[int]]:
    """What the view wrote while records arrived, what it wrote in the end, what the records
    appended imply, and the ids of the records the watermark had to drop."""
    bootstrap = broker.bootstrap_servers
    folder = tmp_path_factory.mktemp("event-time")
    (folder / "pipeline").mkdir()
    (folder / "pipeline" / "pipeline.yaml").write_text(PIPELINE)
    said = folder / "run.stderr"
    command = [sys.executable, "-m", "distributary.cli", "run", str(folder / "pipeline")]
    command += ["--state-dir", str(folder / "state"), "--bootstrap-servers", bootstrap]
    with open(said, "wb") as err:
        run = subprocess.Popen(
            [*command, "--cores", "2"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err
        )
    producer: EventTimeProducer | None = None
    try:
        admin = KafkaAdmin(bootstrap)
        wait_until(
            "the input topic exists",
            lambda: admin.describe_topic("et-events") is not None,
            run,
            said,
            timeout=120,
        )
        producer = EventTimeProducer(bootstrap, "et-events").start()
        wait_until(
            "the window from BASE is written",
            lambda: any(row[0] == BASE for row in written(bootstrap)),
            run,
            said,
            180,
        )
        producer.drop_late()
        time.sleep(10)  # windows keep closing while records arrive
        while_arriving = written(bootstrap)
        records = producer.stop()
        want = expected(records, producer.too_late)
        wait_until(
            "every closed window is written",
            lambda: written(bootstrap) == want,
            run,
            said,
            120,
            where=lambda: difference(want, written(bootstrap)),
        )
        time.sleep(3)  # a window written twice would show up now
        final = written(bootstrap)
    finally:
        if producer is not None:
            producer.stop()
        run.send_signal(signal.SIGTERM)
        run.wait(120)
    return while_arriving, final, want, producer.too_late


Windows = tuple[Counter[Row], Counter[Row], Counter[Row], set[int]]


def test_every_closed_window_is_written_once_with_its_exact_count(windows: Windows) -> None:
    _, final, want, _ = windows
    assert len(want) >= 2 * 5  # windows of five users each, at least two closed
    missing, extra = sorted(want - final)[:5], sorted(final - want)[:5]
    assert final == want, f"missing {missing}, extra {extra}"


def test_rows_written_while_records_arrive_are_already_final(windows: Windows) -> None:
    while_arriving, _, want, _ = windows
    assert while_arriving
    assert not while_arriving - want, sorted(while_arriving - want)[:5]


def test_records_behind_the_watermark_are_dropped_not_written_again(windows: Windows) -> None:
    _, final, _, too_late = windows
    assert too_late  # the producer did append records for the first window after it closed
    first = [row for row in final if row[0] == BASE]
    assert len(first) == 5
    assert all(final[row] == 1 for row in first)
