"""The Kubeflow Spark operator's real controller on the local control plane, with kwok as nodes.

Tests of the `spark-operator` runtime need the real state machine (spark-submit, SUBMITTED,
RUNNING, FAILED), not statuses written by hand, and no Docker. Both programs are
built from Go modules of the project pinned to exact releases (`sparkoperator/`, `testbed/`; see
`gobuild`), and what they ship as data is read from the Go module cache, never copied: the
SparkApplication CRDs from the operator's module, kwok's default ("fast") node and pod stages from
kwok's. kwok makes a fake Node Ready and moves pods bound to it to Running; it runs no container,
so no Spark code ever runs and the tests check control flow only. No kube-scheduler runs either:
a small loop here binds every pending pod to the fake node, as the scheduler would, except a pod
that takes a variable from a Secret missing in its namespace: that one it leaves Pending with
its containers waiting (`CreateContainerConfigError`, `secret "..." not found`), as a kubelet
would report it, until the Secret is made. The controller submits with pyspark's spark-submit
(its SPARK_HOME is pyspark's folder), and manages only the namespaces it is given, so tests that
simulate it by hand elsewhere in a session are left alone. Its webhook runs too, as the
operator's chart runs it by default: the webhook configurations are the chart's own (rendered
from the module's chart with the pinned helm), each pointed at the webhook's port on localhost (a
name its self-made serving certificate holds) rather than at a Service, since no Service routes
on a control plane without nodes. So every SparkApplication passes the real defaulting and
validation, and every driver pod the real mutation: owned by its application (deleting an
application has the garbage collector delete its driver), with the application's volumes, `env`
and security context. The controller, its spark-submit and the webhook authenticate with a
ServiceAccount token: the Kubernetes client in Spark reads no EC private key, which is what the
control plane's client certificates have.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import importlib.util
import json
import os
import shutil
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from distributary import processes
from distributary.devtools.controlplane import ControlPlane, ControlPlaneError
from distributary.devtools.gobuild import (
    GO_BUILD,
    GoBuildError,
    GoPrograms,
    checkout_module,
    elapsed,
    say,
)
from distributary.processes import free_port

SPARK_OPERATOR_MODULE = "github.com/kubeflow/spark-operator/v2"
SPARK_OPERATOR_VERSION = "v2.3.0"  # equal to the requirement in sparkoperator/go.mod
KWOK_MODULE = "sigs.k8s.io/kwok"
KWOK_VERSION = "v0.8.0"  # equal to the requirement in testbed/go.mod
NODE = "kwok-node-0"
NODE_ANNOTATION = "kwok.x-k8s.io/node"
_ACCOUNT = "distributary-spark-operator"  # the controller's ServiceAccount, in kube-system
_GO_BUILD = (*GO_BUILD, "-ldflags=-s -w")
_KWOK_STAGES = ("kustomize/stage/node/fast", "kustomize/stage/pod/fast")
_CHART = "charts/spark-operator-chart"  # in the Spark operator's module
_WEBHOOK_TEMPLATES = (
    "templates/webhook/mutatingwebhookconfiguration.yaml",
    "templates/webhook/validatingwebhookconfiguration.yaml",
)
_WEBHOOK_RELEASE = "distributary-test"  # the chart names the configurations after it
_WEBHOOK_NAMESPACE = "kube-system"  # where the webhook keeps its certificates' Secret
_ADMISSION = "/apis/admissionregistration.k8s.io/v1"
_CONFIGURATIONS = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}


def spark_operator_programs() -> GoPrograms:
    """The `spark-operator` command, as built from `sparkoperator/`."""
    return GoPrograms(
        part="spark operator",
        cache="spark-operator",
        src=checkout_module("sparkoperator"),
        release=SPARK_OPERATOR_VERSION,
        binaries=("spark-operator",),
        go_build=_GO_BUILD,
        needs="Go 1.24.1 or newer",
    )


def kwok_programs() -> GoPrograms:
    """The `kwok` command, as built from `testbed/` (helm is built from it too: `tools/helm.sh`)."""
    return GoPrograms(
        part="kwok",
        cache="kwok",
        src=checkout_module("testbed"),
        release=KWOK_VERSION,
        binaries=("kwok",),
        go_build=_GO_BUILD,
        needs="Go 1.26 or newer",
    )


def module_dir(programs: GoPrograms, module: str, version: str) -> Path:
    """Where `module@version` is unpacked in the Go module cache, downloading it if needed."""
    go = shutil.which("go")
    if go is None:
        raise GoBuildError(f"Go is needed to find {module}@{version} in the Go module cache")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"}
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=programs.src,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    found = json.loads(result.stdout or "{}") if result.returncode == 0 else {}
    if not found.get("Dir"):
        raise GoBuildError(
            f"`go mod download {module}@{version}` failed in {programs.src}: "
            f"{result.stderr.strip() or found.get('Error', '')}"
        )
    return Path(found["Dir"])


def crd_files() -> list[Path]:
    """The Spark operator's CRDs (SparkApplication, ScheduledSparkApplication, SparkConnect) of
    the pinned release, from the Go module cache: the controller watches all three."""
    bases = module_dir(spark_operator_programs(), SPARK_OPERATOR_MODULE, SPARK_OPERATOR_VERSION)
    files = sorted((bases / "config" / "crd" / "bases").glob("sparkoperator.k8s.io_*.yaml"))
    if len(files) != 3:
        raise GoBuildError(f"expected the Spark operator's three CRDs in {bases}, found {files}")
    return files


def kwok_stages() -> list[Path]:
    """kwok's default node and pod stages (what kwokctl runs), from the Go module cache."""
    root = module_dir(kwok_programs(), KWOK_MODULE, KWOK_VERSION)
    return sorted(path for stage in _KWOK_STAGES for path in (root / stage).glob("*.yaml")
                  if path.name != "kustomization.yaml")  # fmt: skip


