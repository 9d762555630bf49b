"""The pure half of bench/controlplane: its command line, the objects it applies, and the
arithmetic of its figures, kept apart from the parts it starts so they can be unit-tested.

Readiness is judged as kstatus and `kubectl wait --for=condition=Ready` judge it: the Ready
condition is True and was computed from the object's current generation. "All Ready" is the first
moment every expected object is Ready at once, so an object that flips back counts again.
API requests come from the API server's own `apiserver_request_total` counter, read before and
after; the delta counts every client, so the benchmark counts its own requests to subtract them.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LOGS, QUICK_LOGS = 1000, 50
VIEWS, QUICK_VIEWS = 300, 15
SMOKE_LOGS, SMOKE_VIEWS, SMOKE_SETTLE = 5, 2, 1.0  # --smoke: to see that it runs, in seconds
NAMESPACE = "bench"
API_VERSION = "distributary.dev/v1alpha1"
SCHEMA = "user STRING, amount INT"
SQL = "SELECT user, amount FROM clicks WHERE amount >= 10"
LOGS_READY_WITHIN_S = 30.0  # the targets
PEAK_MEMORY_UNDER_MB = 200.0
REQUEST_TOTAL = "apiserver_request_total"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line; --quick picks the small defaults for what was not given."""
    parser = argparse.ArgumentParser(
        prog="bench/controlplane", description="Control-plane benchmark of the operator."
    )
    parser.add_argument("--quick", action="store_true", help="a small run: 50 Logs, 15 views")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the smallest run, to see that it runs (5 Logs, 2 views, 1 s of settling): its "
        "figures mean nothing",
    )
    parser.add_argument("--logs", type=int, help=f"Logs to apply (default {LOGS:,})")
    parser.add_argument("--views", type=int, help=f"DerivedViews to apply (default {VIEWS})")
    parser.add_argument("--partitions", type=int, default=1, help="partitions of each Log")
    parser.add_argument(
        "--observe-interval", type=float, default=30.0, help="the operator's (its default: 30)"
    )
    parser.add_argument("--apply-threads", type=int, default=8, help="threads that create")
    parser.add_argument("--timeout", type=float, help="seconds to wait for Ready (600; quick 180)")
    parser.add_argument(
        "--settle", type=float, help="seconds watched after all are Ready (observe interval + 5)"
    )
    parser.add_argument(
        "--real-spark-operator",
        action="store_true",
        help="run the views' SparkApplications with the Spark operator's real controller and "
        "kwok (built from Go modules once) instead of setting them RUNNING by hand",
    )
    parser.add_argument("--profile", help="write the operator's cProfile statistics to this file")
    parser.add_argument("--keep-state", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    if args.smoke:
        args.quick = True
        args.logs = SMOKE_LOGS if args.logs is None else args.logs
        args.views = SMOKE_VIEWS if args.views is None else args.views
        args.settle = SMOKE_SETTLE if args.settle is None else args.settle
    if args.logs is None:
        args.logs = QUICK_LOGS if args.quick else LOGS
    if args.views is None:
        args.views = QUICK_VIEWS if args.quick else VIEWS
    if args.timeout is None:
        args.timeout = 180.0 if args.quick else 600.0
    if args.settle is None:
        args.settle = args.observe_interval + 5
    if args.logs < 1 or args.views < 0 or args.views > args.logs:
        parser.error("--logs must be positive, --views from 0 to --logs (view i reads log i)")
    if args.partitions < 1 or args.apply_threads < 1 or args.observe_interval < 1:
        parser.error("--partitions and --apply-threads must be positive, --observe-interval >= 1")
    return args


def log_name(i: int) -> str:
    """The i-th primary Log."""
    return f"log-{i:04d}"


def view_name(i: int) -> str:
    """The i-th DerivedView; its output Log has the same name."""
    return f"view-{i:04d}"


def log_manifest(i: int, partitions: int, namespace: str = NAMESPACE) -> dict[str, Any]:
    """A primary Log, as a user would apply it."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Log",
        "metadata": {"name": log_name(i), "namespace": namespace},
        "spec": {"partitions": partitions, "schema": SCHEMA, "key": ["user"]},
    }


def view_manifest(i: int, namespace: str = NAMESPACE) -> dict[str, Any]:
    """A DerivedView reading Log i, writing an output Log of its own name."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DerivedView",
        "metadata": {"name": view_name(i), "namespace": namespace},
        "spec": {
            "inputs": [{"log": log_name(i), "alias": "clicks"}],
            "sql": SQL,
            "output": {"mode": "append"},
        },
    }


