"""`distributary run`, `produce`, `tail` and `wait` against a Kafka that speaks only TLS.

One secured embedded broker serves the module: a SASL_SSL listener (SCRAM-SHA-512) and an mTLS
listener, no plaintext for clients, certificates made by the fixture with openssl. The
clickstream example's chain (its Log, a view of it and a view of that view) runs end to end
through each listener, given nothing but a client properties
file (`--kafka-config`), and its outputs are checked record by record as `test_local_run` checks
them on a plaintext broker: so every client of a run (topic creation, the appended demo data,
Spark's Kafka source and sink, the exactly-once writer, dead letters, progress, positions) spoke
TLS and authenticated. The password is written in no file of the state folder, the runner's log
or the command's output; a wrong one is refused within seconds, naming what to fix. A StreamJob
runs over mTLS, and the operator runs the example's chain over SASL_SSL (`e2e/local.py --secured`,
which is `make e2e-local` on a secured broker) with its credentials from its environment, as the
chart gives them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.secured_kafka import USER, SecuredKafka, start_secured_kafka
from tests.integration.test_local_run import (
    DATA,
    EXAMPLE,
    ROOT,
    demo_records,
    enriched,
    enriched_rows,
    latest,
    output_rows,
    summary_of,
)

from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.cluster import cluster_ready
from distributary.kafka.connection import client_settings, read_properties_file
from distributary.kafka.records import TopicReader
from distributary.plan.access.kafka_connection import parse_properties, password_in_properties
from distributary.plan.kafka_topics.topics import CreateTopic
from distributary.processes import free_port

# The runs take the example's chain (a view reading the Log, a view reading that view): every
# client of a run, and of the operator's, is in it; its third view, another aggregate of the Log,
# adds none.
CHAIN = ("enriched-page-views", "views-per-country")


def distributary(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the command as installed, capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "distributary.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    secured = start_secured_kafka(tmp_path_factory.mktemp("secured"))
    try:
        yield secured
    finally:
        secured.stop()


def admin_over_mtls(kafka: SecuredKafka) -> KafkaAdmin:
    security, _ = read_properties_file(kafka.mtls_properties)
    return KafkaAdmin(kafka.mtls_servers, client=client_settings(security))


def served(state: Path, log: str, properties: Path) -> list[tuple[int, int, Any, Any]]:
    """Every record of `log`'s serving topic as `distributary tail --kafka-config` prints it:
    (partition, offset, key, value), decoded from JSON, a tombstone's value None."""
    result = distributary(
        "tail", log, "-n", "1000000", "--state-dir", str(state), "--kafka-config", str(properties)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    decoder, rows = json.JSONDecoder(), []
    for line in result.stdout.splitlines():
        place, rest = line.split(" ", 1)
        partition, offset = (int(n) for n in place.split("/"))
        key: Any = None
        if rest.startswith("- "):
            rest = rest[2:]
        else:
            key, end = decoder.raw_decode(rest)
            rest = rest[end + 1 :]
        rows.append((partition, offset, key, None if rest == "(deleted)" else json.loads(rest)))
    return rows


def chain_of_the_example(folder: Path) -> Path:
    """The example's Log and its views of `CHAIN`, as its files say them, in `folder`."""
    folder.mkdir(parents=True)
    (folder / "logs.yaml").write_text((EXAMPLE / "logs.yaml").read_text())
    views = [v for v in yaml.safe_load_all((EXAMPLE / "views.yaml").read_text()) if v]
    chain = [v for v in views if v["metadata"]["name"] in CHAIN]
    assert len(chain) == len(CHAIN), [v["metadata"]["name"] for v in views]
    (folder / "views.yaml").write_text(yaml.safe_dump_all(chain))
    return folder


def clickstream_run(kafka: SecuredKafka, state: Path, properties: Path) -> dict[str, Any]:
    """The example's chain until caught up, its servers and security from `properties` alone;
    the summary, its outputs as `tail --kafka-config` reads them, and what it printed."""
    pipeline = chain_of_the_example(state.parent / f"{state.name}-pipeline")
    result = distributary(
        "run", str(pipeline), "--state-dir", str(state), "--until-caught-up", "--cores", "2",
        "--kafka-config", str(properties), "--produce", f"page-views={DATA}",
    )  # fmt: skip
    summary = summary_of(result)
    outputs = {log: served(state, log, properties) for log in CHAIN}
    return {"summary": summary, "outputs": outputs, "printed": result.stdout + result.stderr}


def forget_the_pipeline(kafka: SecuredKafka) -> None:
    """Delete the topics and groups a run made, so the next run starts on an empty cluster."""
    admin = admin_over_mtls(kafka)
    topics = {t for t in admin.topic_names() if not t.startswith("__")}
    for topic in topics:
        admin.delete_topic(topic)
    for group in admin.group_names():
        admin.delete_group(group)
    deadline = time.monotonic() + 60
    while topics & admin.topic_names():
        assert time.monotonic() < deadline, f"topics not deleted: {topics & admin.topic_names()}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def runs(kafka: SecuredKafka, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of the example through each listener, on a cluster emptied between them."""
    folder = tmp_path_factory.mktemp("runs")
    sasl = clickstream_run(kafka, folder / "sasl", kafka.sasl_properties)
    forget_the_pipeline(kafka)
    mtls = clickstream_run(kafka, folder / "mtls", kafka.mtls_properties)
    return {"SASL_SSL": (sasl, folder / "sasl"), "mTLS": (mtls, folder / "mtls")}


def test_clients_without_tls_are_not_served(kafka: SecuredKafka) -> None:
    assert not cluster_ready(kafka.sasl_servers, timeout=2)
    assert not cluster_ready(kafka.mtls_servers, timeout=2)


@pytest.mark.parametrize("listener", ["SASL_SSL", "mTLS"])
def test_the_clickstream_example_runs_end_to_end(runs: dict[str, Any], listener: str) -> None:
    run, _ = runs[listener]
    summary, outputs = run["summary"], run["outputs"]
    assert summary["logs"]["page-views"]["records"] == len(demo_records())
    assert set(summary["views"]) == set(CHAIN)
    for name, view in summary["views"].items():
        assert (view["lag"], view["state"], view["revision"], view["deadLetters"]) == (
            0, "Running", 1, 0,
        ), name  # fmt: skip
    kept = enriched(demo_records())
    assert output_rows(outputs["enriched-page-views"]) == enriched_rows(kept)
    countries = Counter((r.get("country") or "unknown").upper() for r in kept)
    table = latest(outputs["views-per-country"])
    assert {json.loads(k)["country"]: v["views"] for k, v in table.items()} == countries


@pytest.mark.parametrize("listener", ["SASL_SSL", "mTLS"])
def test_the_password_is_written_nowhere(
    runs: dict[str, Any], listener: str, kafka: SecuredKafka
) -> None:
    run, state = runs[listener]
    assert kafka.password not in run["printed"]
    files = [p for p in state.rglob("*") if p.is_file() and "checkpoints" not in p.parts]
    assert any(p.name == "runner.log" for p in files)
    leaked = [str(p) for p in files if kafka.password.encode() in p.read_bytes()]
    assert leaked == []
    # The runner's specs say where the password is, not what it is.
    specs = json.loads((state / "runner-specs.json").read_text())["revisions"]
    security = specs[0]["spec"]["kafka_security"]
    if listener == "SASL_SSL":
        assert security["sasl_password"]["properties_file"] == str(kafka.sasl_properties)
    else:
        assert security["protocol"] == "SSL"
        assert security["ssl_certificate_location"] == security["ssl_key_location"]


def test_a_wrong_password_is_refused_within_seconds_naming_the_fix(
    kafka: SecuredKafka, tmp_path: Path
) -> None:
    wrong = kafka.properties_with_password(tmp_path / "wrong.properties", "not-the-password")
    started = time.monotonic()
    result = distributary(
        "run", str(EXAMPLE), "--state-dir", str(tmp_path / "state"), "--until-caught-up",
        "--kafka-config", str(wrong),
    )  # fmt: skip
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr[-2000:]
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: Kafka at {kafka.sasl_servers} refused the credentials")
    assert "SCRAM-SHA-512" in error
    assert f"the password in {wrong}" in error
    assert "not-the-password" not in result.stderr
    assert took < 20, f"took {took:.0f}s"


def test_produce_and_tail_through_either_listener(
    kafka: SecuredKafka, runs: dict[str, Any], tmp_path: Path
) -> None:
    # After the runs: their topics stay; this test's own Log gets its own topic.
    pipeline = tmp_path / "log.yaml"
    pipeline.write_text(
        "apiVersion: distributary.dev/v1alpha1\nkind: Log\nmetadata:\n  name: secured-notes\n"
        "spec:\n  partitions: 1\n  schema: 'n INT, note STRING'\n"
    )
    admin_over_mtls(kafka).create_topic(CreateTopic("secured-notes", 1, None, {}))
    records = [{"n": n, "note": f"note {n}"} for n in range(5)]
    data = tmp_path / "notes.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    produced = distributary(
        "produce", "secured-notes", "--file", str(data), "--pipeline", str(pipeline),
        "--state-dir", str(tmp_path / "none"), "--kafka-config", str(kafka.sasl_properties),
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr[-2000:]
    assert "sent 5 record(s)" in produced.stdout
    tailed = distributary(
        "tail", "secured-notes", "--pipeline", str(pipeline), "--state-dir",
        str(tmp_path / "none"), "--kafka-config", str(kafka.mtls_properties),
    )  # fmt: skip
    assert tailed.returncode == 0, tailed.stderr[-2000:]
    values = [json.loads(line.split(" - ", 1)[1]) for line in tailed.stdout.splitlines()]
    assert values == records
    # The same records, read with the library's own reader over SASL_SSL.
    security, _ = read_properties_file(kafka.sasl_properties)
    with TopicReader(kafka.sasl_servers, client=client_settings(security)) as reader:
        ends = reader.watermarks("secured-notes")
    assert ends == {0: (0, 5)}


def test_wait_reads_positions_over_tls(runs: dict[str, Any], kafka: SecuredKafka) -> None:
    _, state = runs["mTLS"]
    result = distributary(
        "wait", "enriched-page-views", "--state-dir", str(state), "--caught-up",
        "--timeout", "10", "--kafka-config", str(kafka.mtls_properties),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "enriched-page-views: done" in result.stdout


JOB_PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: sj-clicks}
spec: {topicName: secured-jobs.clicks, partitions: 2, schema: "user STRING, url STRING"}
---
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: sj-shouts}
spec: {topicName: secured-jobs.shouts, partitions: 1, schema: "user STRING, url STRING"}
---
apiVersion: distributary.dev/v1alpha1
kind: StreamJob
metadata: {name: shout}
spec:
  image: not-used-on-one-machine
  mainApplicationFile: shout.py
  arguments: ["--suffix", "!"]
  inputs: [{log: sj-clicks}]
  outputs: [{log: sj-shouts}]
