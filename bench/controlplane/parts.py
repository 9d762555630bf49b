"""The real parts bench/controlplane runs on, started as the integration tests start them: the
project's CRDs and the Spark operator's own (from the Go module cache) on a real API server, and
`distributary operator` as a process of its own; and what /proc says of each process.
"""

from __future__ import annotations

import os
import platform
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import figures
import kopf
from figures import NAMESPACE
from kubernetes import client, config

from distributary.artifacts import KAFKA_VERSION
from distributary.devtools.controlplane import KUBERNETES_VERSION, ControlPlane
from distributary.devtools.sparkoperator import crd_files
from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.plan.revisions.progress import PROGRESS_TOPIC
from distributary.processes import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
IMAGE = "registry.example/distributary-spark:bench"


@dataclass
class Process:
    """A process of the run whose memory and CPU time are read from /proc."""

    name: str
    pid: int

    def status(self) -> str:
        """The text of /proc/<pid>/status (empty once the process is gone)."""
        try:
            return Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return ""

    def kib(self, field_name: str) -> int | None:
        """A kB field of its status: VmHWM (peak resident set size), VmRSS (resident now)."""
        return figures.proc_status_kib(self.status(), field_name)

    def cpu(self) -> float | None:
        """User plus system CPU seconds since it started (None once it is gone)."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return None
        return figures.cpu_seconds(stat, os.sysconf("SC_CLK_TCK"))


@dataclass(frozen=True)
class Sample:
    """The operator process at one moment: resident memory, open files, threads."""

    rss_mb: float | None
    open_files: int
    threads: int | None

    def __str__(self) -> str:
        return f"RSS {self.rss_mb} MiB, {self.open_files} open files, {self.threads} threads"


class Sampler:
    """Samples a process twice a second on a thread of its own, keeping the largest values: a
    burst of connections lasts less than the progress lines' period."""

    def __init__(self, process: Process, period: float = 0.5) -> None:
        self.process, self.period = process, period
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now(self) -> Sample:
        """A sample taken now (kept with the others)."""
        status = self.process.status()
        try:
            files = len(os.listdir(f"/proc/{self.process.pid}/fd"))
        except OSError:
            files = 0
        sample = Sample(
            mib(figures.proc_status_kib(status, "VmRSS")),
            files,
            figures.proc_status_count(status, "Threads"),
        )
        self.samples.append(sample)
        return sample

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.now()

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()

    def maxima(self) -> dict[str, Any]:
        """The largest RSS, open files and threads sampled."""
        return {
            "rss_max_sampled_mb": max((s.rss_mb or 0.0 for s in self.samples), default=None),
            "open_files_max": max((s.open_files for s in self.samples), default=None),
            "threads_max": max((s.threads or 0 for s in self.samples), default=None),
        }


def mib(kib: int | None) -> float | None:
    """KiB in MiB, rounded."""
    return None if kib is None else round(kib / 1024, 1)