def workload(logs: int, views: int, partitions: int) -> list[dict[str, Any]]:
    """Every object to apply, Logs first, as one multi-document file would list them."""
    return [log_manifest(i, partitions) for i in range(logs)] + [
        view_manifest(i) for i in range(views)
    ]


def is_ready(resource: Mapping[str, Any]) -> bool:
    """Ready is True and was computed from the resource's current generation."""
    generation = (resource.get("metadata") or {}).get("generation")
    for item in (resource.get("status") or {}).get("conditions") or []:
        if item.get("type") == "Ready":
            current = item.get("observedGeneration") == generation
            return bool(item.get("status") == "True" and current)
    return False


@dataclass
class Readiness:
    """Which of the expected objects are Ready now, and when all of them first were at once
    (seconds since `started`, a monotonic time)."""

    expected: frozenset[str]
    started: float
    ready: set[str] = field(default_factory=set)
    all_ready_at: float | None = None

    def observe(self, name: str, ready: bool, now: float) -> None:
        """An object's readiness as just seen; others' names are ignored."""
        if name not in self.expected:
            return
        if ready:
            self.ready.add(name)
        else:
            self.ready.discard(name)
        if self.all_ready_at is None and len(self.ready) == len(self.expected):
            self.all_ready_at = round(now - self.started, 3)

    @property
    def done(self) -> bool:
        """Whether all were Ready at once, at some point."""
        return self.all_ready_at is not None


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of metric `name` in Prometheus' text format: labels and value."""
    found = []
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        match = _SAMPLE.match(line)
        if match is None or match.group(1) != name:
            continue
        labels = {k: v.replace('\\"', '"') for k, v in _LABEL.findall(match.group(2) or "")}
        found.append((labels, float(match.group(3))))
    return found


def request_counts(text: str) -> dict[tuple[str, str], float]:
    """`apiserver_request_total` summed by (resource[/subresource], verb). A request to a path
    that is no resource (/metrics, /healthz) has its path as subresource and no resource."""
    counts: dict[tuple[str, str], float] = {}
    for labels, value in samples(text, REQUEST_TOTAL):
        resource, sub = labels.get("resource", ""), labels.get("subresource", "")
        what = f"{resource}/{sub}" if resource and sub else resource or sub or "?"
        key = (what, labels.get("verb", "?"))
        counts[key] = counts.get(key, 0.0) + value
    return counts


def request_delta(
    before: Mapping[tuple[str, str], float], after: Mapping[tuple[str, str], float]
) -> dict[str, int]:
    """The requests made between two readings, as `resource verb` -> count, largest first."""
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    kept = [(f"{what} {verb}", int(n)) for (what, verb), n in delta.items() if n > 0]
    return dict(sorted(kept, key=lambda item: (-item[1], item[0])))


