"""A rewind's moves of a consumer group, read from Kafka and carried out on it.

Both front ends rewind through `reconcile.applications.rewind_once`, the same way: read where the
group is and what each partition retains, work out where the rewind puts it
(`plan.positions.rewind_moves`), record that, then commit it while the group's consumer is stopped.
"""

from __future__ import annotations

from typing import Any

from distributary.api.common import Position
from distributary.kafka.admin import KafkaAdmin
from distributary.plan.delivery import carried, read_marker
from distributary.plan.positions import moved_from, rewind_destinations, rewind_moves
from distributary.plan.runner_spec import starting_position


def rewind_offsets(
    admin: KafkaAdmin, group: str, topics: list[str], to: Position
) -> list[dict[str, Any]]:
    """Each partition of `topics`: the group's position now and where the rewind `to` puts it
    (within what the partition retains), as `status.lastRewind.offsets` lists them."""
    start = starting_position(to)
    by_time = (
        admin.offsets_for_time(topics, start.timestamp_ms)
        if start.kind == "timestamp" and start.timestamp_ms is not None
        else {}
    )
    return rewind_moves(
        start.kind,
        admin.committed(group),
        admin.watermarks(topics),
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
