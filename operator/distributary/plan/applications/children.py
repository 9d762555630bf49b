"""What a reconcile compares and names about the children it makes, whatever their kind: whether
an object already holds a manifest (so applying it again would change nothing), and the fresh
checkpoint folder a rewind gives a revision."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from distributary.plan.applications.runner_spec import RunnerSpec


def holds(current: Any, manifest: Any) -> bool:
    """Whether the object `current` (as the API server has it) already holds everything
    `manifest` sets, so that applying it again would change nothing: each key of a mapping
    with an equal value, lists and scalars equal. What the server adds (defaults, status,
    other managers' fields) does not count."""
    if isinstance(manifest, Mapping):
        return isinstance(current, Mapping) and all(
            key in current and holds(current[key], value) for key, value in manifest.items()
        )
    return bool(current == manifest)


def with_checkpoint(runner: RunnerSpec, folder: str | None) -> RunnerSpec:
    """`runner` checkpointing in `folder` under its revision's checkpoint (a rewind's fresh
    checkpoint), or as it is without one."""
    if not folder:
        return runner
    location = f"{runner.checkpoint_location.rstrip('/')}/{folder}"
    return runner.model_copy(update={"checkpoint_location": location})


def rewind_folder(request_id: str) -> str:
    """The checkpoint folder of rewind `request_id`."""
    return f"rewind-{request_id}"
