"""The state folder's status store: what `distributary run` keeps of each view and job.

Under the operator a view's status lives in the API server; here it lives in
`<state dir>/revisions.json`, the same status (revisions and their rows, positions, conditions,
the last change's classification, the last rewind, the write-ahead record) written by the same
reconcile (`reconcile.view`, `reconcile.job`) through a `StatusStore` kept in this file. Each write
replaces the file atomically, so a run killed at any point leaves the last record whole, and the
next run carries on from it as a restarted operator does.

What the API server gives the operator and files do not, is made here:
- a generation: the spec each resource was last seen with is kept, and a different one in the
  files counts as an edit (generation + 1, classified against the spec it replaces), as an update
  event does under the operator;
- the spec that runs (`view`): a refused edit is not what runs, so the next run compares with what
  does;
- for people reading the file and the summary: `problem`, the refused change (reason, message),
  and `rewinds`, every rewind carried out, by request id.

    {"views": {"default/enriched": {"view": {...}, "seen": {...spec...}, "generation": 2,
      "status": {"servingRevision": 1, "revisions": [...], "conditions": [...], ...}}},
     "jobs": {"default/sessionize": {...}}}
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distributary.api.job import StreamJob
from distributary.api.view import DerivedView
from distributary.local.state import RunStateError
from distributary.plan.applications.restarts import APPLICATION_FAILING
from distributary.plan.applications.spark_state import QUERY_REFUSED
from distributary.plan.revisions.lifecycle import CATCHING_UP
from distributary.plan.status.conditions import suspension
from distributary.plan.status.status_patch import changes, merged

REVISIONS_FILE = "revisions.json"
SECTIONS = {"DerivedView": "views", "StreamJob": "jobs"}
# A change the reconcile refused: what runs is the spec before it.
REFUSALS = ("ChangeForbidden", "ReprocessRequired", "HistoryIncomplete")

Resource = DerivedView | StreamJob


def resource_key(resource: Resource) -> str:
    """The key of a view or job in the file: `namespace/name`."""
    return f"{resource.metadata.namespace}/{resource.metadata.name}"


def _spec(resource: Resource) -> dict[str, Any]:
    return resource.model_dump(mode="json", by_alias=True, exclude_none=True)["spec"]  # type: ignore[no-any-return]


@dataclass
class LocalRevisions:
    """The status of every view and job of a run, kept in the state folder."""

    state_dir: Path
    views: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, state_dir: Path) -> LocalRevisions:
        """The statuses recorded in `state_dir` (none for a first run). Raises `RunStateError`
        naming the file and the fix when it cannot be read."""
        path = state_dir / REVISIONS_FILE
        try:
            data = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            return cls(state_dir)
        except (OSError, ValueError) as exc:
            raise _unreadable(path, str(exc)) from None
        sections = [data.get(s) or {} for s in ("views", "jobs")] if isinstance(data, dict) else []
        if not sections or not all(isinstance(s, dict) for s in sections):
            raise _unreadable(path, 'it is not {"views": {...}, "jobs": {...}}')
        return cls(state_dir, dict(sections[0]), dict(sections[1]))

    def save(self) -> None:
        """Write the file atomically (a temporary file renamed over it)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=self.state_dir, prefix=".revisions.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"views": self.views, "jobs": self.jobs}, out, indent=1, sort_keys=True)
            os.replace(temporary, self.state_dir / REVISIONS_FILE)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def section(self, kind: str) -> dict[str, dict[str, Any]]:
        """The entries of views or of jobs."""
        return self.views if kind == "DerivedView" else self.jobs

    def read(self, resource: Resource) -> tuple[dict[str, Any], Any]:
        """The resource as the reconcile reads it (its spec from the files, its generation and
        status from here) and, when the files hold an edit not reconciled yet, the spec it
        replaces (an update's old spec)."""
        entries = self.section(resource.kind)
        key = resource_key(resource)
        spec = _spec(resource)
        entry = entries.setdefault(key, {"generation": 1, "seen": spec, "status": {}})
        if "seen" not in entry:  # recorded before specs were kept as seen: the one that ran
            entry["seen"] = (entry.get("view") or {}).get("spec")
        if entry.get("seen") != spec:
            entry["changedFrom"] = entry.get("seen")
            entry["generation"] = int(entry.get("generation") or 1) + 1
            entry["seen"] = spec
        meta = resource.metadata
        body = {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {
                "name": meta.name,
                "namespace": meta.namespace,
                "uid": f"local:{key}",
                "generation": entry["generation"],
            },
            "spec": spec,
            "status": dict(entry.get("status") or {}),
        }
        return body, entry.get("changedFrom")

    def store(self, resource: Resource) -> LocalStatus:
        """The status store of `resource` (read it with `read` first)."""
        return LocalStatus(self, resource)

    def status(self, kind: str, key: str) -> dict[str, Any]:
        """The status recorded for the view or job `key` (`namespace/name`)."""
        return dict((self.section(kind).get(key) or {}).get("status") or {})

    def catching_up(self) -> list[str]:
        """The views with a revision catching up (not one whose query Spark refused, one
        whose application keeps failing, nor one suspended: none catches up by waiting)."""
        refused = set(self.query_refused()) | set(self.keep_failing("DerivedView"))
        refused |= set(self.suspended("DerivedView"))
        return sorted(
            key
            for key, entry in self.views.items()
            if key not in refused
            and any(
                r.get("phase") == CATCHING_UP
                for r in (entry.get("status") or {}).get("revisions") or []
            )
        )

    def query_refused(self) -> dict[str, str]:
        """The views whose running revision's query Spark refused at start, with the message."""
        return _stalled(self.views, QUERY_REFUSED)

    def keep_failing(self, kind: str) -> dict[str, str]:
        """The views or jobs (`kind`) whose Spark application failed again and again (Stalled,
        `ApplicationFailing`: retried only at the longest back-off), with the message."""
        return _stalled(self.section(kind), APPLICATION_FAILING)

    def suspended(self, kind: str) -> dict[str, str]:
        """The views or jobs (`kind`) suspended on purpose (`spec.suspend`: Ready False with
        reason Suspended), with the message."""
        found = {
            key: suspension(entry.get("status") or {}) for key, entry in self.section(kind).items()
        }
        return {key: message for key, message in found.items() if message is not None}


