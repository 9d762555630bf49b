"""The operator's Prometheus metrics: reconciles, their durations and errors, every log's
records, and every view revision's lag, rate and dead letters, served on `--metrics-port` at
/metrics.

Names follow Prometheus' conventions (a `distributary_` prefix, base units, `_total` counters).
Labels are bounded by the resources that exist, never by record contents.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RECONCILES = Counter(
    "distributary_reconciles_total",
    "Reconciles by kind and outcome (ok, error, temporary).",
    ["kind", "outcome"],
)
RECONCILE_SECONDS = Histogram(
    "distributary_reconcile_duration_seconds",
    "How long a reconcile took, by kind.",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LOG_RECORDS = Gauge(
    "distributary_log_records",
    "Records retained in a log's topic (end offsets minus start offsets).",
    ["namespace", "log"],
)
LOG_END_OFFSET = Gauge(
    "distributary_log_end_offset",
    "A log's end offset per partition: the next offset to be written.",
    ["namespace", "log", "partition"],
)


_RUNNING = [0]  # reconciles running now (`reconciling`)
_RUNNING_LOCK = threading.Lock()


def reconciles_running() -> bool:
    """Whether a reconcile is running now (the operator's events wait for none to be)."""
    return _RUNNING[0] > 0


@contextmanager
def reconciling(kind: str) -> Iterator[None]:
    """Count and time one reconcile of `kind`; an exception counts as its outcome."""
    started = time.perf_counter()
    outcome = "error"
    with _RUNNING_LOCK:
        _RUNNING[0] += 1
    try:
        yield
        outcome = "ok"
    except Exception as exc:
        outcome = "temporary" if type(exc).__name__ == "TemporaryError" else "error"
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING[0] -= 1
        RECONCILE_SECONDS.labels(kind).observe(time.perf_counter() - started)
        RECONCILES.labels(kind, outcome).inc()


VIEW_LAG = Gauge(
    "distributary_view_lag_records",
    "Records a view's serving revision has not read yet, over all its inputs.",
    ["namespace", "view", "revision"],
)
VIEW_RECORDS_PER_SECOND = Gauge(
    "distributary_view_records_per_second",
    "Records per second of a view's last micro-batch.",
    ["namespace", "view", "revision"],
)


def _record_consumer(
    gauges: tuple[Gauge, Gauge], labels: tuple[str, str, str], status: Mapping[str, Any]
) -> None:
    lag, rate = status.get("lag"), (status.get("lastProgress") or {}).get("recordsPerSecond")
    if lag is not None:
        gauges[0].labels(*labels).set(lag)
    if rate is not None:
        gauges[1].labels(*labels).set(rate)


VIEW_DEAD_LETTERS = Gauge(
    "distributary_view_dead_letters",
    "Input records a view's revision could not parse and sent to its dead-letter topic, over "
    "the revision's whole run (as its runner counts them, across restarts).",
    ["namespace", "view", "revision"],
)
_LETTERED: dict[tuple[str, str], set[str]] = {}  # the revisions published per view


def record_view(namespace: str, view: str, status: Mapping[str, Any]) -> None:
    """Publish a view's lag and rate, and each revision's dead letters, from the status just
    computed for it; a revision no longer listed loses its series."""
    revision = str(status.get("servingRevision") or "")
    _record_consumer((VIEW_LAG, VIEW_RECORDS_PER_SECOND), (namespace, view, revision), status)
    counted = {
        str(row["revision"]): row["deadLetters"]
        for row in status.get("revisions") or []
        if isinstance(row, Mapping) and row.get("deadLetters") is not None
    }
    for number, count in counted.items():
        VIEW_DEAD_LETTERS.labels(namespace, view, number).set(count)
    for number in _LETTERED.get((namespace, view), set()) - set(counted):
        with suppress(KeyError):
            VIEW_DEAD_LETTERS.remove(namespace, view, number)
    _LETTERED[(namespace, view)] = set(counted)


JOB_LAG = Gauge(
    "distributary_job_lag_records",
    "Records a StreamJob's revision has not read yet, over all its inputs.",
    ["namespace", "job", "revision"],
)
JOB_RECORDS_PER_SECOND = Gauge(
    "distributary_job_records_per_second",
    "Records per second of a StreamJob's last micro-batch.",
    ["namespace", "job", "revision"],
)


JOB_DEAD_LETTERS = Gauge(
    "distributary_job_dead_letters",
    "Input records a StreamJob's running revision could not parse (`read_json`) and sent to its "
    "dead-letter topic, over the revision's whole run (across restarts).",
    ["namespace", "job", "revision"],
)
_JOB_LETTERED: dict[tuple[str, str], str] = {}  # the revision published per job


def record_job(namespace: str, job: str, status: Mapping[str, Any]) -> None:
    """Publish a job's lag, rate and dead letters from the status just computed for it; a
    revision no longer running loses its dead-letter series."""
    revision = str(status.get("revision") or "")
    _record_consumer((JOB_LAG, JOB_RECORDS_PER_SECOND), (namespace, job, revision), status)
    letters = status.get("deadLetters")
    before = _JOB_LETTERED.pop((namespace, job), None)
    if before is not None and (before != revision or letters is None):
        with suppress(KeyError):
            JOB_DEAD_LETTERS.remove(namespace, job, before)
    if letters is not None:
        JOB_DEAD_LETTERS.labels(namespace, job, revision).set(letters)
        _JOB_LETTERED[(namespace, job)] = revision


_PARTITIONS: dict[tuple[str, str], set[str]] = {}  # the partitions published per log


def record_log_offsets(
    namespace: str, log: str, ends: Mapping[str, int], records: int | None
) -> None:
    """Publish a log's end offsets and record count as last observed."""
    for partition, offset in ends.items():
        LOG_END_OFFSET.labels(namespace, log, partition).set(offset)
    _PARTITIONS.setdefault((namespace, log), set()).update(ends)
    if records is not None:
        LOG_RECORDS.labels(namespace, log).set(records)


def forget_log(namespace: str, log: str) -> None:
    """Drop a deleted log's series."""
    for partition in _PARTITIONS.pop((namespace, log), set()):
        LOG_END_OFFSET.remove(namespace, log, partition)
    with suppress(KeyError):
        LOG_RECORDS.remove(namespace, log)


SINK_LAG = Gauge(
    "distributary_sink_lag_records",
    "Records of a Sink's topic not yet in its store.",
    ["namespace", "sink"],
)
SINK_POSITION = Gauge(
    "distributary_sink_position",
    "The next offset a Sink's store applies, per partition, as committed with its rows.",
    ["namespace", "sink", "partition"],
)
SOURCE_RETAINED_WAL = Gauge(
    "distributary_source_retained_wal_bytes",
    "WAL the database server keeps for a Source's replication slot.",
    ["namespace", "source"],
)
SOURCE_SLOT_LAG = Gauge(
    "distributary_source_slot_lag_bytes",
    "WAL written since the position a Source's connector confirmed.",
    ["namespace", "source"],
)


_SINK_PARTITIONS: dict[tuple[str, str], set[str]] = {}  # the partitions published per Sink


def record_sink(namespace: str, sink: str, status: Mapping[str, Any]) -> None:
    """Publish a Sink's position and lag as last observed."""
    for partition, offset in (status.get("position") or {}).items():
        SINK_POSITION.labels(namespace, sink, partition).set(offset)
        _SINK_PARTITIONS.setdefault((namespace, sink), set()).add(partition)
    if isinstance(status.get("lag"), int):
        SINK_LAG.labels(namespace, sink).set(status["lag"])


def record_source(namespace: str, source: str, status: Mapping[str, Any]) -> None:
    """Publish a Source's slot readings as last observed."""
    slot = status.get("slot") or {}
    if isinstance(slot.get("retainedWalBytes"), int):
        SOURCE_RETAINED_WAL.labels(namespace, source).set(slot["retainedWalBytes"])
    if isinstance(slot.get("lagBytes"), int):
        SOURCE_SLOT_LAG.labels(namespace, source).set(slot["lagBytes"])


def forget(namespace: str, name: str) -> None:
    """Drop a deleted Sink's or Source's series."""
    for partition in _SINK_PARTITIONS.pop((namespace, name), set()):
        SINK_POSITION.remove(namespace, name, partition)
    for gauge in (SINK_LAG, SOURCE_RETAINED_WAL, SOURCE_SLOT_LAG):
        with suppress(KeyError):
            gauge.remove(namespace, name)


def serve(port: int) -> None:
    """Serve /metrics on `port` (all interfaces), in a background thread."""
    start_http_server(port)
