#!/usr/bin/env python3
"""Reprocessing benchmark: how long a DerivedView's SQL change takes to reach its readers under
the operator, and how fast the new revision reads its input again against the serving one.

One run on loopback, with the parts the integration tests use: a real control plane (etcd,
kube-apiserver, kube-controllers from `distributary.devtools.controlplane`), an embedded
Kafka broker, and `distributary operator` as a process of its own (`direct` topics, `local` Spark:
one runner process per revision, `local[2]`). One input Log of N records (bench/dataplane's records,
about 200 bytes, 4 partitions) and one view over it (a filter and projection, append, trigger 500ms,
cutover at lag 0 after a 2s window):

1. N - M records, then the view: revision 1 reads them from the start (its first catch-up);
2. M more records at full speed while revision 1 serves: its steady-state rate;
3. the SQL changes (same selectivity, so both revisions write alike): revision 2 reads all N
   from the start beside revision 1, and the clock runs until the output Log's topic moves.

With --live (live.py) records keep arriving at a steady rate from before revision 1 starts until
after the cutover, as in production, and revision 2's topic is checked exactly at the end.

Why it is shaped this way:
- Rates are Spark's own account (the runner's progress records: rows over first batch start to
  last batch end), as in bench/dataplane; wall figures from the revisions' consumer groups,
  sampled four times a second, are reported beside them.
- Status, the Log and the groups are sampled in-process (Kubernetes client, Admin API), not with
  kubectl, whose start-up would take the CPU the runners are measured on.
- Revision 2 runs while revision 1 still runs, as it does for a user: on 2 cores they share it.
The last stdout line is one JSON object with every figure; progress goes to stderr.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))  # figures.py, parts.py: already there when run as a directory
try:
    from kubernetes.client.exceptions import ApiException

    from distributary.devtools.controlplane import ControlPlane, ControlPlaneError
    from distributary.kafka.admin import KafkaAdminError
    from distributary.local.broker import BrokerError, EmbeddedBroker
except ImportError:  # run directly by a Python without Distributary: use the project's venv
    _VENV = ROOT / ".venv"
    if __name__ == "__main__" and (_VENV / "bin" / "python").exists() and sys.prefix != str(_VENV):
        _PYTHON = str(_VENV / "bin" / "python")
        os.execv(_PYTHON, [_PYTHON, str(HERE), *sys.argv[1:]])
    raise

import figures  # noqa: E402  (found through the path above)
import live  # noqa: E402
import parts  # noqa: E402
from figures import LOG, SQL_AFTER, SQL_BEFORE, VIEW  # noqa: E402
from parts import say  # noqa: E402


def load_dataplane() -> ModuleType:
    """bench/dataplane, for its records and its account of the machine (loading runs nothing)."""
    path = str(ROOT / "bench" / "dataplane")
    loader = importlib.machinery.SourceFileLoader("bench_dataplane", path)
    spec = importlib.util.spec_from_loader("bench_dataplane", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    loader.exec_module(module)
    return module


dataplane = load_dataplane()


def first_catchup(bench: parts.Bench, records: int) -> dict[str, Any]:
    """N - M records, then the view: revision 1 reads them from the start."""
    say(f"appending {records:,} records (~200 bytes) to {LOG}")
    produced = parts.produce(bench.bootstrap, range(records), dataplane.record_value)
    say(f"applying view {VIEW}: revision 1 reads {LOG} from the start")
    applied = time.time()
    bench.kube.apply(bench.view(SQL_BEFORE))
    caught_up = bench.until("revision 1 reading", lambda: bench.read(1) >= records)
    bench.settled()
    return {
        "revision": 1,
        "records": records,
        "produce_s": round(produced, 3),
        "applied": applied,
        "runner_started": bench.runner_started(1),
        "caught_up": caught_up,
    }


def steady(bench: parts.Bench, first: int, records: int) -> dict[str, Any]:
    """M more records at full speed while revision 1 serves: its steady-state rate."""
    say(f"appending {records:,} more records at full speed while revision 1 serves")
    started = time.time()
    produced = parts.produce(bench.bootstrap, range(first, first + records), dataplane.record_value)
    caught_up = bench.until("revision 1 keeping up", lambda: bench.read(1) >= first + records)
    bench.settled()
    return {
        "revision": 1,
        "records": records,
        "produce_s": round(produced, 3),
        "produce_rate_rps": figures.per_second(records, produced),
        "started": started,
        "caught_up": caught_up,
    }


def reprocess(bench: parts.Bench, records: int) -> dict[str, Any]:
    """The SQL change: revision 2 reads all N beside revision 1, until the Log moves to it."""
    say(f"changing the SQL: revision 2 reads all {records:,} records beside revision 1")
    applied = time.time()
    bench.kube.apply(bench.view(SQL_AFTER))
    applied_s = time.time() - applied
    moved = figures.revision_topic(2)
    bench.until(
        "revision 2 catching up, then cutover", lambda: bench.watcher.last().log_topic == moved
    )
    say(f"  cut over: the Log {VIEW} reads {moved}")
    return {
        "revision": 2,
        "records": records,
        "applied": applied,
        "apply_s": round(applied_s, 3),
        "runner_started": bench.runner_started(2),
    }


def figures_of(
    bench: parts.Bench, first: dict[str, Any], calm: dict[str, Any], new: dict[str, Any]
) -> dict[str, Any]:
    """The report's sections, from the phases, the samples and the runners' progress records."""
    samples = list(bench.watcher.samples)
    r1 = figures.data_batches(parts.progress_records(bench.bootstrap, 1))
    r2 = figures.data_batches(parts.progress_records(bench.bootstrap, 2))
    return {
        "first_catchup": figures.catchup_section(first, figures.between(r1, 0, calm["started"])),
        "steady": figures.steady_section(calm, figures.between(r1, calm["started"])),
        "reprocess": figures.reprocess_section(new, samples, r2),
    }


def expected_outputs(records: int) -> int:
    """How many of the first `records` records the second SQL keeps."""
    return sum(1 for i in range(records) if dataplane.duration_ms(i) < figures.MAX_DURATION_AFTER)


def measure(bench: parts.Bench) -> dict[str, Any]:
    """The three phases, then the report."""
    args = bench.args
    first_records = args.records - args.steady_records
    bench.kube.apply(figures.log_manifest())
    bench.until(f"Log {LOG} Ready", lambda: parts.is_true(bench.kube.get("logs", LOG), "Ready"))
    bench.watcher.start()
    first = first_catchup(bench, first_records)
    calm = steady(bench, first_records, args.steady_records)
    new = reprocess(bench, args.records)
    bench.watcher.stop()
    sections = figures_of(bench, first, calm, new)
    written, wanted = parts.output_records(bench.bootstrap, 2), expected_outputs(args.records)
    sections["reprocess"].update(
        status="ok" if written == wanted else "incomplete",
        output_records=written,
        expected_output_records=wanted,
    )
    window_s = figures.seconds_of(args.cutover_window)
    report: dict[str, Any] = {
        "benchmark": "reprocess",
        "quick": args.quick,
        "records": args.records,
        "partitions": figures.PARTITIONS,
        "sql_before": SQL_BEFORE,
        "sql_after": SQL_AFTER,
        "trigger": args.trigger,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "cutover_window_s": window_s,
        "cutover_max_lag": 0,
        "observe_interval_s": args.observe_interval,
    }
    report.update(figures.summary(sections))
    report["bounded_by"] = figures.lower_bound(window_s, args.observe_interval)
    report.update(sections)
    report["machine"] = dataplane.machine()  # last: the load average covers the run
    return report


def run(args: Any, state: Path) -> dict[str, Any]:
    """Start the parts, measure, stop the parts; the report."""
    plane = ControlPlane(state / "kube")
    broker = EmbeddedBroker(state / "kafka")
    try:
        say(f"starting the control plane and the Kafka broker in {state}")
        plane.start()
        broker.start()
        kube = parts.Kube(plane.kubeconfig)
        kube.install_crds()
        operator = parts.Operator(
            plane.kubeconfig, broker.bootstrap_servers, state / "operator", args.observe_interval
        )
        watcher = parts.Watcher(kube, broker.bootstrap_servers)
        say("starting `distributary operator` (direct topics, local Spark)")
        operator.start()
        try:
            bench = parts.Bench(args, kube, broker.bootstrap_servers, watcher, operator)
            return live.measure(bench, dataplane) if args.live else measure(bench)
        except BaseException:
            say(f"the end of the operator's log:\n{operator.tail()}")
            raise
        finally:
            quietly("stopping the watcher", watcher.stop)
            quietly("stopping the operator and its runners", operator.stop)
    finally:
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
    state = Path(tempfile.mkdtemp(prefix="distributary-bench-reprocess-"))
    started = time.monotonic()
    try:
        report = run(args, state)
        report["wall_s"] = round(time.monotonic() - started, 1)
        print(json.dumps(report), flush=True)
        return 0
    except (ControlPlaneError, BrokerError, KafkaAdminError, ApiException, RuntimeError) as exc:
        say(f"failed: {exc}")
        return 1
    except TimeoutError as exc:  # an OSError: not caught above
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
