"""The chart's Role for Spark drivers is what a real driver needs to run its executors.

`templates/spark-driver-rbac.yaml` is rendered by the real helm for a release in another namespace
that watches this one, and applied. A real Spark driver (pyspark, client mode, in a subprocess so
this process never loads a JVM) then asks the control plane for two executors, with a token of
the chart's drivers' account, `distributary-spark`, as its only credential (no kubeconfig, no
client certificate). Spark's Kubernetes scheduler backend creates exactly two executor pods and
the ConfigMap they mount, lists and watches them, and deletes all of it when the session stops,
with no request refused. The same driver as an account of the namespace without the Role is
refused (Forbidden) and creates no pod; with the Role minus one verb Spark uses (`create` on
pods) the first test fails.

No executor process runs (where kwok plays a node in the same session, it moves the pods to
Running, else they stay Pending): the backend's requests are what is tested, not Spark's tasks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.kube.chart_rbac import CHART, TOKEN_LIFETIME, helm_binary
from tests.integration.kube.operator_harness import Cluster, wait_for

from distributary.devtools.controlplane import ControlPlane

NAMESPACE = "spark-driver-role"
RELEASE = "distributary"
RELEASE_NAMESPACE = "distributary-system"  # the operator's: the drivers' account is not made there
TEMPLATE = "templates/spark-driver-rbac.yaml"
ACCOUNT = "distributary-spark"  # `distributary.sparkServiceAccountName` for the release
NO_ROLE = "no-role"
EXECUTORS = 2
DRIVER_TIMEOUT = 240  # a JVM start on a busy machine, with room to spare
POD_TIMEOUT = 120

# The driver: starts a session, prints its application id, stops when told on stdin.
DRIVER = """
import json, sys
from pyspark.sql import SparkSession

master, conf = sys.argv[1], json.loads(sys.argv[2])
builder = SparkSession.builder.master(master).appName("spark-driver-role")
for key, value in conf.items():
    builder = builder.config(key, value)
try:
    spark = builder.getOrCreate()
except Exception as exc:
    print("REFUSED", str(exc).replace("\\n", " ")[:4000], flush=True)
    sys.exit(3)
print("APP", spark.sparkContext.applicationId, flush=True)
sys.stdin.readline()
spark.stop()
print("STOPPED", flush=True)
"""


@dataclass
class Driver:
    """A Spark driver process in client mode, authenticating with one token."""

    process: subprocess.Popen[str]
    out: Path
    log: Path

    def output(self) -> str:
        """What the driver script printed."""
        return self.out.read_text(errors="replace")

    def logs(self) -> str:
        """What the driver printed and logged (Spark logs to stderr)."""
        return f"{self.output()}\n--- driver log ---\n{self.log.read_text(errors='replace')}"

    def refusals(self) -> list[str]:
        """The API server's refusals the driver printed or logged, once each."""
        lines = self.logs().splitlines()
        found = [line for line in lines if "forbidden" in line.lower() and "\tat " not in line]
        # From the server's message on: who was refused what, not the client's exception class.
        return list(dict.fromkeys(line[line.find("Message:") :][:300] for line in found))

    def app_id(self) -> str:
        """The application id, once the session is up; fails when the driver was refused."""

        def started() -> str | None:
            for line in self.output().splitlines():
                if line.startswith("APP "):
                    return line.split()[1]
            assert self.process.poll() is None, f"the driver exited:\n{self.logs()[-6000:]}"
            return None

        return str(wait_for("the Spark session to start", started, DRIVER_TIMEOUT))

    def stop(self) -> None:
        """Stop the session (Spark deletes its executors) and wait for the process to end."""
        assert self.process.stdin is not None
        self.process.stdin.write("stop\n")
        self.process.stdin.close()
        self.process.wait(DRIVER_TIMEOUT)

    def kill(self) -> None:
        """SIGKILL the driver and its JVM, if still running."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # its own session: the JVM goes with it
            self.process.wait()
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()


StartDriver = Callable[[str], Driver]


@pytest.fixture(scope="module")
def driver_account(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The chart's drivers' account, Role and RoleBinding, rendered for a release watching the
    module's namespace and applied; the account's name."""
    folder = tmp_path_factory.mktemp("chart")
    objects = render_driver_rbac(folder)
    assert {(o["kind"], o["metadata"]["namespace"]) for o in objects} == {
        ("ServiceAccount", NAMESPACE),
        ("Role", NAMESPACE),
        ("RoleBinding", NAMESPACE),
    }
    assert {o["metadata"]["name"] for o in objects} == {ACCOUNT}
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    return ACCOUNT