def helm_script() -> Path:
    """The project's pinned helm (`tools/helm.sh`) in the checkout this package runs from."""
    script = checkout_module("sparkoperator").parent / "tools" / "helm.sh"
    if not script.is_file():
        raise GoBuildError(f"tools/helm.sh is not at {script}: run from a Distributary checkout")
    return script


def webhook_configurations(port: int, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The Spark operator chart's mutating and validating webhook configurations of the pinned
    release, for `namespaces`, failing closed (the chart's default), each webhook pointed at
    https://localhost:`port` with the chart's path instead of at the chart's Service."""
    chart = (
        module_dir(spark_operator_programs(), SPARK_OPERATOR_MODULE, SPARK_OPERATOR_VERSION)
        / _CHART
    )
    shown = [f"--show-only={template}" for template in _WEBHOOK_TEMPLATES]
    result = subprocess.run(
        [
            "bash", str(helm_script()), "template", _WEBHOOK_RELEASE, str(chart),
            f"--namespace={_WEBHOOK_NAMESPACE}", *shown,
            "--set=webhook.enable=true", "--set=webhook.failurePolicy=Fail",
            f"--set-json=spark.jobNamespaces={json.dumps(list(namespaces))}",
        ],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise GoBuildError(f"helm could not render the Spark operator's webhook:\n{result.stderr}")
    configurations = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    for configuration in configurations:
        for hook in configuration["webhooks"]:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"]["url"] = f"https://localhost:{port}{service['path']}"
    if sorted(c["kind"] for c in configurations) != sorted(_CONFIGURATIONS):
        raise GoBuildError(f"unexpected webhook configurations from {chart}: {configurations}")
    return configurations


def spark_home() -> Path:
    """pyspark's folder, which holds bin/spark-submit and the jars: SPARK_HOME for the
    controller's spark-submit (found, not imported: only the runner imports pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ControlPlaneError(
            "pyspark is needed for the Spark operator's spark-submit: install the spark extra "
            "(make install)"
        )
    return Path(spec.origin).parent


class SparkOperatorBed:
    """kwok, one fake Node, a binder for pending pods and the Spark operator's controller, all
    against `plane`, the controller managing `namespaces` only; logs under `state_dir`. The
    SparkApplication CRDs must be installed first (`crd_files`). With `kwok` False, the
    controller and webhook alone, for a plane whose real node runs the pods (`devtools.node`,
    whose scheduler places them)."""

    def __init__(
        self,
        plane: ControlPlane,
        namespaces: Sequence[str],
        state_dir: Path,
        *,
        kwok: bool = True,
        quiet: bool = False,
    ) -> None:
        self.plane = plane
        self.kwok = kwok
        self.namespaces = tuple(namespaces)
        self.state_dir = state_dir.resolve()
        self.quiet = quiet
        self.logs = self.state_dir / "logs"
        self.kubeconfig = self.state_dir / "kubeconfig"
        self._processes: list[tuple[str, processes.Supervised]] = []
        self._stopping = threading.Event()
        self._binder: threading.Thread | None = None
        self._health_port = free_port()
        self._webhook_port = free_port()
        self._webhook_health_port = free_port()
        self._configurations: list[dict[str, Any]] = []

    def start(self, timeout: float = 120.0) -> SparkOperatorBed:
        """Build both programs if needed, start them and return once the fake Node is Ready."""
        spark_operator = spark_operator_programs().build(quiet=self.quiet) / "spark-operator"
        kwok = kwok_programs().build(quiet=self.quiet) / "kwok" if self.kwok else None
        started = time.monotonic()
        self.logs.mkdir(parents=True, exist_ok=True)
        try:
            if kwok is not None:
                self._launch(kwok, self._kwok_flags(), {})
                self._create("/api/v1/nodes", _node())
            self._write_token_kubeconfig()
            if kwok is not None:
                self._binder = threading.Thread(target=self._bind_pending, daemon=True)
                self._binder.start()
            deadline = time.monotonic() + timeout
            self._start_webhook(spark_operator, deadline)
            self._launch(spark_operator, self._controller_flags(), self._controller_env())
            if kwok is not None:
                self._wait_node_ready(deadline)
            self._wait_controller_ready(deadline)
        except BaseException:
            self.stop()
            raise
        if not self.quiet:
            parts = "controller, webhook and kwok" if self.kwok else "controller and webhook"
            say("spark operator", f"{parts} ready in {elapsed(started)}")
        return self

    def _kwok_flags(self) -> list[str]:
        stages = [f"--config={path}" for path in kwok_stages()]
        return [
            f"--kubeconfig={self.plane.kubeconfig}",
            *stages,
            f"--manage-nodes-with-annotation-selector={NODE_ANNOTATION}=fake",
            "--cidr=10.0.1.0/24",
            "--node-ip=10.0.1.1",
            f"--server-address=127.0.0.1:{free_port()}",
        ]

    def _controller_flags(self) -> list[str]:
        return [
            "controller",
            "start",
            f"--kubeconfig={self.kubeconfig}",
            f"--namespaces={','.join(self.namespaces)}",
            "--controller-threads=4",
            "--leader-election=false",
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{self._health_port}",
            "--zap-log-level=info",
        ]

    def _start_webhook(self, spark_operator: Path, deadline: float) -> None:
        """Apply the webhook configurations, start the webhook and wait until it serves and has
        put its CA into every configuration (until then the API server cannot call it)."""
        self._configurations = webhook_configurations(self._webhook_port, self.namespaces)
        for configuration in self._configurations:
            name = configuration["metadata"]["name"]
            path = f"{_ADMISSION}/{_CONFIGURATIONS[configuration['kind']]}"
            with contextlib.suppress(urllib.error.HTTPError):  # one left by an earlier bed
                self._request("DELETE", f"{path}/{name}")
            self._request("POST", path, configuration)
        name = self._configurations[0]["metadata"]["name"]
        flags = [
            "webhook", "start",
            f"--kubeconfig={self.kubeconfig}",
            f"--namespaces={','.join(self.namespaces)}",
            f"--webhook-port={self._webhook_port}",
            f"--webhook-cert-dir={self.state_dir / 'webhook-certs'}",
            f"--mutating-webhook-name={name}",
            f"--validating-webhook-name={name}",
            f"--webhook-secret-name={name}-certs",
            f"--webhook-secret-namespace={_WEBHOOK_NAMESPACE}",
            f"--webhook-svc-name={name}-svc",
            f"--webhook-svc-namespace={_WEBHOOK_NAMESPACE}",
            "--leader-election=false",
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{self._webhook_health_port}",
            "--zap-log-level=info",
        ]  # fmt: skip
        self._launch(spark_operator, flags, {"KUBECONFIG": str(self.kubeconfig)}, "webhook")
        self._wait_ready("webhook", self._webhook_health_port, deadline)
        while not self._ca_bundles_set():
            if "webhook" in self.exited() or time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"the Spark operator's webhook did not put its CA into {name}:\n"
                    f"{self.log_tail('webhook')}"
                )
            time.sleep(0.25)

    def _ca_bundles_set(self) -> bool:
        for configuration in self._configurations:
            path = f"{_ADMISSION}/{_CONFIGURATIONS[configuration['kind']]}"
            with contextlib.suppress(OSError, ValueError):
                found = self._request("GET", f"{path}/{configuration['metadata']['name']}")
                if all(h["clientConfig"].get("caBundle") for h in found["webhooks"]):
                    continue
            return False
        return True

    def _controller_env(self) -> dict[str, str]:
        # spark-submit finds the API server as a pod would, and authenticates with KUBECONFIG.
        port = urllib.parse.urlsplit(self.plane.server).port
        return {
            "SPARK_HOME": str(spark_home()),
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(port),
            "KUBECONFIG": str(self.kubeconfig),
        }

    def _launch(
        self, binary: Path, flags: list[str], env: dict[str, str], name: str | None = None
    ) -> None:
        name = name or binary.name
        if not self.quiet:
            say("spark operator", f"starting {name} ...")
        process = processes.start(
            [str(binary), *flags], log=self.logs / f"{name}.log", env={**os.environ, **env}
        )
        self._processes.append((name, process))

    @functools.cached_property
    def _context(self) -> ssl.SSLContext:
        pki = self.plane.pki
        context = ssl.create_default_context(cafile=pki / "ca.crt")
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        return context

    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.plane.server + path,
            data=data,
            method=method,
            headers={"Content-Type": content_type},
        )
        with urllib.request.urlopen(request, timeout=10, context=self._context) as response:
            return json.loads(response.read() or b"{}")

    def _create(self, path: str, body: dict[str, Any]) -> None:
        try:
            self._request("POST", path, body)
        except urllib.error.HTTPError as error:
            if error.code != 409:  # left by an earlier bed on this control plane
                raise

    def _write_token_kubeconfig(self) -> None:
        """A kubeconfig with a bearer token of a cluster-admin ServiceAccount for the controller
        and its spark-submit: the Kubernetes client in Spark reads no EC private key, which is
        what the control plane's client certificates have."""
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": _ACCOUNT}}
        self._create("/api/v1/namespaces/kube-system/serviceaccounts", account)
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": _ACCOUNT},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": _ACCOUNT, "namespace": "kube-system"}],
        }
        self._create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 7 * 24 * 3600},
        }
        path = f"/api/v1/namespaces/kube-system/serviceaccounts/{_ACCOUNT}/token"
        token = self._request("POST", path, request)["status"]["token"]
        ca = base64.b64encode((self.plane.pki / "ca.crt").read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": self.plane.server, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": _ACCOUNT, "user": {"token": token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": _ACCOUNT}}],
            "current-context": "local",
        }
        self.kubeconfig.write_text(json.dumps(config))
        self.kubeconfig.chmod(0o600)

    def _bind_pending(self) -> None:
        """Bind each pod without a node to the fake node, every half second, until stopped; a
        pod whose container takes a variable from a Secret that does not exist is left Pending
        instead, its container waiting as a kubelet reports it (`_wait_for_secret`), and bound
        once the Secret is made."""
        selector = urllib.parse.quote("spec.nodeName=,status.phase=Pending")
        while not self._stopping.wait(0.5):
            with contextlib.suppress(OSError, ValueError):
                for pod in self._request("GET", f"/api/v1/pods?fieldSelector={selector}")["items"]:
                    meta = pod["metadata"]
                    missing = self._missing_secret(pod)
                    if missing is not None:
                        self._wait_for_secret(pod, missing)
                        continue
                    if (pod.get("status") or {}).get("containerStatuses"):
                        self._clear_statuses(meta["namespace"], meta["name"])
                    self._bind(meta["namespace"], meta["name"])

    def _missing_secret(self, pod: dict[str, Any]) -> str | None:
        """The first Secret that `pod`'s containers take a variable from (not optionally) and
        that does not exist in its namespace; None when all do."""
        namespace = pod["metadata"]["namespace"]
        for container in (pod.get("spec") or {}).get("containers") or []:
            for variable in container.get("env") or []:
                ref = (variable.get("valueFrom") or {}).get("secretKeyRef") or {}
                if not ref.get("name") or ref.get("optional"):
                    continue
                try:
                    self._request("GET", f"/api/v1/namespaces/{namespace}/secrets/{ref['name']}")
                except urllib.error.HTTPError as error:
                    if error.code == 404:
                        return str(ref["name"])
                    raise
        return None

    def _wait_for_secret(self, pod: dict[str, Any], secret: str) -> None:
        """What a kubelet reports of a pod whose container takes a variable from the missing
        `secret`: Pending, each container waiting with CreateContainerConfigError. No node is
        bound (kwok would run the pod); written once."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        waiting = {
            "reason": "CreateContainerConfigError",
            "message": f'secret "{secret}" not found',
        }
        statuses = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"waiting": waiting},
            }
            for c in spec.get("containers") or []
        ]
        if (pod.get("status") or {}).get("containerStatuses") == statuses:
            return
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        patch = {"status": {"phase": "Pending", "containerStatuses": statuses}}
        self._request("PATCH", path, patch, "application/merge-patch+json")

    def _clear_statuses(self, namespace: str, name: str) -> None:
        """No container status left from waiting for a Secret: kwok writes them afresh."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/status"
        patch = {"status": {"containerStatuses": None}}
        self._request("PATCH", path, patch, "application/merge-patch+json")

    def _bind(self, namespace: str, name: str) -> None:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
        }
        self._request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", binding)

    def _wait_node_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if exited := self.exited():
                raise ControlPlaneError(
                    f"{', '.join(exited)} exited while starting; the end of its log:\n"
                    f"{self.log_tail(exited[0])}"
                )
            with contextlib.suppress(OSError, ValueError):
                node = self._request("GET", f"/api/v1/nodes/{NODE}")
                conditions = (node.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    return
            time.sleep(0.5)
        raise ControlPlaneError(f"kwok did not make node {NODE} Ready:\n{self.log_tail('kwok')}")

    def pids(self) -> list[tuple[str, int]]:
        """The programs' names and process ids, while they run."""
        return [(name, p.pid) for name, p in self._processes if p.poll() is None]

    def _wait_controller_ready(self, deadline: float) -> None:
        self._wait_ready("spark-operator", self._health_port, deadline)

    def _wait_ready(self, name: str, port: int, deadline: float) -> None:
        url = f"http://127.0.0.1:{port}/readyz"
        while time.monotonic() < deadline:
            if name in self.exited():
                break
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(url, timeout=2) as response,
            ):
                if response.status == 200:
                    return
            time.sleep(0.25)
        raise ControlPlaneError(
            f"the Spark operator's {name} did not become ready:\n{self.log_tail(name)}"
        )

    def exited(self) -> list[str]:
        """The programs that have exited (empty while all run)."""
        return [name for name, process in self._processes if process.poll() is not None]

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The end of program `name`'s log."""
        log = self.logs / f"{name}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the controller, the webhook, the binder and kwok, and delete the fake node and
        the webhook configurations (which would refuse every Spark pod with no webhook)."""
        self._stopping.set()
        if self._binder is not None:
            self._binder.join(5)
        while self._processes:
            name, process = self._processes.pop()
            process.stop(timeout, say=functools.partial(say, "spark operator"), what=name)
        for configuration in self._configurations:
            path = f"{_ADMISSION}/{_CONFIGURATIONS[configuration['kind']]}"
            with contextlib.suppress(OSError, ValueError):
                self._request("DELETE", f"{path}/{configuration['metadata']['name']}")
        if self.kwok:
            with contextlib.suppress(OSError, ValueError):
                self._request("DELETE", f"/api/v1/nodes/{NODE}")

    def __enter__(self) -> SparkOperatorBed:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _node() -> dict[str, Any]:
    """The fake Node kwok manages: roomy enough for every driver and executor of a test."""
    room = {"cpu": "64", "memory": "256Gi", "pods": "250"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "annotations": {NODE_ANNOTATION: "fake"},
            "labels": {"kubernetes.io/hostname": NODE, "type": "kwok"},
        },
        "status": {"allocatable": room, "capacity": room},
    }
