"""A StreamJob writes exactly once and sends its malformed input to its dead letters, across kills.

The job (`tests/data/jobs/copy_exactly_once.py`) runs under `LocalRun`, as `distributary run`
drives it: its own file in a process of its own. Its `copies` query reads clicks with
`read_json` and writes them with `job.write` (exactly once); its `visits` query writes with
`delivery="AtLeastOnce"`. Clicks arrive in rounds, well-formed ones and ones that do not parse
(not JSON, a field of the wrong type, not an object), while the job's process is killed with
SIGKILL three times: once by itself right after its first committed transaction, before Spark
records the batch (`DISTRIBUTARY_CRASH_AFTER_TRANSACTIONS=1` in the environment it inherits), and
twice at seeded random moments while it works; the run restarts it each time. At the end the
copies, as committed readers see them, are exactly the well-formed clicks, each once; each
malformed click is in the job's dead-letter topic exactly once, with a view's headers naming the
job; the malformed visits (sent last, by the tracker) are there too; and the job's status counts
every dead letter the topic holds. The run made the dead-letter topic (the broker makes none by
itself), never compacted and with the default retention.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.spark_pipelines import TEST_SPARK_CONF, Read, read_topic

from distributary.backends.local_spark import LocalApplication
from distributary.graph import load_pipeline
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.records import produce
from distributary.local.broker import EmbeddedBroker
from distributary.local.run import LocalRun
from distributary.plan.applications.restarts import RestartPolicy
from distributary.runner.exactly_once import CRASH_AFTER
from distributary.schema import EncodedRecord

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "data" / "jobs" / "copy_exactly_once.py"
SCHEMA = "user STRING, n INT"
PIPELINE = f"""
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {{name: ejo-clicks}}
spec: {{topicName: ejo.clicks, partitions: 2, schema: "{SCHEMA}"}}
---
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {{name: ejo-visits}}
spec: {{topicName: ejo.visits, partitions: 1, schema: "{SCHEMA}"}}
---
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {{name: ejo-copies}}
spec: {{topicName: ejo.copies, partitions: 2, schema: "{SCHEMA}, tens INT"}}
---
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {{name: ejo-visit-copies}}
spec: {{topicName: ejo.visit-copies, partitions: 1, schema: "{SCHEMA}"}}
---
apiVersion: distributary.dev/v1alpha1
kind: StreamJob
metadata: {{name: ejo-job}}
spec:
  image: not-used-on-one-machine
  mainApplicationFile: copy_exactly_once.py
  inputs: [{{log: ejo-clicks}}, {{log: ejo-visits}}]
  outputs: [{{log: ejo-copies}}, {{log: ejo-visit-copies}}]
"""
KEY = "default/ejo-job"
GROUP = "distributary.default.ejo-job.r1"
DEAD_LETTERS = "distributary.default.ejo-job.dlq"
POLICY = RestartPolicy(
    first_delay=1, max_delay=2, stable_after=600, window=600, failures_before_stalled=100
)
SEED = 1313
ROUNDS = 6  # of clicks; a kill after the first (by itself), the third and the fifth
TIMEOUT = 420.0


def click(n: int) -> dict[str, Any]:
    return {"user": f"u{n % 5}", "n": n}


def malformed(n: int) -> bytes:
    """A click that does not parse, one of three kinds, unique by `n`."""
    kinds = (
        f"not json {n}",
        json.dumps({"user": f"bad{n}", "n": f"x{n}"}),  # n is no INT
        f'[{{"user": "arr{n}", "n": {n}}}]',  # an array, not an object
    )
    return kinds[n % 3].encode()


def round_of(number: int) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Round `number`'s well-formed clicks and malformed ones."""
    good = [click(n) for n in range(number * 40, number * 40 + 40)]
    return good, [malformed(number * 10 + k) for k in range(1 + number % 3)]


def append(broker: EmbeddedBroker, topic: str, values: list[bytes]) -> None:
    produce(broker.bootstrap_servers, topic, [EncodedRecord(None, v) for v in values])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, broker: EmbeddedBroker) -> Iterator[LocalRun]:
    folder = tmp_path_factory.mktemp("job-exactly-once")
    (folder / "pipeline.yaml").write_text(PIPELINE)
    shutil.copy(SCRIPT, folder / SCRIPT.name)
    pipeline = load_pipeline([folder / "pipeline.yaml"])
    assert pipeline.ok, pipeline.problems
    local = LocalRun(
        pipeline,
        [folder],
        folder / "state",
        bootstrap_servers=broker.bootstrap_servers,
        say=lambda _: None,
        spark_conf=TEST_SPARK_CONF,
        restart_policy=POLICY,
    )
    local.state_dir.mkdir(parents=True)
    try:
        yield local
    finally:
        local.stop()


def job_app(run: LocalRun) -> LocalApplication:
    return LocalApplication(run.state_dir / "jobs" / "default" / "ejo-job" / "job-r1")


def status(run: LocalRun) -> dict[str, Any]:
    assert run.revisions is not None
    return run.revisions.status("StreamJob", KEY)


def rounds_until(run: LocalRun, done: Any, what: str, timeout: float = TIMEOUT) -> None:
    """Reconcile rounds (which restart the job when it died) until `done()`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.reconcile()
        if done():
            return
        time.sleep(0.5)
    log = job_app(run).log_file.read_text(errors="replace")[-3000:]
    pytest.fail(f"{what}: not within {timeout:.0f}s; the job's log ends:\n{log}")


def committed_rows(broker: EmbeddedBroker) -> int:
    """Records the copies' committed position has read of the clicks (the per-query group)."""
    offsets = KafkaAdmin(broker.bootstrap_servers).committed(f"{GROUP}.copies")
    return sum(offsets.get("ejo.clicks", {}).values())


