"""The run-state file: what a running `distributary run` tells the other commands.

`distributary run` writes `<state dir>/run.json` while it runs, and rewrites it when a log's
serving topic moves to a new revision; `produce` and `tail` read it to find the broker, the
pipeline files and each log's serving topic without being told again. The file is replaced
atomically (a temporary file renamed over it), so a reader never sees half of it. A run that has
ended leaves the file behind with a pid that no longer runs: `alive()` tells the two apart, and
the serving topics it names are still where the data is. Each view's entry says which revision
serves, why a change of it was refused (when one was) and which rewind requests were carried out.

    {"bootstrapServers": "127.0.0.1:9092", "paths": ["/abs/examples/clickstream"], "pid": 4242,
     "logs": {"page-views": {"topic": "page-views", "namespace": "default"}},
     "views": {"enriched-page-views": {"namespace": "default", "servingRevision": 1,
       "problem": {"reason": "HistoryIncomplete", "message": "..."}, "rewinds": ["replay-1"]}}}
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distributary.errors import DistributaryError
from distributary.plan.status.status_patch import changes, merged

DEFAULT_STATE_DIR = Path(".distributary")
RUN_STATE_FILE = "run.json"


class RunStateError(DistributaryError, RuntimeError):
    """A file of the state folder (run.json, revisions.json) is missing or cannot be read; the
    message names it and says what to do."""


@dataclass(frozen=True)
class ServedLog:
    """Where a log is read from while the pipeline runs."""

    topic: str
    namespace: str = "default"


@dataclass(frozen=True)
class RunState:
    """The contents of `run.json`: the broker, the pipeline files, the run's pid, the logs."""

    bootstrap_servers: str
    paths: tuple[str, ...] = ()
    pid: int = field(default_factory=os.getpid)
    logs: Mapping[str, ServedLog] = field(default_factory=dict)
    views: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def alive(self) -> bool:
        """Whether the process that wrote this state still runs."""
        return pid_alive(self.pid)

    def serving_topic(self, log: str, namespace: str = "default") -> str | None:
        """The topic a log is served from, or None when the run did not record it."""
        served = self.logs.get(log)
        return served.topic if served is not None and served.namespace == namespace else None

    def to_json(self) -> dict[str, Any]:
        """The state as the JSON object written to `run.json` (`views` only when there are)."""
        found: dict[str, Any] = {
            "bootstrapServers": self.bootstrap_servers,
            "paths": list(self.paths),
            "pid": self.pid,
            "logs": {
                name: {"topic": served.topic, "namespace": served.namespace}
                for name, served in sorted(self.logs.items())
            },
        }
        if self.views:
            found["views"] = {name: dict(view) for name, view in sorted(self.views.items())}
        return found

    @classmethod
    def from_json(cls, data: object) -> RunState:
        """The state from a parsed `run.json`; ValueError naming the field when it is wrong."""
        if not isinstance(data, dict):
            raise ValueError("is not a JSON object")
        servers, paths, pid = data.get("bootstrapServers"), data.get("paths", []), data.get("pid")
        if not isinstance(servers, str) or not servers:
            raise ValueError("bootstrapServers: is missing or not a string")
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ValueError("paths: is not a list of file names")
        if not isinstance(pid, int) or isinstance(pid, bool):
            raise ValueError("pid: is missing or not a number")
        views = data.get("views", {})
        if not isinstance(views, dict) or not all(isinstance(v, dict) for v in views.values()):
            raise ValueError("views: is not an object of view names")
        return cls(servers, tuple(paths), pid, _served_logs(data.get("logs", {})), views)


def _served_logs(logs: object) -> dict[str, ServedLog]:
    if not isinstance(logs, dict):
        raise ValueError("logs: is not an object of log names")
    served: dict[str, ServedLog] = {}
    for name, entry in logs.items():
        topic = entry.get("topic") if isinstance(entry, dict) else None
        namespace = entry.get("namespace", "default") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not isinstance(namespace, str):
            raise ValueError(f"logs.{name}: needs a topic and a namespace (strings)")
        served[name] = ServedLog(topic, namespace)
    return served