@dataclass
class Operator:
    """`distributary operator` on the benchmark's namespace, as people run it (`direct` topics,
    `spark-operator` runtime), its output in `folder/operator.log`. With `profile`, under
    cProfile (`profiled_operator.py`), its statistics written to that file on `stop`."""

    plane: ControlPlane
    bootstrap: str
    folder: Path
    observe_interval: float
    profile: str | None = None
    metrics_port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        """Start it and return once it serves /healthz and has made its progress topic."""
        self.metrics_port, health_port = free_port(), free_port()
        program = ["-m", "distributary.cli"]
        if self.profile:
            wrapper = Path(__file__).with_name("profiled_operator.py")
            program = [str(wrapper), str(Path(self.profile).resolve())]
        argv = [
            sys.executable, *program, "operator",
            "--bootstrap-servers", self.bootstrap,
            "--namespace", NAMESPACE,
            "--topic-backend", "direct",
            "--spark-runtime", "spark-operator",
            "--image", IMAGE,
            "--observe-interval", str(self.observe_interval),
            "--health-port", str(health_port),
            "--metrics-port", str(self.metrics_port),
            "--state-dir", str(self.folder / "local"),
            "--checkpoint-root", (self.folder / "checkpoints").as_uri(),
            # No driver runs: the simulated applications never read these checkpoints.
            "--allow-node-local-checkpoints",
        ]  # fmt: skip
        env = {**os.environ, "KUBECONFIG": str(self.plane.kubeconfig)}
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "wb") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.process = process
        admin = KafkaAdmin(self.bootstrap)
        wait_until(
            "the operator to serve /healthz and make its progress topic",
            lambda: (
                get(f"http://127.0.0.1:{health_port}/healthz") is not None
                and admin.describe_topic(PROGRESS_TOPIC) is not None
            ),
            timeout=60,
            failed=lambda: process.poll() is not None,
        )
        return Process("operator", process.pid)

    @property
    def log_file(self) -> Path:
        """Where its output goes."""
        return self.folder / "operator.log"

    def metrics(self) -> str:
        """The operator's own /metrics (empty when it does not answer)."""
        return get(f"http://127.0.0.1:{self.metrics_port}/metrics") or ""

    def stop(self, grace: float = 30) -> None:
        """SIGTERM (kopf finishes its handlers first), then SIGKILL after `grace` seconds."""
        if self.process is not None and self.process.poll() is None and self.profile:
            self.process.send_signal(signal.SIGUSR1)
            written = Path(self.profile)
            wait_until(f"the profile in {written}", written.exists, timeout=60)
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def tail(self, lines: int = 15) -> str:
        """The end of its output, for a failure's message."""
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def processes(plane: ControlPlane, broker_pid_file: Path) -> list[Process]:
    """The control plane's processes and the broker's, by their pid files."""
    pids = (plane.state_dir / "pids").read_text().split()
    if broker_pid_file.exists():
        pids.append(broker_pid_file.read_text().strip())
    found = []
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        found.append(Process("kafka" if name == "java" else name, int(pid)))
    return found


def apiserver_metrics(plane: ControlPlane) -> str:
    """The API server's /metrics, read with the admin's client certificate."""
    context = ssl.create_default_context(cafile=plane.pki / "ca.crt")
    context.load_cert_chain(plane.pki / "admin.crt", plane.pki / "admin.key")
    with urllib.request.urlopen(f"{plane.server}/metrics", timeout=30, context=context) as answer:
        return str(answer.read().decode())


def get(url: str) -> str | None:
    """The body at `url`, or None when it does not answer 200."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode()) if response.status == 200 else None
    except (OSError, ValueError):
        return None


def wait_until(
    what: str, probe: Callable[[], Any], timeout: float, failed: Callable[[], bool] = lambda: False
) -> None:
    """Return once `probe` is truthy; raise when `failed` is, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except KafkaAdminError:
            pass
        if failed():
            raise RuntimeError(f"gave up waiting for {what}")
        time.sleep(0.5)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def install_crds(plane: ControlPlane) -> None:
    """The project's CRDs and the Spark operator's, established; the namespace."""
    kubectl = ["kubectl", "--kubeconfig", str(plane.kubeconfig)]
    for command in (
        ["apply", "--server-side", "-f", str(ROOT / "crds")],
        *(["apply", "--server-side", "-f", str(path)] for path in crd_files()),
        ["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
        ["create", "namespace", NAMESPACE],
    ):
        deadline = time.monotonic() + 60
        while True:
            result = subprocess.run(
                [*kubectl, *command], capture_output=True, text=True, timeout=120
            )
            # kubectl wait fails at once, rather than waiting, on a CRD whose status has no
            # conditions yet ("accessor error: <nil>"): the API server has not written them.
            unwritten = "accessor error" in result.stderr and command[0] == "wait"
            if result.returncode == 0 or not unwritten or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(command)} failed: {result.stderr.strip()}")


def kube_client(kubeconfig: Path, threads: int) -> Any:
    """A CustomObjectsApi with a connection for every thread that may use it at once."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = threads + 8  # the watches and the stand-in too
    return client.CustomObjectsApi(client.ApiClient(configuration))


def machine() -> dict[str, Any]:
    """What the figures were measured on, and how busy it was (1, 5, 15-minute load)."""
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    kib = figures.proc_status_kib(meminfo, "MemTotal")
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                  if line.startswith("model name")), None)  # fmt: skip
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(kib / 2**20, 1) if kib else None,
        "cpu": model or platform.processor() or None,
        "os": platform.platform(),
        "python": platform.python_version(),
        "kubernetes": KUBERNETES_VERSION,
        "kafka": KAFKA_VERSION,
        "kopf": kopf.__version__,
        "load_average": [round(x, 2) for x in os.getloadavg()],  # others' work skews figures
    }
