"""`distributary produce` and `tail` on a real broker: records go in checked and come back in order.

Topics are made here with the Admin API (as `distributary run` would) under unique names, and the
commands find them through a run-state file, as they do beside a running `distributary run`.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import IO

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from distributary.cli import main
from distributary.graph import Ref, load_pipeline
from distributary.kafka.cluster import client_config
from distributary.kafka.records import TopicReader, produce
from distributary.local.broker import EmbeddedBroker
from distributary.local.state import RunState, ServedLog, write_run_state
from distributary.schema import EncodedRecord, RecordSchema, parse_record

ROOT = Path(__file__).resolve().parents[2]
CLICKSTREAM = ROOT / "examples" / "clickstream"
DEMO = CLICKSTREAM / "data" / "page-views.jsonl"
PAGE_VIEWS = RecordSchema.of_log(load_pipeline([CLICKSTREAM]).logs[Ref.log("page-views")])


def create_topic(bootstrap: str, partitions: int = 6) -> str:
    topic = f"test-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(client_config(bootstrap))
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)
    return topic


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def parse_line(line: str) -> tuple[int, int, str, str]:
    where, key, value = line.split(" ", 2)
    partition, offset = where.split("/")
    return int(partition), int(offset), key, value


@pytest.fixture
def state_dir(tmp_path: Path, broker: EmbeddedBroker) -> Path:
    """A run state naming the broker and fresh topics for page-views and views-per-user."""
    state = tmp_path / "state"
    logs = {
        "page-views": ServedLog(create_topic(broker.bootstrap_servers)),
        "views-per-user": ServedLog(create_topic(broker.bootstrap_servers, 2) + ".r1"),
    }
    write_run_state(
        state, RunState(broker.bootstrap_servers, (str(CLICKSTREAM),), os.getpid(), logs)
    )
    return state


def topic_of(state_dir: Path, log: str) -> str:
    return json.loads((state_dir / "run.json").read_text())["logs"][log]["topic"]


def test_the_demo_file_goes_in_whole_and_tail_reads_it_back(state_dir: Path) -> None:
    code, out, err = run(
        "produce", "page-views", "--file", str(DEMO), "--state-dir", str(state_dir)
    )
    assert code == 0, err
    topic = topic_of(state_dir, "page-views")
    assert out.startswith(f"sent 308 record(s) to page-views (topic {topic}) in ")
    assert out.rstrip().endswith("s")

    code, out, err = run("tail", "page-views", "-n", "1000", "--state-dir", str(state_dir))
    assert code == 0, err
    lines = [parse_line(line) for line in out.splitlines()]
    assert len(lines) == 308
    sent = [PAGE_VIEWS.encode(parse_record(line)) for line in DEMO.read_text().splitlines()]
    assert sorted((k, v) for _, _, k, v in lines) == sorted(
        (r.key.decode() if r.key else "-", r.value.decode()) for r in sent
    )
    partitions: dict[str, set[int]] = {}
    for partition, _, key, _ in lines:
        partitions.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in partitions.values())  # a key stays on one partition
    assert len({p for p, _, _, _ in lines}) > 1  # and the keys spread over partitions


def test_generated_records_are_valid_and_tail_shows_the_last_in_time_order(
    tmp_path: Path, broker: EmbeddedBroker
) -> None:
    topic = create_topic(broker.bootstrap_servers, 3)
    pipeline = tmp_path / "log.yaml"
    pipeline.write_text(
        "apiVersion: distributary.dev/v1alpha1\nkind: Log\nmetadata: {name: clicks}\n"
        f"spec: {{topicName: {topic}, schema: 'user_id STRING, ts TIMESTAMP, n INT', "
        "key: [user_id]}\n"
    )
    common = ["--pipeline", str(pipeline), "--bootstrap-servers", broker.bootstrap_servers]
    common += ["--state-dir", str(tmp_path / "none")]
    code, out, err = run(
        "produce", "clicks", "--generate", "40", "--seed", "3", "--rate", "100", *common
    )
    assert code == 0, err
    assert out.startswith(f"sent 40 record(s) to clicks (topic {topic}) in ")
    seconds = float(out.rsplit(" in ", 1)[1].rstrip("s\n"))
    assert seconds >= 0.35  # 40 records at 100/s

    schema = RecordSchema.parse("user_id STRING, ts TIMESTAMP, n INT")
    code, out, _ = run("tail", "clicks", "-n", "100", *common)
    every = [json.loads(parse_line(line)[3]) for line in out.splitlines()]
    assert len(every) == 40
    assert all(schema.check(value) == [] for value in every)
    code, out, _ = run("tail", "clicks", "-n", "5", *common)
    lines = [parse_line(line) for line in out.splitlines()]
    last = [json.loads(line[3]) for line in lines]
    # The last five by the records' Kafka timestamps. Records sent in the same millisecond (the
    # rate catching up after a stall of a loaded machine) are in partition and offset order.
    with TopicReader(broker.bootstrap_servers) as reader:
        everything, _ = reader.last(topic, 40)
    assert [(r.partition, r.offset) for r in everything[-5:]] == [line[:2] for line in lines]
    if len({r.timestamp_ms for r in everything}) == len(everything):
        # made-up timestamps rise through the batch, so the last five in time are the latest
        assert [v["ts"] for v in last] == sorted(v["ts"] for v in every)[-5:]


def test_a_views_output_is_read_from_its_serving_topic_with_tombstones(
    state_dir: Path, broker: EmbeddedBroker
) -> None:
    topic = topic_of(state_dir, "views-per-user")
    admin = AdminClient(client_config(broker.bootstrap_servers))
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(timeout=30)
    producer = Producer(client_config(broker.bootstrap_servers))
    producer.produce(
        topic, key=b'{"user_id":"u1"}', value=b'{"user_id":"u1","views":2}', partition=0
    )
    producer.produce(topic, key=b'{"user_id":"u1"}', value=None, partition=0)
    producer.produce(topic, value=b'{"user_id":null}', partition=1)
    assert producer.flush(30) == 0
    code, out, err = run("tail", "views-per-user", "page-views", "--state-dir", str(state_dir))
    assert code == 0, err
    assert out.splitlines() == [
        'views-per-user 0/0 {"user_id":"u1"} {"user_id":"u1","views":2}',
        'views-per-user 0/1 {"user_id":"u1"} (deleted)',
        'views-per-user 1/0 - {"user_id":null}',
    ]


def test_a_missing_topic_is_named_with_the_fix(tmp_path: Path, broker: EmbeddedBroker) -> None:
    state = tmp_path / "state"
    logs = {"page-views": ServedLog("no-such-topic")}
    write_run_state(
        state, RunState(broker.bootstrap_servers, (str(CLICKSTREAM),), os.getpid(), logs)
    )
    for command in (["tail", "page-views"], ["produce", "page-views", "--generate", "1"]):
        code, _, err = run(*command, "--state-dir", str(state))
        assert code == 1
        assert err == (
            f"error: Log 'page-views': topic 'no-such-topic' does not exist on "
            f"{broker.bootstrap_servers}: start `distributary run` for the pipeline (it creates "
            "the topics)\n"
        )


def test_produce_reports_progress_and_keeps_to_the_rate(broker: EmbeddedBroker) -> None:
    topic = create_topic(broker.bootstrap_servers, 1)
    reports: list[tuple[int, float]] = []
    records = [EncodedRecord(None, b'{"n":%d}' % i) for i in range(20)]
    started = time.monotonic()
    done = produce(
        broker.bootstrap_servers,
        topic,
        records,
        rate=40,
        progress=lambda n, s: reports.append((n, s)),
        progress_every=0.1,
    )
    assert (done.records, done.topic) == (20, topic)
    assert time.monotonic() - started >= 19 / 40
    assert reports
    assert reports[-1][0] <= 20
    assert all(b[0] > a[0] for a, b in itertools.pairwise(reports))
    with TopicReader(broker.bootstrap_servers) as reader:
        records_read, ends = reader.last(topic, 3)
    assert ends == {0: 20}
    assert [r.value for r in records_read] == [b'{"n":17}', b'{"n":18}', b'{"n":19}']


def _lines(stream: IO[str] | None, into: queue.Queue[str]) -> None:
    assert stream is not None
    for line in stream:
        into.put(line)


def _next(lines: queue.Queue[str], timeout: float) -> str:
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"nothing printed within {timeout:.0f}s")


def test_follow_prints_a_record_produced_after_it_started(
    state_dir: Path, broker: EmbeddedBroker
) -> None:
    command = [sys.executable, "-m", "distributary.cli", "tail", "page-views", "-n", "0"]
    command += ["--follow", "--state-dir", str(state_dir)]
    out: queue.Queue[str] = queue.Queue()
    err: queue.Queue[str] = queue.Queue()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as tail:
        readers = [
            threading.Thread(target=_lines, args=(stream, lines), daemon=True)
            for stream, lines in ((tail.stdout, out), (tail.stderr, err))
        ]
        for reader in readers:
            reader.start()
        try:
            assert _next(err, 60).startswith("following page-views (topic ")
            code, _, message = run(
                "produce",
                "page-views",
                "--generate",
                "1",
                "--seed",
                "1",
                "--state-dir",
                str(state_dir),
            )
            assert code == 0, message
            _, offset, key, value = parse_line(_next(out, 30).rstrip("\n"))
            assert (offset, json.loads(key)) == (0, {"user_id": json.loads(value)["user_id"]})
            tail.send_signal(signal.SIGINT)
            assert tail.wait(30) == 0  # Ctrl-C ends it cleanly
        finally:
            if tail.poll() is None:
                tail.kill()
            tail.wait()
            for reader in readers:
                reader.join(10)


def test_tail_starts_the_stopped_runs_embedded_broker_to_read(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with EmbeddedBroker(state / "kafka") as stopped_later:
        servers = stopped_later.bootstrap_servers
        topic = create_topic(servers, 1)
        producer = Producer(client_config(servers))
        for n in range(3):
            producer.produce(topic, key=b'{"user_id":"u"}', value=b'{"n":%d}' % n)
        assert producer.flush(30) == 0
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    logs = {"page-views": ServedLog(topic)}
    write_run_state(state, RunState(servers, (str(CLICKSTREAM),), int(ended.stdout), logs))
    code, out, err = run("tail", "page-views", "-n", "2", "--state-dir", str(state))
    assert code == 0, err
    assert f"no `distributary run` is running in {state}: starting its embedded broker" in err
    assert out.splitlines() == ['0/1 {"user_id":"u"} {"n":1}', '0/2 {"user_id":"u"} {"n":2}']
    assert not (state / "kafka" / "broker.pid").exists()  # stopped again
