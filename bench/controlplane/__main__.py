#!/usr/bin/env python3
"""Control-plane benchmark: how fast the operator makes many Logs and DerivedViews Ready, how many
API requests that takes, and how much memory the operator holds meanwhile.

One run on loopback: a real control plane (etcd, kube-apiserver, kube-controllers from
`distributary.devtools.controlplane`), a real embedded Kafka broker, and `distributary operator` as
a process of its own (`direct` topic backend, `spark-operator` runtime), as the integration tests
start them. N Logs and M DerivedViews (view i reads Log i) are created at once by a few threads,
Logs first, and the clock runs from the first create until every one is Ready.

Why it is shaped this way:
- By default no Spark operator runs, and the benchmark stands in for it as most tests do: each
  SparkApplication the operator creates is set to RUNNING through the status subresource, once.
  The operator's watch of SparkApplications sees it, as it would in a cluster. With
  `--real-spark-operator` the Spark operator's real controller (with its webhook) submits each one
  with spark-submit and kwok runs the driver pods (`distributary.devtools.sparkoperator`): the
  figures then include a JVM per view and the controller's own API requests, as in a cluster.
- Readiness is read from watches, not polls: a poll lists every object each time and would load
  the API server (and the 2 cores) more than the operator under test does.
- API requests are the API server's own counter (`apiserver_request_total`) read before and
  after: every client counts, so the benchmark counts its own requests and subtracts them.
- Memory is the operator process's VmHWM (peak resident set size, from /proc/<pid>/status), read
  after a settle period that holds one observe round over everything.
The last stdout line is one JSON object with every figure; progress goes to stderr.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # figures.py, parts.py: already there when run as a directory
try:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.watch.watch import iter_resp_lines

    from distributary.devtools.controlplane import ControlPlane, ControlPlaneError
    from distributary.devtools.gobuild import GoBuildError
    from distributary.devtools.sparkoperator import SparkOperatorBed
    from distributary.local.broker import BrokerError, EmbeddedBroker
except ImportError:  # run directly by a Python without Distributary: use the project's venv
    _VENV = HERE.parent.parent / ".venv"
    if __name__ == "__main__" and (_VENV / "bin" / "python").exists() and sys.prefix != str(_VENV):
        _PYTHON = str(_VENV / "bin" / "python")
        os.execv(_PYTHON, [_PYTHON, str(HERE), *sys.argv[1:]])
    raise

import figures  # noqa: E402  (found through the path above)
import parts  # noqa: E402
from figures import NAMESPACE  # noqa: E402

GROUP, VERSION = "distributary.dev", "v1alpha1"
SPARK_GROUP, SPARK_VERSION, SPARK_PLURAL = "sparkoperator.k8s.io", "v1beta2", "sparkapplications"
PROGRESS_EVERY = 5.0
WATCH_SECONDS = 3600  # one watch per kind for the whole run
MEMORY = (
    "VmHWM of the operator process: its peak resident set size since it started, from "
    "/proc/<pid>/status, read after the settle period"
)


def say(message: str) -> None:
    """A progress line for people, on stderr."""
    print(f"[controlplane] {message}", file=sys.stderr, flush=True)


@dataclass
class Requests:
    """The benchmark's own API requests, by `resource verb`, to subtract from the server's."""

    counts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str) -> None:
        """One request made."""
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def since(self, before: dict[str, int]) -> dict[str, int]:
        """The requests made since `before` (an earlier `snapshot`)."""
        now = self.snapshot()
        return {k: n - before.get(k, 0) for k, n in now.items() if n > before.get(k, 0)}

    def snapshot(self) -> dict[str, int]:
        """The counts so far."""
        with self.lock:
            return dict(self.counts)


@dataclass
class Bench:
    """The running parts, and what the watches have seen."""

    args: Any
    plane: ControlPlane
    custom: Any  # kubernetes.client.CustomObjectsApi
    own: Requests = field(default_factory=Requests)
    stop: threading.Event = field(default_factory=threading.Event)
    trackers: dict[str, figures.Readiness] = field(default_factory=dict)
    started_apps: set[str] = field(default_factory=set)  # uids the stand-in set RUNNING
    streams: list[Any] = field(default_factory=list)  # the watches' HTTP responses
    lock: threading.Lock = field(default_factory=threading.Lock)
    stand_in: concurrent.futures.ThreadPoolExecutor = field(
        default_factory=lambda: concurrent.futures.ThreadPoolExecutor(2, "spark-stand-in")
    )

    def scrape(self) -> dict[tuple[str, str], float]:
        """`apiserver_request_total` from the API server's /metrics (one request of ours)."""
        try:
            return figures.request_counts(parts.apiserver_metrics(self.plane))
        finally:
            self.own.add("/metrics GET")

    def seen(self, kind: str, event: str, body: dict[str, Any]) -> None:
        """A watch event: the readiness of a Log or view, or a SparkApplication to start."""
        if kind == SPARK_PLURAL:
            self._stand_in(event, body)
            return
        name, now = body["metadata"]["name"], time.monotonic()
        ready = event != "DELETED" and figures.is_ready(body)
        with self.lock:
            for label in ("logs", "output_logs") if kind == "logs" else ("views",):
                if label in self.trackers:
                    self.trackers[label].observe(name, ready, now)

    def _stand_in(self, event: str, body: dict[str, Any]) -> None:
        state = ((body.get("status") or {}).get("applicationState") or {}).get("state")
        uid = body["metadata"]["uid"]
        if self.args.real_spark_operator:  # the controller runs it: count it once RUNNING
            if state == "RUNNING":
                with self.lock:
                    self.started_apps.add(uid)
            return
        with self.lock:
            if event == "DELETED" or state or uid in self.started_apps:
                return
            self.started_apps.add(uid)
        self.stand_in.submit(self._set_running, body["metadata"]["name"])

    def _set_running(self, name: str) -> None:
        """Write the application's status as the Spark operator does (driverInfo is required)."""
        status = {
            "applicationState": {"state": "RUNNING"},
            "driverInfo": {"podName": f"{name}-driver", "webUIPort": 4040},
            "sparkApplicationId": f"spark-{len(self.started_apps):016x}",
            "submissionAttempts": 1,
            "executionAttempts": 1,
            "lastSubmissionAttemptTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        try:
            self.custom.patch_namespaced_custom_object_status(
                SPARK_GROUP, SPARK_VERSION, NAMESPACE, SPARK_PLURAL, name, {"status": status}
            )
        except ApiException as exc:
            say(f"setting SparkApplication {name} RUNNING failed: HTTP {exc.status} {exc.reason}")
        finally:
            self.own.add("sparkapplications/status PATCH")

    def counts(self) -> dict[str, str]:
        """Ready out of expected, by tracker, for progress lines and the report."""
        with self.lock:
            return {k: f"{len(t.ready)}/{len(t.expected)}" for k, t in self.trackers.items()}

    def close(self) -> None:
        """Stop: cut the watches' streams, drop the stand-in's pending work."""
        self.stop.set()
        with self.lock:
            streams = list(self.streams)
        for response in streams:
            with contextlib.suppress(RuntimeError, ValueError):  # ended already: nothing to cut
                response.shutdown()
        self.stand_in.shutdown(wait=False, cancel_futures=True)

    def done(self) -> bool:
        """Whether every tracker saw all its objects Ready at once."""
        with self.lock:
            return all(t.done for t in self.trackers.values())


def watch_forever(bench: Bench, group: str, version: str, plural: str) -> None:
    """Feed every event of a kind in the namespace to `bench.seen` until the bench stops. Its
    stream is kept in `bench.streams`, so stopping can cut it (an open watch holds the API
    server's shutdown up). Not counted as the benchmark's: the server counts a watch when it
    ends, which is after the run."""
    resource_version = None
    while not bench.stop.is_set():
        try:
            response = bench.custom.list_namespaced_custom_object(
                group, version, NAMESPACE, plural, watch=True, resource_version=resource_version,
                timeout_seconds=WATCH_SECONDS, _preload_content=False,
            )  # fmt: skip
            with bench.lock:
                bench.streams.append(response)
            for line in iter_resp_lines(response):
                event = json.loads(line)
                if event["type"] == "ERROR":  # 410 Gone: start again from now
                    resource_version = None
                    break
                body = event["object"]
                resource_version = body["metadata"]["resourceVersion"]
                bench.seen(plural, event["type"], body)
        except Exception as exc:  # the connection broke, or was cut on purpose
            if not bench.stop.is_set():
                say(f"watch of {plural} broke ({exc}); watching again")
                time.sleep(1)


def apply_all(bench: Bench, manifests: list[dict[str, Any]]) -> float:
    """Create every object with a few threads; the seconds it took. Raises on any failure."""
    started = time.monotonic()

    def create(manifest: dict[str, Any]) -> None:
        plural = "logs" if manifest["kind"] == "Log" else "derivedviews"
        try:
            bench.custom.create_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, plural, manifest
            )
        finally:
            bench.own.add(f"{plural} POST")

    with concurrent.futures.ThreadPoolExecutor(bench.args.apply_threads, "apply") as pool:
        for future in [pool.submit(create, m) for m in manifests]:
            future.result()
    return time.monotonic() - started


