"""A rewind's moves of a consumer group, read from Kafka and carried out on it.

Both front ends rewind through `reconcile.applications.rewind_once`, the same way: read where the
group is and what each partition retains, work out where the rewind puts it
(`plan.revisions.positions.rewind_moves`), record that, then commit it while the group's consumer is
stopped. A rewind to a place the log does not have is refused before any of that
(`plan.applications.position_refusals`): nothing is recorded and nothing moves.
"""

from __future__ import annotations

from typing import Any

from distributary.api.common import Position
from distributary.kafka.admin import KafkaAdmin
from distributary.plan.applications.position_refusals import PositionRefusedError, refused_position
from distributary.plan.applications.runner_spec import StartingPosition, starting_position
from distributary.plan.revisions.delivery import carried, read_marker
from distributary.plan.revisions.positions import moved_from, rewind_destinations, rewind_moves


def rewind_offsets(
    admin: KafkaAdmin,
    group: str,
    topics: list[str],
    to: Position,
    *,
    logs: dict[str, str] | None = None,
    partial_history: bool | None = None,
    field: str = "spec.rewind.to",
) -> list[dict[str, Any]]:
    """Each partition of `topics`: the group's position now and where the rewind `to` puts it,
    as `status.lastRewind.offsets` lists them. `PositionRefusedError` when `to` (the spec's
    `field`) names a place the topics do not have (`plan.applications.position_refusals`, with
    `logs` naming each topic's Log and the spec's `partial_history` allowance): nothing is moved."""
    start = starting_position(to)
    by_time = (
        admin.offsets_for_time(topics, start.timestamp_ms)
        if start.kind == "timestamp" and start.timestamp_ms is not None
        else {}
    )
    watermarks = admin.watermarks(topics)
    refused = refused_position(
        field, start, watermarks, logs or {}, by_time=by_time, partial_history=partial_history
    )
    if refused is not None:
        raise PositionRefusedError(refused)
    return rewind_moves(
        start.kind,
        admin.committed(group),
        watermarks,
        explicit=start.offsets,
        by_time=by_time,
    )


def move_group(
    admin: KafkaAdmin, group: str, moves: list[dict[str, Any]], writer: str | None = None
) -> list[dict[str, Any]]:
    """Set `group`'s offsets to the rewind's targets (its consumer must be stopped). A revision
    that commits its offsets in transactions (`writer`: its transactional id) is fenced first,
    so that no commit of the old process can land after the move and undo it. The group keeps
    its count of dead letters, not its last batch: the next run writes every batch it reads.
    The moves as carried out: each partition's `fromOffset` where the group stood when it moved
    (`positions.moved_from`)."""
    if writer is not None:
        admin.fence(writer)
    moved = moved_from(admin.committed(group), moves)
    marker = carried(read_marker(admin.committed_metadata(group)))
    admin.commit(group, rewind_destinations(moves), marker.text())
    return moved


def refused_start(
    admin: KafkaAdmin,
    field: str,
    start: StartingPosition,
    topic: str,
    log: str,
    partial_history: bool | None = None,
) -> str | None:
    """Why a revision's first start cannot begin at `start` in `topic` (the spec's `field`, e.g.
    `spec.inputs[0].startingPosition`), as `plan.applications.position_refusals` says it; None when
    it can. Kafka is asked only about positions it can refuse (offsets and times)."""
    if start.kind not in ("offsets", "timestamp"):
        return None
    by_time = (
        admin.offsets_for_time([topic], start.timestamp_ms)
        if start.kind == "timestamp" and start.timestamp_ms is not None
        else {}
    )
    watermarks = admin.watermarks([topic])
    return refused_position(
        field, start, watermarks, {topic: log}, by_time=by_time, partial_history=partial_history
    )
