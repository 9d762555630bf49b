"""Where checkpoints live, and whether they outlive the driver that wrote them.

A revision's checkpoint holds its positions and its aggregation state. Under the `spark-operator`
runtime each driver is a pod: a `file://` root is that pod's own disk, so a restarted driver
(a lost node, an eviction, the operator's own restart of an ended application) starts on an
empty checkpoint and a stateful view silently loses its state. Such a root is refused, once, for
the whole operator: every view and job is Stalled with what to change, unless the root lies
under a PersistentVolumeClaim mounted into every driver and executor, or node-local checkpoints
are explicitly allowed. Any other scheme (s3a://, gs://, abfss://, hdfs://) is storage outside
the pods and is taken as durable; reaching it is Spark's part (its connector and credentials).
The `local` runtime runs Spark on the operator's own machine, where a path is as durable as that
machine: it is never refused.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from distributary.plan.status.conditions import Problem

NOT_DURABLE = "CheckpointNotDurable"
DEFAULT_MOUNT_PATH = "/var/lib/distributary/checkpoints"
_FIX = (
    "mount a PersistentVolumeClaim into the drivers (the chart's checkpoints.claim values, or "
    "DISTRIBUTARY_CHECKPOINT_CLAIM and DISTRIBUTARY_CHECKPOINT_MOUNT_PATH) with the root under "
    "its mount path, set the root to an object store (s3a://, gs://, abfss://, hdfs://), or "
    "accept losing checkpoints with DISTRIBUTARY_ALLOW_NODE_LOCAL_CHECKPOINTS=true"
)


@dataclass(frozen=True)
class CheckpointClaim:
    """A PersistentVolumeClaim every SparkApplication mounts into its driver and executors."""

    name: str
    """The claim's name; a claim of that name must exist in each namespace of views and jobs."""

    mount_path: str = DEFAULT_MOUNT_PATH
    """Where drivers and executors see it; the checkpoint root lies under it."""


def local_path(root: str) -> str | None:
    """The path of a root on the driver's own file system (`file://...` or a bare path),
    normalised; None for a root on other storage (any other scheme)."""
    parts = urlsplit(root)
    if parts.scheme == "file":
        return posixpath.normpath(parts.path or "/")
    if parts.scheme and len(parts.scheme) > 1:  # "C:" would be a drive, not a scheme
        return None
    return posixpath.normpath(root)


def under(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or inside it (both absolute and normalised)."""
    folder = folder.rstrip("/") or "/"
    return path == folder or path.startswith(folder if folder == "/" else folder + "/")


def checkpoint_problem(
    root: str,
    runtime: Literal["spark-operator", "local"],  # `plan.pipelines.pipeline.SparkRuntime`
    claim: CheckpointClaim | None = None,
    *,
    allow_node_local: bool = False,
) -> Problem | None:
    """Why revisions may not checkpoint under `root` with `runtime`, or None when they may.

    Refused: under `spark-operator`, a root on the driver's own disk that is not under the
    claim's mount path, unless `allow_node_local`."""
    if runtime == "local":
        return None
    if claim is not None and not posixpath.isabs(claim.mount_path):
        return Problem(
            NOT_DURABLE,
            f"the checkpoint claim's mount path {claim.mount_path!r} "
            "(DISTRIBUTARY_CHECKPOINT_MOUNT_PATH) is not an absolute path; set it to the "
            f"folder drivers mount the claim {claim.name!r} at, e.g. {DEFAULT_MOUNT_PATH}",
        )
    path = local_path(root)
    if path is None or allow_node_local:
        return None
    if claim is not None:
        mount = posixpath.normpath(claim.mount_path)
        if under(path, mount):
            return None
        return Problem(
            NOT_DURABLE,
            f"the checkpoint root {root} (chart value checkpoints.root, "
            f"DISTRIBUTARY_CHECKPOINT_ROOT) is not under {mount}, "
            f"where the claim {claim.name!r} is mounted, so it is on each Spark driver's own "
            f"disk and a restarted driver loses its checkpoint and state; set the root under "
            f"the mount path (e.g. file://{mount}), or {_FIX}",
        )
    return Problem(
        NOT_DURABLE,
        f"the checkpoint root {root} (chart value checkpoints.root, "
        "DISTRIBUTARY_CHECKPOINT_ROOT) is on each Spark driver's own disk, so a restarted driver "
        "loses its checkpoint and state; " + _FIX,
    )
