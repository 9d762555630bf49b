"""The operator as people run it, for the tests: a `distributary operator` process on the test
control plane and the session's broker, and small helpers to read resources and wait on them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config
from urllib3.exceptions import HTTPError

from distributary.kafka.admin import KafkaAdmin
from distributary.processes import free_port

ROOT = Path(__file__).resolve().parents[3]


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60) -> Any:
    """Poll `probe` until it returns something truthy; fail naming `what` and the last value."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


@dataclass
class Cluster:
    """kubectl against the test control plane, in one namespace; reads of one resource (what
    the tests poll, thousands of times a run) straight from the API server."""

    kubeconfig: Path
    namespace: str
    _api: Any = field(default=None, init=False, repr=False, compare=False)
    # A kind as kubectl takes it (plural, singular, kind or short name) -> path, plural, namespaced
    _kinds: dict[str, tuple[str, str, bool]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result.stdout

    def apply(self, *manifests: dict[str, Any]) -> None:
        """Apply the manifests in the namespace."""
        text = yaml.safe_dump_all(manifests)
        self.kubectl("apply", "-n", self.namespace, "-f", "-", stdin=text)

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """A resource, or None when it does not exist (or cannot be read, as kubectl's empty
        answer was). Read with one request: a kubectl process costs about 0.1 CPU-s, and the
        suite's polls made about 3,000 of them."""
        if kind.lower() not in self._kinds:
            self._discover()
        if kind.lower() not in self._kinds:  # a form of kind only kubectl knows
            out = self.kubectl("get", kind, name, "-n", self.namespace, "-o", "json", check=False)
            return json.loads(out) if out.strip() else None
        prefix, plural, namespaced = self._kinds[kind.lower()]
        where = f"/namespaces/{self.namespace}" if namespaced else ""
        try:
            return self._read(f"{prefix}{where}/{plural}/{name}")
        except (LookupError, HTTPError, OSError):  # not found, or not answered: as kubectl's
            return None

    def _read(self, path: str) -> dict[str, Any]:
        """The API server's answer at `path`; LookupError with its status when it is no 200."""
        if self._api is None:
            self._api = config.new_client_from_config(config_file=str(self.kubeconfig))
        method, url, headers, _, _ = self._api.param_serialize(
            "GET", path, auth_settings=["BearerToken"]
        )
        response = self._api.call_api(method, url, header_params=headers, _request_timeout=30)
        data = response.read()
        if response.status != 200:
            raise LookupError(f"GET {path}: {response.status}")
        found: dict[str, Any] = json.loads(data)
        return found

    def _discover(self) -> None:
        """Every kind the API server serves, by each name kubectl takes for it (the core group
        first, as kubectl prefers it)."""
        kinds: dict[str, tuple[str, str, bool]] = {}
        versions = ["/api/v1"] + [
            f"/apis/{group['preferredVersion']['groupVersion']}"
            for group in self._read("/apis")["groups"]
        ]
        for prefix in versions:
            for resource in self._read(prefix)["resources"]:
                if "/" in resource["name"]:  # a subresource
                    continue
                entry = (prefix, resource["name"], resource["namespaced"])
                names = [resource["name"], resource.get("singularName"), resource["kind"]]
                for alias in [*names, *resource.get("shortNames", [])]:
                    if alias:
                        kinds.setdefault(alias.lower(), entry)
        self._kinds = kinds

    def install_crds(self) -> None:
        """The project's CRDs, established."""
        self.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        if self.get("namespace", self.namespace) is None:
            self.kubectl("create", "namespace", self.namespace)


def condition(resource: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """A condition of a resource's status, or None."""
    for item in ((resource or {}).get("status") or {}).get("conditions") or []:
        if item["type"] == type_:
            return dict(item)
    return None


def with_reason(resource: dict[str, Any] | None, type_: str, reason: str) -> dict[str, Any] | None:
    """The condition `type_` of a resource when its reason is `reason`, else None."""
    found = condition(resource, type_)
    return found if found and found["reason"] == reason else None


def read_to_the_end(resource: dict[str, Any] | None, bootstrap_servers: str) -> bool:
    """A view's or job's status says Ready, CaughtUp and lag 0, and its position in each input
    is that input's end as the broker has it now, asked after the status was read. Every wait
    for "caught up" goes through here: a status written before its inputs had the records the
    test appended says Ready, CaughtUp and lag 0 too, and is true of the data then, not now."""
    status = (resource or {}).get("status") or {}
    if not (
        is_true(resource, "Ready") and is_true(resource, "CaughtUp") and status.get("lag") == 0
    ):
        return False
    inputs = status.get("inputs") or []
    if not inputs:
        return False
    admin = KafkaAdmin(bootstrap_servers)
    for found in inputs:
        topic = found.get("topic")
        ends = admin.end_offsets([topic]).get(topic, {}) if topic else {}
        position = {int(p): o for p, o in (found.get("position") or {}).items()}
        if not topic or any(position.get(p, 0) < end for p, end in ends.items()):
            return False
    return True


def is_true(resource: dict[str, Any] | None, type_: str) -> bool:
    """The condition is True and was computed from the resource's current generation."""
    found = condition(resource, type_)
    generation = ((resource or {}).get("metadata") or {}).get("generation")
    return bool(found and found["status"] == "True" and found["observedGeneration"] == generation)


@dataclass
class Operator:
    """A running `distributary operator`; restartable, killable."""

    cluster: Cluster
    bootstrap_servers: str
    folder: Path
    extra: Sequence[str] = ()
    node_local_checkpoints: bool = True
    """Allow checkpoints on the test machine's disk under the spark-operator runtime (the test
    control plane has one machine); False: the operator refuses them, as in a real cluster."""
    kubeconfig: Path | None = None
    """Who the operator acts as; None: the cluster's admin (`chart_rbac` gives the chart's
    ServiceAccount instead)."""
    watch_all: bool = False
    """Watch every namespace instead of the cluster's own."""
    metrics_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def log_file(self) -> Path:
        return self.folder / f"operator-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        argv = [
            sys.executable, "-m", "distributary.cli", "operator",
            "--bootstrap-servers", self.bootstrap_servers,
            *(() if self.watch_all else ("--namespace", self.cluster.namespace)),
            "--observe-interval", "2",
            "--health-port", str(free_port()),
            "--metrics-port", str(self.metrics_port),
            "--state-dir", str(self.folder / "local"),
            "--checkpoint-root", (self.folder / "checkpoints").as_uri(),
            *(["--allow-node-local-checkpoints"] if self.node_local_checkpoints else []),
            # Each module's Logs are claimed apart: modules share the session's broker and
            # their Log names (`clicks`), as separate Kafka clusters would not.
            *(() if "--claims-topic" in self.extra else self._claims_topic()),
            *self.extra,
        ]  # fmt: skip
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig or self.cluster.kubeconfig)}
        with open(self.log_file, "wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)

    def _claims_topic(self) -> tuple[str, str]:
        return "--claims-topic", f"distributary.{self.cluster.namespace}.claims"

    def kill(self) -> None:
        """SIGKILL, as a lost node would: no clean-up of any kind."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def logs(self, tail: int | None = 4000) -> str:
        """What each of the operator's starts logged: the last `tail` characters of each (as
        failure messages show them), or everything with `tail=None`."""
        texts = (
            (self.folder / f"operator-{n}.log").read_text(errors="replace")
            for n in range(1, self.starts + 1)
        )
        return "\n".join(text if tail is None else text[-tail:] for text in texts)


def waiting(
    operator: Operator,
    what: str,
    probe: Callable[[], Any],
    timeout: float = 60,
    show: Callable[[], Any] | None = None,
) -> Any:
    """`wait_for`, with the operator's log in the failure (and what `show` returns then)."""
    try:
        return wait_for(what, probe, timeout)
    except AssertionError as exc:
        shown = f"\n--- then ---\n{json.dumps(show(), indent=1, default=str)}" if show else ""
        raise AssertionError(f"{exc}{shown}\n--- operator log ---\n{operator.logs()}") from None
