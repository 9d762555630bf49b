"""The sensors example as a person runs it: `distributary run --until-caught-up` with its demo
data, then its two windowed views' outputs, which must hold exactly the windows the watermark
has passed, each once, with what the readings in it imply."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

import pytest
from tests.integration.spark_pipelines import read_topic
from tests.integration.test_local_run import ROOT, distributary, summary_of

from distributary.local.broker import EmbeddedBroker

EXAMPLE = ROOT / "examples" / "sensors"
DATA = EXAMPLE / "data" / "readings.jsonl"
DELAY = timedelta(seconds=30)
MINUTE = timedelta(minutes=1)


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def readings() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def floor_minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


@pytest.fixture(scope="module")
def outputs(
    tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker
) -> dict[str, list[dict[str, Any]]]:
    state = tmp_path_factory.mktemp("sensors") / "state"
    bootstrap = broker.bootstrap_servers
    args = ("--state-dir", str(state), "--bootstrap-servers", bootstrap, "--cores", "2")
    summary = summary_of(
        distributary(
            "run", str(EXAMPLE), *args, "--until-caught-up", "--produce", f"readings={DATA}"
        )
    )
    assert summary["logs"]["readings"]["records"] == len(readings())
    return {
        name: [json.loads(r.value) for r in read_topic(bootstrap, f"{name}.r1") if r.value]
        for name in ("site-minutes", "sensor-trends")
    }


def test_site_minutes_holds_every_closed_minute_once_with_its_readings(
    outputs: dict[str, list[dict[str, Any]]],
) -> None:
    records = readings()
    watermark = max(instant(r["ts"]) for r in records) - DELAY
    minutes: dict[tuple[datetime, str], list[float]] = defaultdict(list)
    for record in records:
        minutes[(floor_minute(instant(record["ts"])), record["site"])].append(record["temperature"])
    closed = {key: temps for key, temps in minutes.items() if key[0] + MINUTE <= watermark}
    rows = outputs["site-minutes"]
    written = [(instant(r["minute_start"]), r["site"]) for r in rows]
    assert sorted(written) == sorted(closed)  # each closed minute once, no open one
    for row in rows:
        temps = closed[(instant(row["minute_start"]), row["site"])]
        assert instant(row["minute_end"]) == instant(row["minute_start"]) + MINUTE
        assert row["readings"] == len(temps)
        assert row["max_temperature"] == max(temps)
        assert row["avg_temperature"] == pytest.approx(sum(temps) / len(temps), abs=0.006)


def test_sensor_trends_holds_every_closed_five_minute_window_once(
    outputs: dict[str, list[dict[str, Any]]],
) -> None:
    records = readings()
    watermark = max(instant(r["ts"]) for r in records) - DELAY
    counts: dict[tuple[datetime, str], int] = defaultdict(int)
    for record in records:
        minute = floor_minute(instant(record["ts"]))
        for back in range(5):  # the five windows, sliding by a minute, that cover it
            counts[(minute - back * MINUTE, record["sensor_id"])] += 1
    closed = {key: n for key, n in counts.items() if key[0] + 5 * MINUTE <= watermark}
    written = {
        (instant(r["window_start"]), r["sensor_id"]): r["readings"]
        for r in outputs["sensor-trends"]
    }
    assert len(outputs["sensor-trends"]) == len(written)  # no window written twice
    assert written == closed