def wait_ready(bench: Bench, sampler: parts.Sampler, deadline: float) -> None:
    """Wait until all are Ready or the deadline, saying how far it got."""
    last = time.monotonic()
    while not bench.done() and time.monotonic() < deadline:
        time.sleep(0.25)
        if time.monotonic() - last >= PROGRESS_EVERY:
            last = time.monotonic()
            ready = ", ".join(f"{k} {v}" for k, v in bench.counts().items())
            say(f"  Ready: {ready}; apps RUNNING {len(bench.started_apps)}; operator "
                f"{sampler.now()}")  # fmt: skip


def start_watches(bench: Bench, args: Any) -> None:
    """Readiness trackers for what is applied, and the watches that feed them."""
    logs = frozenset(figures.log_name(i) for i in range(args.logs))
    views = frozenset(figures.view_name(i) for i in range(args.views))
    now = time.monotonic()
    bench.trackers = {"logs": figures.Readiness(logs, now)}
    if views:
        bench.trackers["output_logs"] = figures.Readiness(views, now)
        bench.trackers["views"] = figures.Readiness(views, now)
    for group, version, plural in (
        (GROUP, VERSION, "logs"),
        (GROUP, VERSION, "derivedviews"),
        (SPARK_GROUP, SPARK_VERSION, SPARK_PLURAL),
    ):
        threading.Thread(
            target=watch_forever, args=(bench, group, version, plural), daemon=True
        ).start()
    time.sleep(2)  # the watches are open