def proc_status_kib(text: str, field_name: str) -> int | None:
    """A `kB` field of /proc/<pid>/status (VmHWM: peak resident set; VmRSS: resident now)."""
    match = re.search(rf"^{field_name}:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def proc_status_count(text: str, field_name: str) -> int | None:
    """A count field of /proc/<pid>/status, such as Threads."""
    match = re.search(rf"^{field_name}:\s+(\d+)$", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def cpu_seconds(stat: str, ticks_per_second: int) -> float:
    """User plus system CPU time from the text of /proc/<pid>/stat."""
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / ticks_per_second


def per_second(count: int, seconds: float | None) -> float | None:
    """count / seconds, rounded; None without a time."""
    return round(count / seconds, 1) if seconds else None


def per_object(requests: float, objects: int) -> float | None:
    """Requests per object, rounded; None without objects."""
    return round(requests / objects, 2) if objects else None


def reconcile_summary(text: str) -> dict[str, dict[str, Any]]:
    """The operator's own account of its reconciles by kind: count by outcome, total seconds."""
    summary: dict[str, dict[str, Any]] = {}
    for labels, value in samples(text, "distributary_reconciles_total"):
        kind = summary.setdefault(labels.get("kind", "?"), {"outcomes": {}})
        kind["outcomes"][labels.get("outcome", "?")] = int(value)
    for suffix in ("sum", "count"):
        for labels, value in samples(text, f"distributary_reconcile_duration_seconds_{suffix}"):
            kind = summary.setdefault(labels.get("kind", "?"), {"outcomes": {}})
            kind["seconds" if suffix == "sum" else "timed"] = round(value, 3)
    for kind in summary.values():
        if kind.get("timed"):
            kind["mean_ms"] = round(1000 * kind["seconds"] / kind["timed"], 1)
    return summary


def report(
    args: argparse.Namespace,
    ready: Mapping[str, float | None],
    apply_seconds: float,
    requests: Mapping[str, int],
    own: Mapping[str, int],
) -> dict[str, Any]:
    """The figures of a run: `ready` holds the seconds until all of each kind were Ready (None:
    not within the time allowed), `requests` what the API server counted meanwhile by request,
    `own` the benchmark's own share of it."""
    objects = args.logs + args.views
    times = [t for t in ready.values() if t is not None]
    all_ready = max(times) if times and len(times) == len(ready) else None
    total, mine = sum(requests.values()), sum(own.values())
    return {
        "benchmark": "controlplane",
        "quick": args.quick,
        "status": "ok" if all_ready is not None else "timeout",
        "logs": args.logs,
        "views": args.views,
        "objects": objects,
        "partitions": args.partitions,
        "observe_interval_s": args.observe_interval,
        "apply_threads": args.apply_threads,
        "spark_operator": "real" if args.real_spark_operator else "stand-in",
        "apply_seconds": round(apply_seconds, 3),
        "logs_ready_seconds": ready.get("logs"),
        "output_logs_ready_seconds": ready.get("output_logs"),
        "views_ready_seconds": ready.get("views"),
        "all_ready_seconds": all_ready,
        "objects_per_second": per_second(objects, all_ready),
        "logs_per_second": per_second(args.logs, ready.get("logs")),
        "api_requests_per_object": per_object(total, objects),
        "operator_api_requests_per_object": per_object(total - mine, objects),
        "api_requests": {
            "counted": "every request apiserver_request_total counted from the first create until "
            "all were Ready: the benchmark's (creates, the Spark stand-in's status writes, "
            "/metrics reads), the operator's and kube-controllers' (a few, garbage "
            "collection); operator_api_requests_per_object leaves the benchmark's out",
            "total": total,
            "benchmark": mine,
            "others": total - mine,
            "by_request": dict(requests),
            "benchmark_by_request": dict(own),
        },
    }


def targets(logs_ready_s: float | None, peak_mb: float | None, logs: int) -> dict[str, Any]:
    """The issue's targets and whether this run met them (None: not measured)."""
    scaled = logs == LOGS  # the Ready target is for 1,000 Logs
    return {
        "logs_ready_within_s": LOGS_READY_WITHIN_S,
        "logs_ready_met": (logs_ready_s is not None and logs_ready_s <= LOGS_READY_WITHIN_S)
        if scaled
        else None,
        "peak_memory_under_mb": PEAK_MEMORY_UNDER_MB,
        "peak_memory_met": None if peak_mb is None else peak_mb < PEAK_MEMORY_UNDER_MB,
    }