"""


def test_a_stream_job_reads_writes_and_reports_its_position_over_mtls_with_two_pem_files(
    kafka: SecuredKafka, tmp_path: Path
) -> None:
    pipeline = tmp_path / "pipeline"
    pipeline.mkdir()
    (pipeline / "pipeline.yaml").write_text(JOB_PIPELINE)
    script = (ROOT / "tests" / "data" / "jobs" / "shout.py").read_text()
    (pipeline / "shout.py").write_text(
        script.replace('"lj-clicks"', '"sj-clicks"').replace('"lj-shouts"', '"sj-shouts"')
    )
    clicks = [{"user": f"u{i % 3}", "url": f"/page/{i}"} for i in range(12)]
    data = tmp_path / "clicks.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in clicks))
    state = tmp_path / "state"
    result = distributary(
        "run", str(pipeline), "--state-dir", str(state), "--until-caught-up", "--cores", "2",
        "--kafka-config", str(kafka.mtls_split_properties), "--produce", f"sj-clicks={data}",
    )  # fmt: skip
    summary = summary_of(result)
    admin = admin_over_mtls(kafka)
    ends = admin.end_offsets(["secured-jobs.clicks"])
    assert admin.committed("distributary.default.shout.r1") == ends
    job = summary["jobs"]["shout"]
    assert (job["revision"], job["lag"], job["state"]) == (1, 0, "Running")
    tailed = distributary(
        "tail", "sj-shouts", "-n", "100", "--pipeline", str(pipeline), "--state-dir", str(state),
        "--kafka-config", str(kafka.mtls_properties),
    )  # fmt: skip
    assert tailed.returncode == 0, tailed.stderr[-2000:]
    values = [json.loads(line.split(" - ", 1)[1]) for line in tailed.stdout.splitlines()]
    assert Counter((v["user"], v["url"]) for v in values) == Counter(
        (r["user"], r["url"].upper() + "!") for r in clicks
    )
    assert kafka.password not in result.stdout + result.stderr
    # Its key and certificate in two files reached Spark's executors inline: no log holds it.
    key = "".join(kafka.certificates.client_key.read_text().strip().splitlines()[1:-1])
    logs = [p for p in state.rglob("*") if p.is_file() and "checkpoints" not in p.parts]
    assert [str(p) for p in logs if key[:64].encode() in p.read_bytes()] == []


def test_the_clickstream_example_converges_through_the_operator_over_sasl_ssl(
    tmp_path: Path,
) -> None:
    state = tmp_path / "e2e"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "e2e" / "local.py"),
            "--state-dir",
            str(state),
            "--secured",
            "--views",
            ",".join(CHAIN),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["kafka"] == "SASL_SSL"
    assert set(summary["views"]) == set(CHAIN)
    for name, view in summary["views"].items():
        assert view == {"revision": 1, "outputTopic": f"{name}.r1", "lag": 0, "ready": True}, name
    assert summary["logs"]["page-views"]["records"] == len(demo_records())
    # The view's filter keeps some; written in transactions, its topic's offsets also count one
    # commit marker per transaction and partition.
    kept = len(enriched(demo_records()))
    assert summary["logs"]["enriched-page-views"]["records"] >= kept
    assert "derivedview.distributary.dev/views-per-country" in result.stdout  # kubectl apply
    # The operator took the password from its environment; none of its statuses, events (in
    # etcd), logs, runner specs or the runners' logs holds it.
    given = state / "client.properties"
    password = password_in_properties(parse_properties(given.read_text()))
    assert password
    files = [p for p in state.rglob("*") if p.is_file() and p != given]
    assert any(p.name == "operator.log" for p in files)
    assert [str(p) for p in files if password.encode() in p.read_bytes()] == []


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def test_the_operator_stops_at_start_when_kafka_refuses_its_password(
    kafka: SecuredKafka, tmp_path: Path
) -> None:
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    env = {
        **os.environ,
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "DISTRIBUTARY_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "DISTRIBUTARY_KAFKA_SASL_USERNAME": USER,
        "DISTRIBUTARY_KAFKA_SASL_PASSWORD": "not-the-password",
        "DISTRIBUTARY_KAFKA_SSL_CA_LOCATION": str(kafka.certificates.ca),
    }
    argv = [
        sys.executable, "-m", "distributary.cli", "operator",
        "--bootstrap-servers", kafka.sasl_servers, "--spark-runtime", "local",
        "--state-dir", str(tmp_path / "local"), "--health-port", str(free_port()),
        "--metrics-port", str(free_port()),
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr[-2000:]
    assert f"Kafka at {kafka.sasl_servers} refused the credentials" in result.stderr
    assert "environment variable DISTRIBUTARY_KAFKA_SASL_PASSWORD" in result.stderr
    assert "not-the-password" not in result.stderr + result.stdout
    assert took < 30, f"took {took:.0f}s"
