"""A Source's revisions acted on, for `reconcile.source`: each live revision's next step from its
connector's committed offsets and its slot, its topics made, its connector kept as the spec says
(a failed one restarted after the restart policy's back-off, the memory of it in
`Services.memory`, since Connect keeps no history of restarts), and the retirement of revisions
the rows, already written, say are Retiring. Blocking: each is called from a thread.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from distributary.api.log import Log
from distributary.api.source import Source
from distributary.backends.base import CaptureReading
from distributary.backends.connect import Connectors
from distributary.plan.applications.restarts import PartRestarts
from distributary.plan.kafka_topics.topics import DesiredTopic, desired_topic
from distributary.plan.pipelines.pipeline import revision_topic
from distributary.plan.sources.source_plan import (
    HEARTBEAT_RETENTION_MS,
    ConnectorState,
    connector_name,
    heartbeat_topic,
)
from distributary.plan.sources.source_revisions import (
    CATCHING_UP,
    RETIRING,
    SERVING,
    CapturePosition,
    RevisionStep,
    capture_position,
    revision_step,
)
from distributary.plan.sources.source_revisions import retired as retired_rows
from distributary.plan.status.conditions import Problem
from distributary.reconcile.ports import Events, Services


def epoch_refused(source: Source, connectors: Connectors) -> list[Problem]:
    """A raised epoch where the connectors' offsets cannot be listed (kept to the end: the
    connector is kept as before meanwhile)."""
    if source.spec.snapshot.epoch == 0 or connectors.lists_offsets:
        return []
    return [Problem("ResnapshotUnsupported", (
        f"spec.snapshot.epoch: is {source.spec.snapshot.epoch}, but {connectors.where} does "
        "not list the connectors' offsets (a KafkaConnector of kafka.strimzi.io/v1 does), "
        "so a new snapshot taken beside the serving one could never be known to have caught "
        "up: set it back, upgrade Strimzi, or delete and re-apply the Source to snapshot "
        "its tables again"
    ))]  # fmt: skip


def live(recorded: list[dict[str, Any]]) -> list[int]:
    """The revisions whose connectors run, as status recorded them (revision 1 at first)."""
    found = [int(r["revision"]) for r in recorded if r.get("phase") in (SERVING, CATCHING_UP)]
    return sorted(found) or [1]


def serving_revision(recorded: list[dict[str, Any]]) -> int:
    return next((int(r["revision"]) for r in recorded if r.get("phase") == SERVING), 1)


def next_step(
    services: Services,
    source: Source,
    logs: Mapping[str, Log],
    recorded: list[dict[str, Any]],
    reading: CaptureReading,
) -> RevisionStep:
    """The revisions' next step (`plan.sources.source_revisions`) from each live connector's
    committed offsets and its slot: a new revision beside the serving one when the epoch was raised
    or a snapshot was interrupted, a cutover once it has caught up, a revision to retire."""
    connectors = services.connectors
    assert connectors is not None
    namespace = source.metadata.namespace
    positions: dict[int, CapturePosition | None] = {}
    slots: dict[int, int | None] = {}
    restarted = set()
    for revision, (slot, _) in reading.readings.items():
        connector = connector_name(source, revision)
        positions[revision] = capture_position(connectors.offsets(connector, namespace))
        slots[revision] = slot.confirmed if slot.exists else None
        if connector in services.memory.restarted:
            restarted.add(revision)
            services.memory.restarted.discard(connector)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    step = revision_step(source, logs, recorded, positions, now, slots, restarted)
    if connectors.lists_offsets:
        return step
    # Without offsets no revision could be known to have caught up: revision 1 serves on, and
    # an interrupted snapshot is only said (`STRIMZI_INTERRUPTED`).
    first = tuple(r for r in step.rows if r["revision"] == 1)
    return RevisionStep(first, 1, None, (), False, step.problem)


def run_connector(
    services: Services,
    events: Events,
    source: Source,
    revision: int,
    config: Mapping[str, str],
    owner: Mapping[str, Any],
) -> ConnectorState | None:
    """Keep a revision's connector as the spec says (running or paused), a failed one restarted
    after the restart policy's back-off; its state."""
    connectors = services.connectors
    assert connectors is not None
    namespace = source.metadata.namespace
    connector = connector_name(source, revision)
    connectors.apply(connector, config, source.spec.paused, owner, namespace)
    state = connectors.state(connector, namespace)
    key = f"{namespace}/{connector}"
    if state is not None and state.failed:
        restarts = services.memory.restarts.setdefault(key, PartRestarts())
        delay, now = restarts.failed(time.monotonic(), services.restart_policy)
        if delay is not None:
            why = state.reason or "no reason given"
            events.warn("ConnectorFailed", f"The connector {connector} failed ({why}); "
                                           f"restarting it in {delay:.0f}s")  # fmt: skip
        elif now:
            connectors.restart(connector, namespace)
            services.memory.restarted.add(connector)
    elif state is not None and state.running:
        services.memory.restarts.pop(key, None)
    return state


def retire(
    services: Services, events: Events, source: Source, password: str, step: RevisionStep
) -> tuple[dict[str, Any], ...]:
    """Retire the revisions the rows (written ahead) say are Retiring: the connector deleted,
    the slot and publication dropped; their topics stay. The rows after."""
    connectors, captures = services.connectors, services.captures
    assert connectors is not None
    assert captures is not None
    namespace = source.metadata.namespace
    rows = step.rows
    for revision in step.retire:
        if not any(r["revision"] == revision and r.get("phase") == RETIRING for r in rows):
            continue
        connector = connector_name(source, revision)
        connectors.delete(connector, namespace)
        services.memory.restarts.pop(f"{namespace}/{connector}", None)
        dropped = captures.drop(source, password, revision)
        rows = retired_rows(rows, revision)
        what = " and ".join(dropped) if dropped else "nothing left to drop"
        events.info("Retired", f"Revision {revision} retired: its connector deleted, {what} "
                               "dropped; its topics stay")  # fmt: skip
    return rows


def make_revision_topics(
    services: Services, source: Source, logs: Mapping[str, Log], revision: int
) -> None:
    """Make a revision's heartbeat topic (one partition, an hour kept) and, for a revision
    after the first, its table topics as its Logs' own (compacted, keyed, as many partitions),
    unless they were made: a heartbeat sent to a topic that does not exist holds the
    connector's Kafka transaction open, and readers at read_committed then see none of its
    changes. Revision 1 writes the topics its Logs make."""
    heartbeat = heartbeat_topic(source, revision)
    if heartbeat in services.memory.made or services.make_topics is None:
        return
    retention = {"retention.ms": str(HEARTBEAT_RETENTION_MS)}
    wanted = [DesiredTopic(heartbeat, 1, None, retention)]
    if revision > 1:
        wanted += [desired_topic(log, topic=revision_topic(log, revision)) for log in logs.values()]
    services.make_topics(wanted)
    services.memory.made.add(heartbeat)
