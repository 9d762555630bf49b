"""Kafka Connect as the operator and `distributary run` reach it: its REST API, and the two ways a
Source's connector is kept in a cluster.

`ConnectClient` is Connect's REST API, over `urllib` (Connect's own error message, the method
and the path in every error; a rebalance in progress is waited out). A `Connectors` backend keeps
one connector as a Source's reconcile asks (its config, running or paused), reads its state,
restarts it and deletes it:

- `RestConnectors`: a Connect cluster's REST endpoint, for clusters without Strimzi (and the local
  control plane, whose tests start a real worker);
- `StrimziConnectors`: a `KafkaConnector` resource (`kafka.strimzi.io/v1`, `v1beta2` where that
  is what the cluster serves) for Strimzi's `KafkaConnect` named by `strimzi.io/cluster`, whose
  operator carries it to the cluster's REST API and reports its state in the resource's status.

Neither ever holds a password: a connector's config names it
(`plan.sources.source_plan.password_reference`) and the worker resolves it with a config provider.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from distributary.errors import DistributaryError
from distributary.plan.sources.source_plan import (
    OFFSETS_ANNOTATION,
    OFFSETS_KEY,
    ConnectorState,
    kafka_connector_manifest,
    lists_offsets,
    offsets_config_map,
)

if TYPE_CHECKING:  # the Kubernetes client is loaded by who makes a Kube, not by `run`
    from distributary.kube.resources import Kube

STRIMZI_API_VERSIONS = ("kafka.strimzi.io/v1", "kafka.strimzi.io/v1beta2")


class ConnectError(DistributaryError, RuntimeError):
    """The Connect worker could not start, or its REST API refused a request; the message
    carries Connect's own reason."""


class ConnectClient:
    """Kafka Connect's REST API at `url`; a rebalance in progress (409) is retried for up to
    `timeout` seconds."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _request(
        self, method: str, path: str, body: Any = None, *, missing_ok: bool = False
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        deadline = time.monotonic() + self.timeout
        while True:
            request = urllib.request.Request(
                f"{self.url}{path}",
                data=data,
                method=method,
                headers={"Content-Type": "application/json", "Accept": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    text = response.read().decode()
                    return json.loads(text) if text else None
            except urllib.error.HTTPError as exc:
                if exc.code == 404 and missing_ok:
                    return None
                message = _error_message(exc)
                if exc.code == 409 and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                raise ConnectError(
                    f"Kafka Connect at {self.url}: {method} {path} answered {exc.code}: {message}"
                ) from None
            except urllib.error.URLError as exc:
                raise ConnectError(
                    f"Kafka Connect at {self.url} did not answer {method} {path}: {exc.reason}: "
                    "check that the worker runs"
                ) from None
            except (http.client.HTTPException, OSError) as exc:
                # A worker that dies mid-answer closes the connection without a response
                # (RemoteDisconnected), or resets it: the same as not answering.
                raise ConnectError(
                    f"Kafka Connect at {self.url} did not answer {method} {path}: {exc}: "
                    "check that the worker runs"
                ) from None

    def put_config(self, name: str, config: Mapping[str, str]) -> dict[str, Any]:
        """Create connector `name` with `config`, or update it; Connect's description of it."""
        result: dict[str, Any] = self._request("PUT", f"/connectors/{_name(name)}/config", config)
        return result

    def config(self, name: str) -> dict[str, str] | None:
        """The connector's config as Connect holds it (with `name`); None if there is none."""
        result: dict[str, str] | None = self._request(
            "GET", f"/connectors/{_name(name)}/config", missing_ok=True
        )
        return result

    def status(self, name: str) -> dict[str, Any] | None:
        """The connector's and its tasks' states; None if there is no such connector."""
        result: dict[str, Any] | None = self._request(
            "GET", f"/connectors/{_name(name)}/status", missing_ok=True
        )
        return result

    def pause(self, name: str) -> None:
        """Pause the connector and its tasks (they keep their offsets)."""
        self._request("PUT", f"/connectors/{_name(name)}/pause")

    def resume(self, name: str) -> None:
        """Resume a paused connector."""
        self._request("PUT", f"/connectors/{_name(name)}/resume")

    def restart(self, name: str, *, include_tasks: bool = True, only_failed: bool = True) -> None:
        """Restart the connector, and its (failed) tasks."""
        query = f"includeTasks={str(include_tasks).lower()}&onlyFailed={str(only_failed).lower()}"
        self._request("POST", f"/connectors/{_name(name)}/restart?{query}")

    def delete(self, name: str) -> None:
        """Delete the connector; one that is not there is fine."""
        self._request("DELETE", f"/connectors/{_name(name)}", missing_ok=True)

    def connectors(self) -> list[str]:
        """The names of the worker's connectors."""
        return list(self._request("GET", "/connectors"))

    def offsets(self, name: str) -> dict[str, Any]:
        """The connector's committed source offsets (`{"offsets": [...]}`)."""
        result: dict[str, Any] = self._request("GET", f"/connectors/{_name(name)}/offsets")
        return result


