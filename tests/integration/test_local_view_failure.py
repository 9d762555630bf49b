"""One view's failure in `distributary run` does not stop the others.

Two views read one log in the one runner process: `upper` copies every record, `numbers` casts a
text column to a number, which Spark refuses at run time for the records that are not numbers
(ANSI casts). `numbers` fails (after the runner's own restarts) and is reported, while `upper`
reads everything and its output is exact; `--until-caught-up` then ends with the summary and
exit status 1 naming the failed view.

A run whose Spark cannot start at all (its JVM refuses an option of the run's environment) fails
at every start: the view is Stalled (`ApplicationFailing`) and retried only at the longest
back-off, which `--until-caught-up` does not wait for: it ends, saying why, with exit status 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.integration.spark_pipelines import read_topic
from tests.integration.test_local_run import ROOT, distributary

from distributary.local.broker import EmbeddedBroker

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: lf-events}
spec: {partitions: 2, schema: "who STRING, amount STRING"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: lf-upper}
spec:
  inputs: [{log: lf-events, alias: e}]
  sql: SELECT upper(who) AS who, amount FROM e
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: lf-numbers}
spec:
  inputs: [{log: lf-events, alias: e}]
  sql: SELECT who, CAST(amount AS INT) AS amount FROM e
"""
EVENTS = [{"who": f"u{i % 4}", "amount": str(i) if i % 5 else f"x{i}"} for i in range(40)]


@pytest.fixture(scope="module")
def result(
    tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker
) -> subprocess.CompletedProcess[str]:
    folder = tmp_path_factory.mktemp("failure")
    (folder / "pipeline").mkdir()
    (folder / "pipeline" / "pipeline.yaml").write_text(PIPELINE)
    data = folder / "events.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    return distributary(
        "run",
        str(folder / "pipeline"),
        "--state-dir",
        str(folder / "state"),
        "--bootstrap-servers",
        broker.bootstrap_servers,
        "--until-caught-up",
        "--cores",
        "2",
        "--produce",
        f"lf-events={data}",
    )


def summary(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


def test_the_failed_view_is_named_and_the_run_exits_1(
    result: subprocess.CompletedProcess[str],
) -> None:
    assert result.returncode == 1, result.stderr[-3000:]
    assert "view lf-numbers failed:" in result.stderr
    assert "lf-numbers" in result.stderr.strip().splitlines()[-1]
    assert summary(result)["views"]["lf-numbers"]["state"] == "Failed"


def test_the_other_view_reads_everything_and_its_output_is_exact(
    result: subprocess.CompletedProcess[str], broker: EmbeddedBroker
) -> None:
    view = summary(result)["views"]["lf-upper"]
    assert (view["state"], view["lag"]) == ("Running", 0)
    written = [
        json.loads(r.value or b"null") for r in read_topic(broker.bootstrap_servers, "lf-upper.r1")
    ]
    expected = Counter((e["who"].upper(), e["amount"]) for e in EVENTS)
    assert Counter((w["who"], w["amount"]) for w in written) == expected


STUCK = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: lf-stuck-events}
spec: {partitions: 1, schema: "who STRING"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: lf-stuck}
spec:
  inputs: [{log: lf-stuck-events, alias: e}]
  sql: SELECT who FROM e
"""


def test_a_run_whose_spark_cannot_start_ends_saying_the_view_keeps_failing(
    tmp_path: Path, broker: EmbeddedBroker
) -> None:
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "pipeline.yaml").write_text(STUCK)
    command = [
        sys.executable, "-m", "distributary.cli", "run", str(tmp_path / "pipeline"),
        "--state-dir", str(tmp_path / "state"), "--bootstrap-servers", broker.bootstrap_servers,
        "--until-caught-up", "--restart-delay", "1", "--max-restart-delay", "2",
        "--failures-before-stalled", "2",
    ]  # fmt: skip
    refused = {**os.environ, "JAVA_TOOL_OPTIONS": "-XX:+NoSuchOption"}  # Spark's JVM: not started
    started = time.monotonic()
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=240, env=refused, cwd=ROOT
        )
    except subprocess.TimeoutExpired as waited:
        said = waited.stderr.decode() if isinstance(waited.stderr, bytes) else waited.stderr
        raise AssertionError(f"still waiting after 240 s:\n{(said or '')[-3000:]}") from None
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: view lf-stuck keeps failing: the Spark application failed 2 times"
    )
    assert "runner.log" in last  # where the whole story is
    view = summary(result)["views"]["lf-stuck"]
    assert view["keepsFailing"].startswith("the Spark application failed"), view
    assert time.monotonic() - started < 120