def render_driver_rbac(folder: Path) -> list[dict[str, Any]]:
    """The chart's `spark-driver-rbac.yaml`, as `helm template` renders it under spark-operator
    for a release in its own namespace that watches only the module's."""
    values = folder / "values.yaml"
    values.write_text(
        yaml.safe_dump({"sparkRuntime": "spark-operator", "watchNamespaces": [NAMESPACE]})
    )
    result = subprocess.run(
        [helm_binary(), "template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE,
         "-f", str(values), "--show-only", TEMPLATE],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def token_file(cluster: Cluster, account: str, folder: Path) -> Path:
    """A fresh token of the namespace's `account` (TokenRequest), in a file for Spark."""
    token = cluster.kubectl(
        "create", "token", account, "-n", NAMESPACE, f"--duration={TOKEN_LIFETIME}"
    ).strip()
    path = folder / f"{account}.token"
    path.write_text(token)
    return path


def start_driver(control_plane: ControlPlane, token: Path, folder: Path) -> Driver:
    """A Spark driver in client mode against the control plane, asking for `EXECUTORS`
    executors in the module's namespace with `token` as its only credential."""
    script = folder / "driver.py"
    script.write_text(DRIVER)
    conf = {
        "spark.kubernetes.namespace": NAMESPACE,
        "spark.kubernetes.authenticate.caCertFile": str(control_plane.pki / "ca.crt"),
        "spark.kubernetes.authenticate.oauthTokenFile": str(token),
        "spark.kubernetes.container.image": "registry.example/spark:never-pulled",
        "spark.executor.instances": str(EXECUTORS),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        # Not to wait (30 s) for executors to register: no node runs them.
        "spark.scheduler.minRegisteredResourcesRatio": "0",
    }
    # The Kubernetes client also reads a kubeconfig when it finds one: it must find none.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env |= {"KUBECONFIG": str(folder / "no-kubeconfig"), "HOME": str(folder)}
    out, log = folder / "driver.out", folder / "driver.log"
    with out.open("w") as stdout, log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(script), f"k8s://{control_plane.server}", json.dumps(conf)],
            stdin=subprocess.PIPE, stdout=stdout, stderr=stderr,
            text=True, env=env, cwd=folder, start_new_session=True,
        )  # fmt: skip
    return Driver(process, out, log)


@pytest.fixture
def driver_of(
    control_plane: ControlPlane, cluster: Cluster, tmp_path: Path
) -> Iterator[StartDriver]:
    """Start a driver as a ServiceAccount of the namespace; each one killed at the end."""
    started: list[Driver] = []

    def start(account: str) -> Driver:
        driver = start_driver(control_plane, token_file(cluster, account, tmp_path), tmp_path)
        started.append(driver)
        return driver

    yield start
    for driver in started:
        driver.kill()


def executor_pods(cluster: Cluster, selector: str) -> list[dict[str, Any]]:
    """The module's namespace's pods matching the label `selector`, as the admin sees them."""
    out = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json")
    return list(json.loads(out)["items"])


def mounted_config_maps(pods: list[dict[str, Any]]) -> set[str]:
    """The names of the ConfigMaps the `pods` mount."""
    volumes = [volume for pod in pods for volume in pod["spec"].get("volumes", [])]
    return {volume["configMap"]["name"] for volume in volumes if "configMap" in volume}


def test_a_driver_as_the_charts_account_runs_and_removes_its_executors(
    cluster: Cluster, driver_account: str, driver_of: StartDriver
) -> None:
    driver = driver_of(driver_account)
    app = driver.app_id()
    selector = f"spark-app-selector={app},spark-role=executor"

    def all_requested() -> list[dict[str, Any]] | None:
        assert not driver.refusals(), driver.refusals()
        pods = executor_pods(cluster, selector)
        return pods if len(pods) >= EXECUTORS else None

    pods = wait_for(f"{EXECUTORS} executor pods of {app}", all_requested, POD_TIMEOUT)
    time.sleep(3)  # a few allocation rounds: Spark counts Pending pods, asks for no more
    pods = executor_pods(cluster, selector)
    assert len(pods) == EXECUTORS, [p["metadata"]["name"] for p in pods]
    config_maps = mounted_config_maps(pods)
    assert config_maps, "the executors mount no ConfigMap"
    assert all(cluster.get("configmap", name) for name in config_maps), config_maps

    driver.stop()
    assert driver.process.returncode == 0, driver.logs()[-6000:]
    assert "STOPPED" in driver.output()
    wait_for("the executor pods to be deleted", lambda: not executor_pods(cluster, selector), 60)
    wait_for(
        f"the executors' ConfigMap {config_maps} to be deleted",
        lambda: not any(cluster.get("configmap", name) for name in config_maps),
        60,
    )
    # Creating executors, watching, listing and deleting them are logged, not fatal, if refused.
    assert not driver.refusals(), driver.refusals()


@pytest.mark.usefixtures("driver_account")  # the Role exists, bound to another account
def test_a_driver_as_an_account_without_the_role_is_refused(
    cluster: Cluster, driver_of: StartDriver
) -> None:
    cluster.kubectl("create", "serviceaccount", NO_ROLE, "-n", NAMESPACE)
    driver = driver_of(NO_ROLE)
    driver.process.wait(DRIVER_TIMEOUT)
    assert driver.process.returncode == 3, driver.logs()[-6000:]
    (refusal,) = [line for line in driver.output().splitlines() if line.startswith("REFUSED")]
    assert "Forbidden" in refusal, refusal
    assert executor_pods(cluster, "spark-role=executor") == []