def measure(
    bench: Bench, operator: parts.Operator, process: parts.Process, others: list[parts.Process]
) -> dict[str, Any]:
    """Apply the workload and measure; the report."""
    args = bench.args
    start_watches(bench, args)
    sampler = parts.Sampler(process)
    at_start = sampler.now()
    own_before = bench.own.snapshot()
    before = bench.scrape()
    cpu_before = {p.name: p.cpu() or 0.0 for p in [process, *others]}
    own_cpu_before = time.process_time()
    say(f"creating {args.logs:,} Logs and {args.views:,} DerivedViews with "
        f"{args.apply_threads} threads")  # fmt: skip
    started = time.monotonic()
    for tracker in bench.trackers.values():
        tracker.started = started
    with concurrent.futures.ThreadPoolExecutor(1) as applying:
        applied = applying.submit(
            apply_all, bench, figures.workload(args.logs, args.views, args.partitions)
        )
        wait_ready(bench, sampler, started + args.timeout)
        apply_seconds = applied.result()
    own = bench.own.since(own_before)
    after = bench.scrape()
    cpu = {p.name: round((p.cpu() or 0.0) - cpu_before[p.name], 1) for p in [process, *others]}
    cpu["benchmark"] = round(time.process_time() - own_cpu_before, 1)  # its watches, stand-in
    at_ready = sampler.now()
    say(f"  Ready: {', '.join(f'{k} {v}' for k, v in bench.counts().items())}")
    say(f"settling for {args.settle:.0f}s (an observe round over everything)")
    own_idle = bench.own.snapshot()
    time.sleep(args.settle)
    idle = figures.request_delta(after, bench.scrape())
    idle_total = sum(idle.values()) - sum(bench.own.since(own_idle).values())
    sampler.stop()
    peak = parts.mib(process.kib("VmHWM"))
    report = figures.report(
        args,
        {name: t.all_ready_at for name, t in bench.trackers.items()},
        apply_seconds,
        figures.request_delta(before, after),
        own,
    )
    report["ready"] = bench.counts()
    report["idle_api_requests_per_s"] = round(idle_total / args.settle, 1)
    report["idle_api_requests"] = idle  # by request, the benchmark's /metrics reads among them
    report["operator_peak_rss_mb"] = peak
    report["operator_memory"] = {
        "measures": MEMORY,
        "peak_mb": peak,
        "rss_at_start_mb": at_start.rss_mb,
        "rss_at_all_ready_mb": at_ready.rss_mb,
        **sampler.maxima(),
    }
    report["cpu_seconds_until_ready"] = cpu
    report["operator_reconciles"] = figures.reconcile_summary(operator.metrics())
    report["targets"] = figures.targets(report["logs_ready_seconds"], peak, args.logs)
    report["machine"] = parts.machine()  # last: the load average covers the run
    return report