def run_state_path(state_dir: Path) -> Path:
    """Where the run-state file of a state folder is."""
    return state_dir / RUN_STATE_FILE


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs (and may be signalled by someone)."""
    if pid <= 0:
        return False  # 0 and negatives name process groups, not a process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_json(path: Path, data: Any, *, sort_keys: bool = True) -> None:
    """Write a state-folder file atomically (a temporary file renamed over it): a run killed
    at any moment leaves the old file or the new one, whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2, sort_keys=sort_keys)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_run_state(state_dir: Path, state: RunState) -> Path:
    """Write `run.json` atomically; return its path."""
    path = run_state_path(state_dir)
    write_json(path, state.to_json(), sort_keys=False)
    return path


def read_run_state(state_dir: Path) -> RunState:
    """The state in `run.json`, or RunStateError saying it is missing or what is wrong with it."""
    path = run_state_path(state_dir)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise RunStateError(
            f"{path} does not exist: no `distributary run` has used the state folder "
            f"{state_dir}; start one, or pass --state-dir for the folder it uses"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunStateError(f"{path} cannot be read: {exc}") from None
    try:
        return RunState.from_json(json.loads(text))
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise RunStateError(
            f"{path} is corrupt ({exc}): delete it and start `distributary run` again"
        ) from None


def find_run_state(state_dir: Path) -> RunState | None:
    """The state in `run.json`, None when there is none; RunStateError when it is corrupt."""
    if not run_state_path(state_dir).exists():
        return None
    return read_run_state(state_dir)


@dataclass
class StatusFile:
    """The statuses of one kind's resources in a file of the state folder, by
    `namespace/name`; `store(key)` is one resource's `StatusStore` (`reconcile.ports`). Each
    write replaces the file whole (`write_json`)."""

    path: Path
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> StatusFile:
        """The file as a run left it (empty when there is none); RunStateError when it cannot
        be read."""
        try:
            data = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            return cls(path)
        except (OSError, ValueError) as exc:
            raise RunStateError(
                f"{path} cannot be read ({exc}): move it away, and the statuses are made anew"
            ) from None
        return cls(
            path, {str(k): dict(v) for k, v in data.items()} if isinstance(data, dict) else {}
        )

    def store(self, key: str) -> FileStatus:
        """The status store of the resource `key` (`namespace/name`)."""
        return FileStatus(self, key)

    def write(self, key: str, status: Mapping[str, Any]) -> None:
        """Replace the resource's status and save the file."""
        self.statuses[key] = dict(status)
        write_json(self.path, self.statuses)


class MergedStatus:
    """A `StatusStore` (`reconcile.ports`) over a status kept in the state folder: `status` as
    recorded, `write` merges an update into it and saves it. A run is the only writer of its
    state folder, so nothing is refused as changed since it was read."""

    @property
    def status(self) -> dict[str, Any]:
        """The status as recorded."""
        raise NotImplementedError

    def write(self, update: Mapping[str, Any]) -> None:
        """Merge `update` into the status and save it."""
        raise NotImplementedError

    async def record_ahead(self, record: Mapping[str, Any]) -> None:
        """Record what is about to be done; saved before it is."""
        self.write(record)

    async def finish(self, status: Mapping[str, Any]) -> bool:
        """Record the reconcile's status where it changes something."""
        if not changes(self.status, status):
            return False
        self.write(status)
        return True


@dataclass
class FileStatus(MergedStatus):
    """One resource's status in a `StatusFile`."""

    file: StatusFile
    key: str

    @property
    def status(self) -> dict[str, Any]:
        """The status as recorded."""
        return dict(self.file.statuses.get(self.key) or {})

    def write(self, update: Mapping[str, Any]) -> None:
        """Merge `update` into the status and save the file."""
        self.file.write(self.key, merged(self.status, update))
