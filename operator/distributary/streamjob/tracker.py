"""A StreamJob's position tracker: a listener on the job's Spark session.

After each micro-batch of each query, in this order: the dead letters of a query that is not
written exactly once (an exactly-once query wrote them in its batch's transaction) are sent, at
least once; the batch's end offsets of the job's inputs are committed to the revision's consumer
group, with the count of those dead letters in the offsets' metadata (so the count outlives the
process, and a rewind carries it over); the job's progress record is published with every dead
letter the revision has written. The group is committed last, so after a crash the next batch of
a query does not join up with it and the range in between is scanned again
(`plan.revisions.progress.step`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener

from distributary.kafka.admin import KafkaAdminError
from distributary.kafka.progress import ProgressPublisher
from distributary.plan.applications.runner_spec import RunnerInput, RunnerSpec
from distributary.plan.revisions.delivery import Marker, read_marker
from distributary.plan.revisions.positions import Offsets
from distributary.plan.revisions.progress import (
    Batch,
    batch_of,
    merge,
    progress_key,
    progress_record,
    step,
)
from distributary.runner.dead_letters import send_dead_letters

if TYPE_CHECKING:
    from distributary.streamjob.context import StreamJobContext


def scan_spec(job: StreamJobContext, sources: tuple[RunnerInput, ...]) -> RunnerSpec:
    """A runner spec to scan `sources` of `job` for dead letters."""
    return RunnerSpec(
        kind="StreamJob",
        namespace=job.namespace,
        name=job.name,
        revision=job.revision,
        spec_hash="",
        inputs=sources,
        dead_letter_topic=job.dead_letters_to,
        consumer_group=job.consumer_group,
        checkpoint_location=job.checkpoint_location,
        bootstrap_servers=job.bootstrap_servers,
        kafka_security=job.kafka_security,
        progress_topic=None,
    )


def _only(offsets: Offsets, topics: set[str]) -> Offsets:
    return {t: dict(p) for t, p in offsets.items() if t in topics}


def _at_most(start: Offsets, end: Offsets) -> Offsets:
    """`start`, with no partition past its end (another query may have moved the group on)."""
    return {
        t: {p: min(o, end.get(t, {}).get(p, o)) for p, o in parts.items()}
        for t, parts in start.items()
    }


class _Tracker(StreamingQueryListener):
    """Commits each batch's end offsets of the job's inputs to its group; sends the dead
    letters of queries that are not written exactly once; publishes progress."""

    def __init__(self, job: StreamJobContext, spark: SparkSession) -> None:
        self.job, self.session = job, spark
        self.topics = {s.topic for s in job.inputs}
        self.admin = job.deliveries.admin()
        self.publisher = (
            ProgressPublisher(job.bootstrap_servers, job.progress_topic, self.admin.client)
            if job.progress_topic
            else None
        )
        self.position: Offsets = {}
        self.group: Offsets | None = None  # the group's offsets when this process began
        self.sent = 0  # dead letters sent at least once, over the revision's whole run
        self.read: dict[str, Offsets] = {}  # by query id: what was scanned for dead letters

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Nothing to do: the first batch reports the position."""

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Nothing to do: an idle query has not moved."""

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Nothing to do: the last batch was committed when it ended."""

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Send the batch's dead letters (unless its query wrote them in its transaction), then
        commit the batch's end offsets of the job's inputs with the count, then publish."""
        report = json.loads(event.progress.json)
        batch = batch_of(report)
        try:
            self._begin()
            if str(report.get("id")) not in self.job.deliveries.outputs:
                self._send_dead_letters(str(report.get("id")), report, batch)
        except Exception as exc:  # the group stays behind: the range is scanned again later
            print(f"distributary: dead letters not sent, position not committed: {exc}", flush=True)
            self._publish(batch)
            return
        ends = {t: p for t, p in batch.end.items() if t in self.topics}
        if ends:
            count = Marker(dead_letters=self.sent).text()  # the count outlives this process
            try:
                self.admin.commit(self.job.consumer_group, ends, count)
            except KafkaAdminError as exc:
                print(f"distributary: position not committed: {exc}", flush=True)
                return
            self.position = {**self.position, **ends}
        self._publish(batch)

    def _begin(self) -> None:
        """Read the group's offsets and count once per process (the count outlives it)."""
        if self.group is None:
            group = self.job.consumer_group
            self.sent = read_marker(self.admin.committed_metadata(group)).dead_letters
            self.group = self.admin.committed(group)

    def _send_dead_letters(self, query: str, report: Mapping[str, Any], batch: Batch) -> None:
        """The unparseable records of the query's `read_json` inputs since what was scanned
        last (the batch's range, or more after a restart), sent at least once."""
        names = [n for n in report.get("observedMetrics") or {} if n in self.job.deliveries.parsed]
        sources = tuple(self.job.deliveries.parsed[n] for n in names)
        if not sources:
            return
        topics = {s.topic for s in sources}
        known = self.read.get(query)
        if known is None:
            known = _only(self.group or {}, topics)
        ranged = replace(batch, start=_only(batch.start, topics), end=_only(batch.end, topics))
        plan = step(known or None, ranged)
        if plan.scan_from is not None:
            start = _at_most(plan.scan_from, plan.end)
            sent = send_dead_letters(self.session, scan_spec(self.job, sources), start, plan.end)
            self.sent += sent
            if sent:
                topic = self.job.dead_letters_to
                print(f"distributary: {sent} record(s) did not parse; sent to {topic}", flush=True)
        self.read[query] = merge(known, plan.end)

    def _publish(self, batch: Batch) -> None:
        if self.publisher is None:
            return
        identity = {
            "kind": "StreamJob",
            "namespace": self.job.namespace,
            "name": self.job.name,
            "revision": self.job.revision,
            "consumerGroup": self.job.consumer_group,
        }
        record = progress_record(
            identity,
            state="Running",
            batch=batch,
            position=self.position,
            dead_letters=self.sent + self.job.deliveries.dead_letters(),
        )
        key = progress_key("StreamJob", self.job.namespace, self.job.name, self.job.revision)
        self.publisher.publish(key, record)


def track(spark: SparkSession, job: StreamJobContext) -> None:
    """Report the position of every query of `spark` for `job` (once per session)."""
    if getattr(spark, "_distributary_tracked", False):
        return
    spark.streams.addListener(_Tracker(job, spark))
    spark._distributary_tracked = True  # type: ignore[attr-defined]
