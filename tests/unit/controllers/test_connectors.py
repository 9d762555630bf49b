"""The Connect backends: Connect's status as a ConnectorState, a REST endpoint kept as the
Source asks (config put only when it differs, paused and resumed), and KafkaConnectors applied,
read and restarted through the API server (in-memory stand-ins for Connect and Kube)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from distributary.backends.connect import (
    ConnectClient,
    ConnectError,
    RestConnectors,
    StrimziConnectors,
    connector_state,
)

CONFIG = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
          "tasks.max": "1", "plugin.name": "pgoutput"}  # fmt: skip
OWNER = {"apiVersion": "distributary.dev/v1alpha1", "kind": "Source", "name": "shop", "uid": "u"}


def test_connect_status_becomes_a_connector_state() -> None:
    assert connector_state(None) is None
    state = connector_state(
        {
            "connector": {"state": "RUNNING"},
            "tasks": [
                {"id": 0, "state": "FAILED", "trace": "org.postgresql.PSQLException: gone\n\tat x"}
            ],
        }
    )
    assert state is not None
    assert (state.state, state.tasks, state.failed, state.running) == (
        "RUNNING",
        ("FAILED",),
        True,
        False,
    )
    assert state.reason == "org.postgresql.PSQLException: gone"


class _Connect(BaseHTTPRequestHandler):
    """A stand-in for Connect's REST API: one connector's config and state."""

    configs: ClassVar[dict[str, dict[str, str]]] = {}
    states: ClassVar[dict[str, str]] = {}
    calls: ClassVar[list[str]] = []

    def log_message(self, *_: Any) -> None:
        pass

    def _answer(self, code: int, body: Any = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        name, what = self.path.split("/")[2], self.path.split("/")[3]
        if name not in self.configs:
            self._answer(404, {"message": f"Connector {name} not found"})
        elif what == "config":
            self._answer(200, {**self.configs[name], "name": name})
        else:
            state = self.states[name]
            self._answer(200, {"connector": {"state": state}, "tasks": [{"id": 0, "state": state}]})

    def do_PUT(self) -> None:
        name, what = self.path.split("/")[2], self.path.split("/")[3]
        self.calls.append(f"PUT {what}")
        if what == "config":
            length = int(self.headers["Content-Length"])
            self.configs[name] = json.loads(self.rfile.read(length))
            self.states.setdefault(name, "RUNNING")
            self._answer(201, {"name": name})
        else:
            self.states[name] = "PAUSED" if what == "pause" else "RUNNING"
            self._answer(202)


@pytest.fixture
def endpoint() -> Iterator[str]:
    _Connect.configs, _Connect.states, _Connect.calls = {}, {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Connect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_rest_endpoint_gets_the_config_once_and_follows_pauses(endpoint: str) -> None:
    connectors = RestConnectors(endpoint)
    connectors.apply("c", CONFIG, False, OWNER, "sales")
    connectors.apply("c", CONFIG, False, OWNER, "sales")
    assert _Connect.calls == ["PUT config"]
    state = connectors.state("c", "sales")
    assert state is not None
    assert state.running
    connectors.apply("c", CONFIG, True, OWNER, "sales")
    assert _Connect.calls == ["PUT config", "PUT pause"]
    state = connectors.state("c", "sales")
    assert state is not None
    assert state.state == "PAUSED"
    connectors.apply(
        "c", {**CONFIG, "plugin.name": "pgoutput", "slot.name": "s"}, False, OWNER, "x"
    )
    assert _Connect.calls == ["PUT config", "PUT pause", "PUT config", "PUT resume"]
    assert connectors.state("missing", "sales") is None


def test_a_rest_endpoint_that_does_not_answer_says_so() -> None:
    with pytest.raises(ConnectError, match="did not answer"):
        RestConnectors("http://127.0.0.1:9").state("c", "sales")


class _Kube:
    """An in-memory API server holding KafkaConnectors."""

    def __init__(self, serves: str | None = "kafka.strimzi.io/v1") -> None:
        self.serves = serves
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.managers: list[str] = []

    def served_version(self, group: str, kind: str, candidates: Any) -> str | None:
        return self.serves

    def apply(
        self, manifest: dict[str, Any], field_manager: str = "distributary"
    ) -> dict[str, Any]:
        meta = manifest["metadata"]
        key = (meta["namespace"], meta["name"])
        current = self.objects.setdefault(key, {"metadata": {}})
        current["metadata"].update(meta)
        if "spec" in manifest:
            current["spec"] = manifest["spec"]
        self.managers.append(field_manager)
        return current

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def delete_annotation(self, namespace: str, name: str, key: str) -> None:
        """What Strimzi does once it has listed a connector's offsets."""
        self.objects[(namespace, name)]["metadata"]["annotations"].pop(key)

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        return self.objects.pop((namespace, name), None) is not None


