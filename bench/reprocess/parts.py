"""The real parts bench/reprocess runs on, started and read as the integration tests do: kubectl
and the Kubernetes client on the control plane, `distributary operator` as a process of its own
(and the runner processes it starts, stopped by the pids it records), a producer, the progress
topic, a watcher that samples status and consumer groups while the figures are made, and what
every phase shares (`Bench`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import figures
from confluent_kafka import Consumer, Producer, TopicPartition
from figures import LOG, NAMESPACE, PARTITIONS, VIEW, Sample
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.kafka.cluster import client_config
from distributary.plan.applications.runner_spec import consumer_group
from distributary.plan.revisions.progress import PROGRESS_TOPIC, progress_key
from distributary.processes import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
SAMPLE_EVERY = 0.25
PROGRESS_EVERY = 5.0
PRODUCER: dict[str, str | int | float | bool] = {
    "linger.ms": 20,
    "batch.size": 1_048_576,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 1_000_000,
}


def say(message: str) -> None:
    """A progress line for people, on stderr."""
    print(f"[reprocess] {message}", file=sys.stderr, flush=True)


class Kube:
    """The control plane, through kubectl (to apply, as a user does) and the Kubernetes client
    (to read, cheaply and often)."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
        self.custom = client.CustomObjectsApi(api)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        """Run kubectl; its stdout. Raises RuntimeError naming the command when it fails."""
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def install_crds(self) -> None:
        """The project's CRDs, established, and the benchmark's namespace."""
        self.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        self.kubectl("create", "namespace", NAMESPACE)

    def apply(self, manifest: dict[str, Any]) -> None:
        """kubectl apply, in the benchmark's namespace."""
        self.kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(manifest))

    def get(self, plural: str, name: str) -> dict[str, Any]:
        """A resource of ours; empty when it does not exist yet."""
        try:
            found = self.custom.get_namespaced_custom_object(
                figures.GROUP, figures.VERSION, NAMESPACE, plural, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        return cast(dict[str, Any], found)


def is_true(resource: dict[str, Any], type_: str) -> bool:
    """The condition is True and computed from the resource's current generation."""
    generation = (resource.get("metadata") or {}).get("generation")
    for item in (resource.get("status") or {}).get("conditions") or []:
        if item["type"] == type_:
            return bool(item["status"] == "True" and item["observedGeneration"] == generation)
    return False


class Watcher:
    """Samples the view, its output Log and both revisions' groups on a thread of its own."""

    def __init__(self, kube: Kube, bootstrap: str) -> None:
        self.kube, self.admin = kube, KafkaAdmin(bootstrap, timeout=5.0)
        self.samples: list[Sample] = []
        self.view: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        """Start sampling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            try:
                self.samples.append(self._sample())
            except Exception as exc:  # a slow API server or broker: the next look will do
                say(f"  (a sample failed: {exc})")

    def _sample(self) -> Sample:
        at = time.time()
        log = self.kube.get("logs", VIEW)
        view = self.kube.get("derivedviews", VIEW)
        self.view = view
        status = view.get("status") or {}
        rows = {int(r["revision"]): r for r in status.get("revisions") or []}
        committed = {}
        for revision in (1, 2):
            try:
                offsets = self.admin.committed(consumer_group(NAMESPACE, VIEW, revision))
            except KafkaAdminError:
                continue
            if offsets.get(LOG):
                committed[revision] = sum(offsets[LOG].values())
        try:
            ends: int | None = sum(self.admin.end_offsets([LOG]).get(LOG, {}).values())
        except KafkaAdminError:
            ends = None
        return Sample(
            at=at,
            serving=status.get("servingRevision"),
            log_topic=(log.get("status") or {}).get("topicName"),
            phases={n: str(r.get("phase")) for n, r in rows.items()},
            committed=committed,
            records_read={n: int(r["recordsRead"]) for n, r in rows.items() if "recordsRead" in r},
            lag_zero=frozenset(n for n, r in rows.items() if r.get("caughtUpSince")),
            lags={n: int(r["lag"]) for n, r in rows.items() if r.get("lag") is not None},
            input_rates={n: float(r["inputRate"]) for n, r in rows.items() if "inputRate" in r},
            ends=ends,
        )

    def last(self) -> Sample:
        """The latest sample (an empty one before the first)."""
        return self.samples[-1] if self.samples else Sample(at=time.time())


def wait(what: str, done: Callable[[], bool], timeout: float, show: Callable[[], str]) -> float:
    """Wait until `done()`, saying `show()` every few seconds; when it was done (wall clock)."""
    started = shown = time.monotonic()
    while not done():
        now = time.monotonic()
        if now - started > timeout:
            raise TimeoutError(f"{what}: not done within {timeout:.0f}s; last: {show()}")
        if now - shown >= PROGRESS_EVERY:
            shown = now
            say(f"  {what}: {now - started:.0f}s; {show()}")
        time.sleep(0.1)
    return time.time()


@dataclass
class Bench:
    """What every phase shares: the arguments, the control plane, the broker, the watcher."""

    args: Any
    kube: Kube
    bootstrap: str
    watcher: Watcher
    operator: Operator

    def show(self) -> str:
        """The last sample, for people: who serves, where the Log points, how far each read."""
        last = self.watcher.last()
        shown = [f"serving r{last.serving}", f"Log topic {last.log_topic}"]
        if last.ends is not None:
            shown.append(f"input at {last.ends:,}")
        for n, phase in sorted(last.phases.items()):
            read = f"r{n} {phase}, group at {last.committed.get(n, 0):,}"
            if n in last.records_read:
                read += f" (status recordsRead {last.records_read[n]:,})"
            if n in last.lags:
                read += f", status lag {last.lags[n]:,}"
            if n in last.input_rates:
                read += f" at inputRate {last.input_rates[n]:,.0f}/s"
            shown.append(read)
        return "; ".join(shown)

    def until(self, what: str, done: Callable[[], bool]) -> float:
        """`wait` with the run's timeout and progress."""
        return wait(what, done, self.args.timeout, self.show)

    def read(self, revision: int) -> int:
        """Records revision `revision`'s group has committed, as last sampled."""
        return self.watcher.last().committed.get(revision, 0)

    def settled(self) -> float:
        """Wait until the view is Ready and CaughtUp at its generation."""
        return self.until(
            "the view Ready and CaughtUp",
            lambda: is_true(self.watcher.view, "Ready") and is_true(self.watcher.view, "CaughtUp"),
        )

    def view(self, sql: str) -> dict[str, Any]:
        """The view with `sql` and the run's trigger and cutover window."""
        args = self.args
        return figures.view_manifest(
            sql, args.trigger, args.cutover_window, args.max_offsets_per_trigger
        )

    def runner_started(self, revision: int) -> float | None:
        """When the operator started revision `revision`'s runner (its pid file's time)."""
        pid_file = self.operator.folder / "local" / figures.NAMESPACE / VIEW / f"r{revision}"
        try:
            return (pid_file / "runner.pid").stat().st_mtime
        except OSError:
            return None


def produce(bootstrap: str, ids: range, value: Callable[[int], bytes]) -> float:
    """Append record `value(i)` for each i in `ids` (partition i % 4) at full speed; the
    seconds it took, every record acknowledged."""
    failures: list[str] = []
    producer = Producer(client_config(bootstrap, **PRODUCER))

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    started = shown = time.monotonic()
    for n, i in enumerate(ids):
        while True:
            try:
                producer.produce(LOG, value(i), partition=i % PARTITIONS, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        if n % 5000 == 0:
            producer.poll(0)
            if time.monotonic() - shown >= PROGRESS_EVERY:
                shown = time.monotonic()
                say(f"  {n:,} / {len(ids):,} records appended")
    if producer.flush(120) or failures:
        raise RuntimeError(f"appending to {LOG} failed: {failures[:3] or 'flush timed out'}")
    seconds = time.monotonic() - started
    say(f"  {len(ids):,} records appended in {seconds:.1f}s")
    return seconds


def progress_records(bootstrap: str, revision: int) -> list[dict[str, Any]]:
    """The runner's progress records for revision `revision` of the view."""
    admin = KafkaAdmin(bootstrap)
    ends = admin.end_offsets([PROGRESS_TOPIC])[PROGRESS_TOPIC]
    key = progress_key("DerivedView", NAMESPACE, VIEW, revision).encode()
    settings: dict[str, str | int | float | bool] = {
        "group.id": f"bench-reprocess-{os.getpid()}",
        "enable.auto.commit": False,
    }
    consumer = Consumer(client_config(bootstrap, **settings))
    consumer.assign([TopicPartition(PROGRESS_TOPIC, p, -2) for p in ends])  # from the start
    left, found = {p for p, end in ends.items() if end > 0}, []
    deadline = time.monotonic() + 60
    try:
        while left and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                if message.error() is not None:
                    continue
                value = message.value()
                if message.key() == key and value:
                    found.append(json.loads(value))
                if (message.offset() or 0) + 1 >= ends[message.partition() or 0]:
                    left.discard(message.partition() or 0)
    finally:
        consumer.close()
    return found


def output_records(bootstrap: str, revision: int) -> int:
    """Records a committed reader finds in revision `revision`'s output topic, counted by
    reading it: the runner writes each batch in a Kafka transaction (exactly once, the default),
    and each transaction's commit marker takes an offset of each partition it wrote, so the end
    offsets count more than the records."""
    topic = figures.revision_topic(revision)
    ends = {p: end for p, end in KafkaAdmin(bootstrap).end_offsets([topic])[topic].items() if end}
    settings: dict[str, str | int | float | bool] = {
        "group.id": f"bench-reprocess-count-{os.getpid()}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    }
    consumer = Consumer(client_config(bootstrap, **settings))
    assigned = [TopicPartition(topic, p, 0) for p in ends]
    consumer.assign(assigned)
    count, deadline = 0, time.monotonic() + 300
    try:
        while ends and time.monotonic() < deadline:
            count += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
            if all(tp.offset >= ends[tp.partition] for tp in consumer.position(assigned)):
                break
    finally:
        consumer.close()
    return count


class Operator:
    """`distributary operator` as a process of its own, as the integration tests start it."""

    def __init__(self, kubeconfig: Path, bootstrap: str, folder: Path, observe: float) -> None:
        self.kubeconfig, self.bootstrap, self.folder = kubeconfig, bootstrap, folder
        self.observe = observe
        self.process: subprocess.Popen[bytes] | None = None
        self.log = folder / "operator.log"

    def start(self) -> None:
        """Start it, watching the benchmark's namespace only."""
        self.folder.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable, "-m", "distributary.cli", "operator",
            "--bootstrap-servers", self.bootstrap,
            "--topic-backend", "direct",
            "--spark-runtime", "local",
            "--namespace", NAMESPACE,
            "--observe-interval", f"{self.observe:g}",
            "--health-port", str(free_port()),
            "--metrics-port", str(free_port()),
            "--state-dir", str(self.folder / "local"),
            "--checkpoint-root", (self.folder / "checkpoints").as_uri(),
        ]  # fmt: skip
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)

    def stop(self) -> None:
        """Stop it, then the runners it started (by the pids it recorded): they outlive it on
        purpose, so that a restarted operator finds them."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pid_file in (self.folder / "local").glob("*/*/r*/runner.pid"):
            stop_runner(pid_file)

    def tail(self, lines: int = 30) -> str:
        """The end of its log."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def stop_runner(pid_file: Path, grace: float = 30.0) -> None:
    """SIGTERM the runner whose pid `pid_file` holds if it is still that runner, then SIGKILL."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if str(pid_file.parent / "runner-spec.json").encode() not in cmdline:
        return  # not ours any more
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)