def run(args: Any, state: Path) -> dict[str, Any]:
    """Start the parts, measure, stop the parts; the report."""
    plane = ControlPlane(state / "kube")
    broker = EmbeddedBroker(state / "kafka")
    bed = SparkOperatorBed(plane, [NAMESPACE], state / "spark-operator")
    try:
        say(f"starting the control plane and the Kafka broker in {state}")
        plane.start()
        broker.start()
        parts.install_crds(plane)
        if args.real_spark_operator:
            say("starting the Spark operator's controller and kwok")
            bed.start()
        custom = parts.kube_client(plane.kubeconfig, args.apply_threads)
        bench = Bench(args, plane, custom)
        operator = parts.Operator(
            plane, broker.bootstrap_servers, state / "operator", args.observe_interval, args.profile
        )
        say("starting `distributary operator` (direct topics, spark-operator runtime)")
        try:
            process = operator.start()
            others = parts.processes(plane, broker.state_dir / "broker.pid")
            others += [parts.Process(name, pid) for name, pid in bed.pids()]
            return measure(bench, operator, process, others)
        except BaseException:
            say(f"the end of the operator's log:\n{operator.tail()}")
            raise
        finally:
            quietly("stopping the watches", bench.close)
            quietly("stopping the operator", operator.stop)
    finally:
        quietly("stopping the Spark operator and kwok", bed.stop)
        quietly("stopping the broker", broker.stop)
        quietly("stopping the control plane", plane.stop)


def quietly(what: str, stop: Callable[[], None]) -> None:
    """Tear a part down; a failure is said, not raised, so that the report still prints."""
    try:
        stop()
    except Exception as exc:
        say(f"{what} failed: {exc}")


def main(argv: list[str]) -> int:
    """Run the benchmark; the exit code."""
    args = figures.parse_args(argv)
    state = Path(tempfile.mkdtemp(prefix="distributary-bench-controlplane-"))
    try:
        report = run(args, state)
        print(json.dumps(report), flush=True)
        return 0
    except (ControlPlaneError, GoBuildError, BrokerError, ApiException, RuntimeError) as exc:
        say(f"failed: {exc}")
        return 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        if args.keep_state:
            say(f"kept {state}")
        else:
            shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