@pytest.fixture(scope="module")
def outcome(run: LocalRun, broker: EmbeddedBroker) -> dict[str, Any]:
    """Rounds of clicks with three kills, then everything read back once the job caught up."""
    rng = random.Random(SEED)
    sent: list[dict[str, Any]] = []
    bad: list[bytes] = []
    kills = 0
    os.environ[CRASH_AFTER] = "1"  # inherited by the job's first process only
    try:
        run.prepare(broker.bootstrap_servers)  # makes the topics, starts the job
        first = job_app(run).pid()
        assert first is not None
    finally:
        del os.environ[CRASH_AFTER]
    for number in range(ROUNDS):
        good, wrong = round_of(number)
        values = [json.dumps(c).encode() for c in good] + wrong
        rng.shuffle(values)
        append(broker, "ejo.clicks", values)
        sent += good
        bad += wrong
        if number == 0:  # the first transaction kills the first process
            rounds_until(
                run, lambda: job_app(run).pid() != first, "the job killing itself", timeout=240
            )
            kills += 1
        elif number in (2, 4):  # killed while it works on this round, at a random moment
            before = committed_rows(broker)
            rounds_until(run, lambda b=before: committed_rows(broker) > b, "a batch of the round")
            time.sleep(rng.uniform(0.0, 1.5))
            pid = job_app(run).pid()
            assert pid is not None
            os.killpg(pid, signal.SIGKILL)
            kills += 1
    visits = [json.dumps(click(n)).encode() for n in range(10)] + [b"visit?", b'{"n": "ten"}']
    append(broker, "ejo.visits", visits)
    admin = KafkaAdmin(broker.bootstrap_servers)
    since: list[float] = []

    def caught_up() -> bool:
        """Read everything, and counted every dead letter (or no longer counting)."""
        ends = admin.end_offsets(["ejo.clicks", "ejo.visits"])
        if admin.committed(GROUP) != ends:
            since.clear()
            return False
        since.append(since[0] if since else time.monotonic())
        counted = status(run).get("deadLetters") == len(bad) + 2
        return counted or time.monotonic() - since[0] > 30

    rounds_until(run, caught_up, "the job catching up")
    log = job_app(run).log_file.read_text(errors="replace")
    return {
        "clicks": sent,
        "bad": bad,
        "kills": kills,
        "log": log,
        "copies": read_topic(broker.bootstrap_servers, "ejo.copies"),
        "dead letters": read_topic(broker.bootstrap_servers, DEAD_LETTERS),
        "visit copies": read_topic(broker.bootstrap_servers, "ejo.visit-copies"),
        "status": status(run),
        "dead letter topic": admin.describe_topic(DEAD_LETTERS),
    }


def test_the_job_was_killed_three_times_once_right_after_its_first_transaction(
    outcome: dict[str, Any],
) -> None:
    assert outcome["kills"] == 3
    assert f"{CRASH_AFTER}=1: killing the runner after transaction 1" in outcome["log"]
    # The batch it had written was replayed by Spark after the restart, and skipped.
    assert "was written before the restart; skipped" in outcome["log"]


def test_the_copies_are_exactly_the_well_formed_clicks_each_once(outcome: dict[str, Any]) -> None:
    copies = Counter(json.dumps(r.json(), sort_keys=True) for r in outcome["copies"])
    expected = Counter(
        json.dumps({**c, "tens": c["n"] * 10}, sort_keys=True) for c in outcome["clicks"]
    )
    assert copies == expected


def test_the_run_made_the_jobs_dead_letter_topic_like_a_views(outcome: dict[str, Any]) -> None:
    topic = outcome["dead letter topic"]
    assert topic is not None
    assert topic.partitions == 2  # as the job's first output, ejo-copies
    assert topic.configs["cleanup.policy"] == "delete"
    assert topic.configs["retention.ms"] == str(7 * 24 * 3600 * 1000)


def test_each_malformed_click_is_a_dead_letter_exactly_once(outcome: dict[str, Any]) -> None:
    letters: list[Read] = [
        r for r in outcome["dead letters"] if r.headers["distributary.source.topic"] == "ejo.clicks"
    ]
    assert Counter(r.value for r in letters) == Counter(outcome["bad"])
    for letter in letters:
        assert letter.headers["distributary.job"] == KEY
        assert letter.headers["distributary.revision"] == "1"
        assert letter.headers["distributary.error"].startswith("ejo-clicks: ")
        assert "distributary.view" not in letter.headers
    errors = {r.value: r.headers["distributary.error"] for r in letters}
    assert errors[malformed(0)] == "ejo-clicks: not valid JSON"
    assert errors[malformed(10)] == "ejo-clicks: field n: not a valid INT"
    assert errors[malformed(11)] == "ejo-clicks: not a JSON object"


def test_the_at_least_once_querys_dead_letters_are_sent_by_the_tracker(
    outcome: dict[str, Any],
) -> None:
    letters = [
        r.value
        for r in outcome["dead letters"]
        if r.headers["distributary.source.topic"] == "ejo.visits"
    ]
    assert Counter(letters) == Counter([b"visit?", b'{"n": "ten"}'])
    copied = {json.dumps(r.json(), sort_keys=True) for r in outcome["visit copies"]}
    assert copied == {json.dumps(click(n), sort_keys=True) for n in range(10)}


def test_the_jobs_status_counts_every_dead_letter(outcome: dict[str, Any]) -> None:
    assert outcome["status"]["deadLetters"] == len(outcome["dead letters"])
    assert outcome["status"]["deadLetters"] == len(outcome["bad"]) + 2