def _name(name: str) -> str:
    return quote(name, safe="")


def _error_message(error: urllib.error.HTTPError) -> str:
    """Connect's own reason (the JSON `message` of its error body), else the body's text."""
    text = error.read().decode(errors="replace")
    with contextlib.suppress(ValueError):
        body = json.loads(text)
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    return text.strip()[:500] or str(error.reason)


class Connectors(Protocol):
    """Keeps one connector per Source where the cluster's Connect runs. Blocking calls; each
    raises `ConnectError` (or `KubeError`) when Connect (or the API server) cannot be reached."""

    @property
    def where(self) -> str:
        """Where the connectors are, for people (a URL, or a KafkaConnect)."""
        ...

    def apply(
        self,
        name: str,
        config: Mapping[str, str],
        paused: bool,
        owner: Mapping[str, Any],
        namespace: str,
    ) -> None:
        """Create or update connector `name` with `config`, running or paused; `owner` is the
        ownerReference of the Source (for a resource in `namespace`)."""
        ...

    def state(self, name: str, namespace: str) -> ConnectorState | None:
        """The connector's and its tasks' states; None while there is no such connector."""
        ...

    def restart(self, name: str, namespace: str) -> None:
        """Restart the connector and its failed tasks."""
        ...

    def delete(self, name: str, namespace: str) -> None:
        """Delete the connector (its source offsets stay in Connect's offsets topic)."""
        ...

    def offsets(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The connector's committed source offsets as Connect's REST API gives them
        (`GET /connectors/NAME/offsets`); None where they cannot be read."""
        ...

    @property
    def lists_offsets(self) -> bool:
        """Whether `offsets` can tell them at all (else it always says None)."""
        ...


def connector_state(status: Mapping[str, Any] | None) -> ConnectorState | None:
    """Connect's status document (`GET /connectors/NAME/status`, or a KafkaConnector's
    `status.connectorStatus`) as a `ConnectorState`."""
    if not status:
        return None
    connector = status.get("connector") or {}
    tasks = [t for t in status.get("tasks") or [] if isinstance(t, Mapping)]
    failed = [t for t in tasks if t.get("state") == "FAILED"]
    trace = str((failed[0] if failed else connector).get("trace") or "").strip()
    return ConnectorState(
        str(connector.get("state") or "UNASSIGNED"),
        tuple(str(t.get("state") or "UNASSIGNED") for t in tasks),
        trace.splitlines()[0] if trace else "",
    )


@dataclass
class RestConnectors:
    """Connectors through a Connect cluster's REST API at `url`."""

    url: str

    @property
    def where(self) -> str:
        return f"Kafka Connect at {self.url}"

    def _client(self) -> ConnectClient:
        return ConnectClient(self.url)

    def apply(
        self,
        name: str,
        config: Mapping[str, str],
        paused: bool,
        owner: Mapping[str, Any],
        namespace: str,
    ) -> None:
        client = self._client()
        if client.config(name) != {**config, "name": name}:
            client.put_config(name, config)
        status = client.status(name) or {}
        state = str((status.get("connector") or {}).get("state") or "")
        if paused and state != "PAUSED":
            client.pause(name)
        elif not paused and state == "PAUSED":
            client.resume(name)

    def state(self, name: str, namespace: str) -> ConnectorState | None:
        return connector_state(self._client().status(name))

    def restart(self, name: str, namespace: str) -> None:
        self._client().restart(name)

    def delete(self, name: str, namespace: str) -> None:
        self._client().delete(name)

    def offsets(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return self._client().offsets(name)
        except ConnectError:  # none yet
            return None

    @property
    def lists_offsets(self) -> bool:
        return True


@dataclass
class StrimziConnectors:
    """Connectors as `KafkaConnector` resources of Strimzi's `KafkaConnect` `cluster`, in
    `namespace` (the KafkaConnect's; None: each Source's own)."""

    kube: Kube
    cluster: str
    namespace: str | None = None
    _api_version: str | None = None

    @property
    def where(self) -> str:
        return f"Strimzi KafkaConnect {self.cluster}"

    def api_version(self) -> str:
        """The KafkaConnector version the cluster serves (v1, else v1beta2)."""
        if self._api_version is None:
            served = self.kube.served_version(
                "kafka.strimzi.io", "KafkaConnector", ["v1", "v1beta2"]
            )
            if served is None:
                raise ConnectError(
                    "the cluster serves no KafkaConnector (kafka.strimzi.io): install Strimzi "
                    'and a KafkaConnect with strimzi.io/use-connector-resources: "true", or '
                    "run the operator with --connect-url for a plain Connect endpoint"
                )
            self._api_version = served
        return self._api_version

    def _namespace(self, namespace: str) -> str:
        return self.namespace or namespace

    def apply(
        self,
        name: str,
        config: Mapping[str, str],
        paused: bool,
        owner: Mapping[str, Any],
        namespace: str,
    ) -> None:
        where = self._namespace(namespace)
        manifest = kafka_connector_manifest(
            self.api_version(), name, where, self.cluster, config, paused,
            owner if where == namespace else None,
        )  # fmt: skip
        self.kube.apply(manifest)

    def _get(self, name: str, namespace: str) -> dict[str, Any] | None:
        return self.kube.get(self.api_version(), "KafkaConnector", self._namespace(namespace), name)

    def state(self, name: str, namespace: str) -> ConnectorState | None:
        found = self._get(name, namespace)
        if found is None:
            return None
        status = found.get("status") or {}
        state = connector_state(status.get("connectorStatus"))
        if state is not None:
            return state
        # No connector status yet: Strimzi's own condition says why (e.g. NotReady, with the
        # REST API's refusal).
        ready = next((c for c in status.get("conditions") or [] if c.get("type") in
                      ("Ready", "NotReady")), None)  # fmt: skip
        message = str((ready or {}).get("message") or "Strimzi has not reported it yet")
        return ConnectorState("UNASSIGNED", (), message)

    def restart(self, name: str, namespace: str) -> None:
        self.kube.apply(
            {
                "apiVersion": self.api_version(),
                "kind": "KafkaConnector",
                "metadata": {
                    "name": name,
                    "namespace": self._namespace(namespace),
                    "annotations": {"strimzi.io/restart": "true"},
                },
            },
            field_manager="distributary-restart",
        )

    def delete(self, name: str, namespace: str) -> None:
        self.kube.delete(self.api_version(), "KafkaConnector", self._namespace(namespace), name)

    def offsets(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The offsets Strimzi last listed into the connector's ConfigMap (`spec.listOffsets`),
        and a fresh listing asked for (the `strimzi.io/connector-offsets: list` annotation,
        which Strimzi removes once it has listed them): a round reads what the one before it
        asked for, so they are an observe interval or so old. None before the first listing,
        or where KafkaConnectors cannot list them."""
        if not self.lists_offsets or self._get(name, namespace) is None:
            return None
        where = self._namespace(namespace)
        found = self.kube.get("v1", "ConfigMap", where, offsets_config_map(name))
        self.kube.apply(
            {
                "apiVersion": self.api_version(),
                "kind": "KafkaConnector",
                "metadata": {
                    "name": name,
                    "namespace": where,
                    "annotations": {OFFSETS_ANNOTATION: "list"},
                },
            },
            field_manager="distributary-offsets",
        )
        text = ((found or {}).get("data") or {}).get(OFFSETS_KEY)
        try:
            listed = json.loads(text) if text else None
        except ValueError:
            return None
        return listed if isinstance(listed, dict) else None

    @property
    def lists_offsets(self) -> bool:
        try:
            return lists_offsets(self.api_version())
        except ConnectError:
            return False
