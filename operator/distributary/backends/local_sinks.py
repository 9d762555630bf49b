"""Sinks' processes on the operator's own machine: the `SinkRuntime` of the `local` runtime.

Each Sink's process (`python -m distributary.sinks`) runs as the local runtime runs revisions
(`backends.local_spark.LocalRuntime`: a folder of its own with its spec, pid and log, found again
by an operator that restarts). The store's password is read from its Secret through `secret` and
written where only the process reads it (0600, in the Sink's own folder, as a kubelet mounts a
Secret), never into the spec.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from distributary.api.sink import Sink
from distributary.api.source import SecretKey
from distributary.backends.base import RevisionApp
from distributary.backends.local_spark import LocalApplication, LocalRuntime
from distributary.plan.applications.spark_state import AppState
from distributary.plan.sinks.sink_plan import SinkRun

SecretValue = Callable[[str, SecretKey, str], str]
"""The value of a Secret's key in a namespace (the last argument names the field, for the error);
raises `SecretMissingError`."""


@dataclass
class LocalSinkProcesses:
    """Runs each Sink's process under `local`'s state folder."""

    local: LocalRuntime
    secret: SecretValue

    def last_run(self, namespace: str, name: str) -> SinkRun | None:
        """The spec the Sink's process was last given (None: none yet)."""
        try:
            text = self.local.sink(namespace, name).spec_file.read_text("utf-8")
            return SinkRun.model_validate_json(text)
        except (OSError, ValueError):
            return None

    def sink_app(self, sink: Sink, run: SinkRun, owner: Mapping[str, Any]) -> RevisionApp:
        """The Sink's process running `run`, its password in a file beside it."""
        namespace, name = sink.metadata.namespace, sink.metadata.name
        app = self.local.sink(namespace, name)
        run = run.model_copy(update={"password_file": self._password_file(sink, app)})

        def start() -> AppState:
            return self.local.ensure_sink(run)

        def remove() -> None:
            self.local.stop(app)
            app.pid_file.unlink(missing_ok=True)  # no process, rather than one that ended

        return RevisionApp(
            namespace, f"{name}-sink", lambda: self.local.state_of(app), start, remove
        )

    def stop(self, namespace: str, name: str) -> None:
        """Stop the Sink's process (it finishes its transaction)."""
        self.local.stop(self.local.sink(namespace, name))

    def _password_file(self, sink: Sink, app: LocalApplication) -> str | None:
        store = sink.spec.postgres or sink.spec.redis
        secret = store.password_secret if store is not None else None
        if secret is None:
            return None
        field = "postgres" if sink.spec.postgres is not None else "redis"
        value = self.secret(sink.metadata.namespace, secret, f"spec.{field}.passwordSecret")
        path = app.folder / "secrets" / secret.name / secret.key
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.exists() or path.read_text("utf-8") != value:
            new = path.with_suffix(".new")
            descriptor = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as out:
                out.write(value)
            os.replace(new, path)
        return str(path)
