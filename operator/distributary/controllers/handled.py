"""What the operator last handled of each resource: kopf's record of it, kept without a write.

kopf compares each object it sees with the configuration its handlers last handled, to tell a
creation, an edit (with the spec the edit replaced, which classifies it: "arguments changed" or
a new revision) and nothing new. By default it records that configuration in an annotation, and
marks the object as handled by a kopf operator in another: a PATCH of every object after each
handling, and a watch event back to the operator for each. When a thousand Logs are applied at
once that was a quarter of every request the operator made, and `bench/controlplane` waited on
it. Here:

- kopf's record lives in memory while the operator runs (`HandledSpecs`, kopf's diff base), so
  kopf's own decisions (creation, edit, retry of a handler that asked to be run again) are the
  same as with the annotation;
- each reconcile that finishes writes the spec it carried out into the status it writes anyway
  (`status.handledSpec`, compact JSON, through `StatusRecorder`): an operator that starts, or
  that has let a quiet object's record go from memory, compares the object with that, so an edit
  made while no operator ran is still classified against the spec it replaced;
- an object last handled by a version that wrote kopf's annotation is compared with the
  annotation until its next reconcile writes `handledSpec`;
- kopf's progress of a handler that is retried stays in annotations (`ProgressRecords`), and so
  does kopf's mark that tells other kopf operators those annotations are not theirs to handle;
  that mark is no longer written alone when nothing of kopf's stays on the object.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

import kopf

# Where earlier versions let kopf record the configuration it last handled.
DIFFBASE_PREFIX, DIFFBASE_KEY = "distributary.dev", "last-handled-configuration"
LAST_HANDLED = f"{DIFFBASE_PREFIX}/{DIFFBASE_KEY}"
HANDLED_FIELD = "handledSpec"
KEEP_SECONDS = 3600.0  # a record in memory neither read nor written for this long is let go
PRUNE_EVERY = 1000  # records stored between two looks for records to let go


def handled_text(spec: Any) -> str:
    """`spec` as `status.handledSpec` holds it: compact JSON, keys sorted."""
    return json.dumps(spec, separators=(",", ":"), sort_keys=True)


def recorded_spec(body: Mapping[str, Any]) -> Any:
    """The spec the last finished reconcile of `body` carried out (`status.handledSpec`), else
    the one kopf's annotation recorded (an earlier version's), else None."""
    status = body.get("status")
    text = status.get(HANDLED_FIELD) if isinstance(status, Mapping) else None
    if not isinstance(text, str) or not text:
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        text = annotations.get(LAST_HANDLED)
        if not isinstance(text, str) or not text:
            return None
        try:
            found = json.loads(text)
        except ValueError:
            return None
        return found.get("spec") if isinstance(found, dict) else None
    try:
        return json.loads(text)
    except ValueError:
        return None


class HandledSpecs(kopf.AnnotationsDiffBaseStorage):
    """kopf's diff base: in memory, else as the object's status (or an earlier version's
    annotation) says when kopf first asks for it in this process. Nothing is written to the
    object for it.

    What kopf is told first is kept until kopf stores a new record: a new object's record stays
    "nothing handled" while its creation handler is retried, though the handler's reconcile
    has written `handledSpec` meanwhile (else kopf would take the retry for no change at all)."""

    def __init__(self) -> None:
        super().__init__(prefix=DIFFBASE_PREFIX, key=DIFFBASE_KEY)
        self._memory: dict[str, tuple[Any, float]] = {}  # uid -> (essence or None, last use)
        self._lock = threading.Lock()
        self._uses = 0  # records made (`_used`)

    def fetch(self, *, body: kopf.Body) -> Any:
        """What kopf last handled of `body` (None: nothing, the object is new to it)."""
        uid = body.metadata.uid
        found, kept = self._kept(body)
        if found:
            return kept
        spec = recorded_spec(body)
        essence = None
        if spec is not None:
            essence = self.build(body=body)
            essence["spec"] = spec
        if uid:
            with self._lock:
                self._memory.setdefault(uid, (essence, time.monotonic()))
                self._used()
        return essence

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        """Remember what kopf has just handled; the object is not patched for it."""
        uid = body.metadata.uid
        if not uid:
            return
        with self._lock:
            self._memory[uid] = (essence, time.monotonic())
            self._used()

    def replaced_spec(self, body: Mapping[str, Any]) -> Any:
        """The spec an edit of `body` replaced while kopf's update handler has not handled the
        edit yet; None when no edit is pending or nothing is recorded."""
        found, kept = self._kept(body)
        if found:
            spec = kept.get("spec") if isinstance(kept, Mapping) else None
        else:
            spec = recorded_spec(body)
        return spec if spec is not None and spec != body.get("spec") else None

    def _used(self) -> None:
        """Count a record made; every `PRUNE_EVERY`, let go of those unused for `KEEP_SECONDS`
        (deleted objects', and quiet ones', which status answers for). Called under the lock."""
        self._uses += 1
        if self._uses % PRUNE_EVERY:
            return
        now = time.monotonic()
        for key in [key for key, (_, at) in self._memory.items() if now - at > KEEP_SECONDS]:
            del self._memory[key]

    def _kept(self, body: Mapping[str, Any]) -> tuple[bool, Any]:
        """Whether kopf's record of `body` is held, and the record (None: nothing handled)."""
        uid = (body.get("metadata") or {}).get("uid")
        if not uid:
            return False, None
        with self._lock:
            kept = self._memory.get(uid)
            if kept is None:
                return False, None
            self._memory[uid] = (kept[0], time.monotonic())
            return True, kept[0]


class ProgressRecords(kopf.AnnotationsProgressStorage):
    """kopf's progress of handlers in annotations, as kopf keeps it, without kopf's mark
    (`<prefix>/kopf-managed`) left behind alone: a handler that succeeds at once leaves the
    object as it was, and kopf then makes no request for it."""

    def __init__(self) -> None:
        super().__init__(prefix=DIFFBASE_PREFIX)

    def purge(self, *, key: Any, body: kopf.Body, patch: kopf.Patch) -> None:
        super().purge(key=key, body=body, patch=patch)
        metadata = patch.get("metadata")
        if not isinstance(metadata, dict):
            return
        annotations = metadata.get("annotations")
        if not isinstance(annotations, dict):
            return
        mark = f"{self.prefix}/kopf-managed"
        if mark not in annotations or mark in (body.metadata.annotations or {}):
            return
        if any(name != mark for name in annotations):  # kopf leaves other records: marked
            return
        del annotations[mark]
        if not annotations:
            del metadata["annotations"]
        if not metadata:
            del patch["metadata"]


HANDLED = HandledSpecs()  # the operator's one record (`main._configure` gives it to kopf)