def test_strimzi_connectors_are_kafka_connectors_beside_the_source() -> None:
    kube = _Kube()
    connectors = StrimziConnectors(kube, "connect")  # type: ignore[arg-type]
    connectors.apply("c", CONFIG, False, OWNER, "sales")
    made = kube.objects[("sales", "c")]
    assert made["metadata"]["labels"]["strimzi.io/cluster"] == "connect"
    assert made["metadata"]["ownerReferences"] == [OWNER]
    state = connectors.state("c", "sales")
    assert state is not None
    assert (state.state, state.reason) == ("UNASSIGNED", "Strimzi has not reported it yet")
    made["status"] = {"connectorStatus": {"connector": {"state": "RUNNING"},
                                          "tasks": [{"id": 0, "state": "RUNNING"}]}}  # fmt: skip
    state = connectors.state("c", "sales")
    assert state is not None
    assert state.running
    connectors.restart("c", "sales")
    assert made["metadata"]["annotations"] == {"strimzi.io/restart": "true"}
    connectors.delete("c", "sales")
    assert kube.objects == {}


def test_strimzi_connectors_in_the_connect_namespace_have_no_owner() -> None:
    kube = _Kube()
    StrimziConnectors(kube, "connect", "kafka").apply("c", CONFIG, True, OWNER, "sales")  # type: ignore[arg-type]
    made = kube.objects[("kafka", "c")]
    assert "ownerReferences" not in made["metadata"]
    assert made["spec"]["state"] == "paused"


def test_a_cluster_without_kafka_connectors_is_told_what_to_install() -> None:
    connectors = StrimziConnectors(_Kube(serves=None), "connect")  # type: ignore[arg-type]
    with pytest.raises(ConnectError, match="--connect-url"):
        connectors.apply("c", CONFIG, False, OWNER, "sales")


def test_strimzi_connectors_list_their_offsets_into_a_config_map_on_request() -> None:
    kube = _Kube()
    connectors = StrimziConnectors(kube, "connect")  # type: ignore[arg-type]
    assert connectors.lists_offsets
    assert connectors.offsets("c", "sales") is None  # no connector yet: nothing asked
    assert ("sales", "c") not in kube.objects
    connectors.apply("c", CONFIG, False, OWNER, "sales")
    made = kube.objects[("sales", "c")]
    assert made["spec"]["listOffsets"] == {"toConfigMap": {"name": "c-offsets"}}
    assert connectors.offsets("c", "sales") is None  # asked for; not listed yet
    assert made["metadata"]["annotations"] == {"strimzi.io/connector-offsets": "list"}
    assert kube.managers[-1] == "distributary-offsets"  # the spec's manager is not disturbed
    # Strimzi lists them into the ConfigMap and removes the annotation.
    listed = {"offsets": [{"partition": {"server": "s"}, "offset": {"lsn": 7}}]}
    kube.objects[("sales", "c-offsets")] = {"data": {"offsets.json": json.dumps(listed)}}
    kube.delete_annotation("sales", "c", "strimzi.io/connector-offsets")
    assert connectors.offsets("c", "sales") == listed
    assert made["metadata"]["annotations"] == {"strimzi.io/connector-offsets": "list"}  # again
    kube.objects[("sales", "c-offsets")] = {"data": {"offsets.json": "{not json"}}
    assert connectors.offsets("c", "sales") is None


def test_an_older_kafka_connector_version_is_not_asked_for_offsets() -> None:
    kube = _Kube(serves="kafka.strimzi.io/v1beta2")
    connectors = StrimziConnectors(kube, "connect")  # type: ignore[arg-type]
    assert not connectors.lists_offsets
    connectors.apply("c", CONFIG, False, OWNER, "sales")
    assert "listOffsets" not in kube.objects[("sales", "c")]["spec"]
    assert connectors.offsets("c", "sales") is None
    assert "annotations" not in kube.objects[("sales", "c")]["metadata"]
    assert not StrimziConnectors(_Kube(serves=None), "connect").lists_offsets  # type: ignore[arg-type]


def test_a_worker_that_dies_mid_answer_is_a_connect_error() -> None:
    """A worker killed while it answers closes the connection without a response."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def hang_up() -> None:
        connection, _ = listener.accept()
        connection.recv(1024)
        connection.close()

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    try:
        with pytest.raises(ConnectError, match="did not answer"):
            ConnectClient(f"http://127.0.0.1:{port}").offsets("c")
    finally:
        thread.join(5)
        listener.close()