def _stalled(entries: Mapping[str, Mapping[str, Any]], reason: str) -> dict[str, str]:
    """The entries whose status is Stalled for `reason`, with the condition's message."""
    found = {}
    for key, entry in entries.items():
        for condition in (entry.get("status") or {}).get("conditions") or []:
            stalled = condition.get("type") == "Stalled" and condition.get("status") == "True"
            if stalled and condition.get("reason") == reason:
                found[key] = str(condition.get("message") or "")
    return found


def refused(status: Mapping[str, Any]) -> dict[str, str] | None:
    """The change the status says was refused (reason and message), None when none was."""
    for condition in status.get("conditions") or []:
        stalled = condition.get("type") == "Stalled" and condition.get("status") == "True"
        if stalled and condition.get("reason") in REFUSALS:
            return {"reason": condition["reason"], "message": condition.get("message") or ""}
    return None


@dataclass
class LocalStatus:
    """One view's or job's status in the state folder (the `StatusStore` of `reconcile.ports`):
    each write is merged into its entry and the file is saved at once."""

    revisions: LocalRevisions
    resource: Resource

    @property
    def _entry(self) -> dict[str, Any]:
        return self.revisions.section(self.resource.kind)[resource_key(self.resource)]

    @property
    def status(self) -> dict[str, Any]:
        """The status as recorded, with this reconcile's writes."""
        return dict(self._entry.get("status") or {})

    async def record_ahead(self, record: Mapping[str, Any]) -> None:
        """Record what is about to be done; saved before it is."""
        self._write(record)

    async def finish(self, status: Mapping[str, Any]) -> bool:
        """Record the reconcile's status: the edit it saw is handled now."""
        entry = self._entry
        written = changes(entry.get("status") or {}, status) or "changedFrom" in entry
        entry.pop("changedFrom", None)
        if written:
            self._write(status)
        return bool(written)

    def _write(self, update: Mapping[str, Any]) -> None:
        entry = self._entry
        status = merged(entry.get("status") or {}, update)
        last = status.get("lastRewind")
        if last:  # every rewind carried out, by request id, for people and the summary
            kept = [r for r in status.get("rewinds") or [] if r["requestId"] != last["requestId"]]
            status["rewinds"] = [*kept, dict(last)]
        problem = refused(status)
        status.pop("problem", None)
        if problem is not None:
            status["problem"] = problem
        if problem is None or "view" not in entry:  # what runs: the spec the files hold now
            entry["view"] = self.resource.model_dump(mode="json", by_alias=True, exclude_none=True)
        entry["status"] = status
        self.revisions.save()


def _unreadable(path: Path, why: str) -> RunStateError:
    return RunStateError(
        f"{path} cannot be read ({why}): delete it to start every view at revision 1 again "
        "(their outputs are recomputed)"
    )
