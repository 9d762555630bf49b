"""Why a revision's driver pod never starts, read from the pod as the kubelet left it.

Under the `spark-operator` runtime the Spark operator makes the driver pod and reports only
SUBMITTED until it runs; when the cluster cannot start it (a Secret the pod references is missing
in its namespace, an image that cannot be pulled, no node that fits it) nothing else changes and
nobody is told. The kubelet says why on the pod: a container waiting with a reason and message,
or the scheduler's `PodScheduled` condition False with reason `Unschedulable`. This module turns
that into one problem naming the revision, the pod, what the cluster said and what to do. Only
the reasons that never go away by themselves count: a container still being created, or a pod
not made yet, is the normal start. The cluster must be fixed, not the application, so nothing is
restarted because of it, and the problem goes once the pod runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from distributary.plan.status.conditions import Problem

DRIVER_NOT_STARTING = "DriverNotStarting"
SECRET_MISSING = re.compile(r'secrets? "([^"]+)" not found')
KEY_MISSING = re.compile(r"couldn't find key (\S+) in Secret (\S+)/(\S+)")
IMAGE_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName"})
CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError"})
_LONGEST_SAID = 300  # characters of the kubelet's message kept in the condition


def driver_not_starting(pod: Mapping[str, Any] | None, revision: int) -> Problem | None:
    """The problem (reason `DriverNotStarting`) when the driver pod `pod` of `revision` cannot
    start: a container of it waits for one of the reasons above, or it cannot be scheduled.
    None for a pod that runs, is still starting, or does not exist yet."""
    if pod is None:
        return None
    meta = pod.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    found = _waiting(status) or _unschedulable(status)
    if found is None:
        return None
    reason, said = found
    fix = _fix(reason, said, namespace, name, pod.get("spec") or {})
    return Problem(
        DRIVER_NOT_STARTING,
        f"revision {revision}'s driver pod {namespace}/{name} does not start: {reason}"
        + (f": {said}" if said else "")
        + f"; {fix}; the SparkApplication is left as it is and the revision starts once the "
        "pod can",
    )


def _waiting(status: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first (reason, message) of an init or main container waiting for good."""
    containers = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    for container in containers:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason in IMAGE_REASONS or reason in CONFIG_REASONS:
            return reason, _one_line(waiting.get("message"))
    return None


def _unschedulable(status: Mapping[str, Any]) -> tuple[str, str] | None:
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return "Unschedulable", _one_line(condition.get("message"))
    return None


def _one_line(text: Any) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= _LONGEST_SAID else line[: _LONGEST_SAID - 3] + "..."


def _fix(reason: str, said: str, namespace: str, name: str, spec: Mapping[str, Any]) -> str:
    """What to do about `reason` (the kubelet's `said`) for pod `name` in `namespace`."""
    if secret := SECRET_MISSING.search(said):
        return (
            f"create Secret {secret.group(1)} in namespace {namespace}: every namespace with "
            "views or jobs needs the Kafka Secrets the operator names "
            "(DISTRIBUTARY_KAFKA_*_SECRET, the chart's kafka.* Secrets)"
        )
    if key := KEY_MISSING.search(said):
        return f"add the key {key.group(1)} to Secret {key.group(3)} in namespace {key.group(2)}"
    if reason in IMAGE_REASONS:
        images = sorted({str(c.get("image")) for c in spec.get("containers") or []})
        account = spec.get("serviceAccountName") or "default"
        return (
            f"check the image {', '.join(images) or '(none)'} (a job's spec.image, a view's "
            "spec.spark.image, else the operator's --image, the chart's spark.jobImage) and "
            f"the image pull secrets of service account {account} in namespace {namespace}"
        )
    if reason == "Unschedulable":
        return (
            "no node can take it: lower spec.spark.driver's cores or memory, or give the "
            "cluster room for it"
        )
    return f"see `kubectl describe pod -n {namespace} {name}`"
