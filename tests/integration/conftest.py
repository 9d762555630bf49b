"""Fixtures that start real parts: the embedded Kafka broker (from cached Maven jars), and
PostgreSQL 15 and Redis from their Debian packages (`tools/system-packages.sh`).

Each fixture starts the same launcher people use (`distributary.local.broker`), once per session,
with its data in pytest's temporary folder; nothing here stands in for Kafka.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Every JVM the tests start (the brokers, Connect, Spark's drivers, Kafka's tools) lives seconds
# to minutes on two cores, where C2's compiling and G1's concurrent threads cost more than they
# win back. Compiled with C1 alone, the local-tier modules ran about 10% faster side by side
# (test_local_reprocess 93 s against 103 s; two live cutover modules 177 s against 198 s). With
# the serial collector as well, the machine's CPU time fell by 22% for test_local_cascade (126
# against 161 CPU-s; 104 s against 122 s) and by 5 to 17% for test_local_reprocess. The broker
# and Connect take their collector from Kafka's own variable (`local.broker`). What the JVMs
# compute is the same; people's runs keep the JVM's defaults.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
os.environ.setdefault("KAFKA_JVM_PERFORMANCE_OPTS", "-XX:+UseSerialGC")

from tests.integration import cpu_time
from tests.integration.cpu_time import pytest_runtest_makereport  # noqa: F401 (a hook)

from distributary import processes
from distributary.devtools import kafka_cds, spark_cds
from distributary.devtools.postgres import PostgresServer
from distributary.devtools.redis import RedisServer
from distributary.local.broker import EmbeddedBroker

# Modules that kill their runners and brokers again and again and time what follows: on the test
# workers they run one after another on one worker, never beside each other.
KILLING = frozenset({
    "tests/integration/test_runner_recovery.py",
    "tests/integration/kube/test_chaos.py",
    "tests/integration/test_local_sink.py",
    "tests/integration/test_local_stateful_rewind.py",
})  # fmt: skip


PODS = "tests/integration/pods/"  # the modules on the test node (`pods/conftest.py`)


# What a test needs of `devtools.builds` (built in the background on a fresh machine, in this
# order) decides when it runs: what needs none of it first, the Spark operator's tests last.
_NEEDS_PLANE = frozenset({"control_plane", "helm"})  # etcd, the API server, helm
_NEEDS_SPARK_OPERATOR = "spark_operator"  # and kwok: the last parts built
_NEEDS_IMAGES = "images"  # built after them
_NEEDS_DNS = "cluster_dns"  # CoreDNS: built last
_NEEDS_NODE = "node"  # the kubelet and the job image


def _needs(item: pytest.Item) -> int:
    """0: the `KILLING` modules (the longest work: first; their one module that needs the
    control plane last within them, minutes later); 1: nothing built; 2: the control plane or
    helm, and the `PODS` modules (one scope of about ten minutes on one worker: first among
    these, so that the other workers share the rest beside it rather than wait for it at the
    end; its fixtures wait for the builds they need); 3: the Spark operator and kwok as well, the
    images or CoreDNS. The killing
    modules run first, beside the modules that need nothing built: a fresh run with them after
    those, beside the Kubernetes modules, took 71 minutes (43 with them first), each of them two
    to three times as long."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if _module(item) in KILLING:
        return 0
    if _module(item).startswith(PODS):
        return 2  # with the first modules that need builds: the node's scope is long, serial
    if fixtures & {_NEEDS_SPARK_OPERATOR, _NEEDS_IMAGES, _NEEDS_DNS, _NEEDS_NODE}:
        return 3
    if fixtures & _NEEDS_PLANE or "tests/integration/kube/" in str(item.path):
        return 2
    return 1


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the integration tests, and order them by what they need built (`_needs`, a module
    taking its most needing test's rank), so that on a fresh machine the tests that need nothing
    built run while the programs are built (`pytest_sessionstart`). The test workers keep this
    order (`pytest_xdist_make_scheduler`)."""
    rank: dict[str, int] = {}
    for item in items:
        if "tests/integration" in str(item.path):
            item.add_marker(pytest.mark.integration)
        module = _module(item)
        rank[module] = max(rank.get(module, 0), _needs(item))
    kube = "tests/integration/kube/"  # last within the KILLING modules too
    items.sort(key=lambda item: (rank[_module(item)], kube in str(item.path)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """On test workers, a module's tests run together on one worker (its module fixtures set up
    once, as `--dist loadfile`), the `KILLING` modules together on one, and the modules of
    `PODS` together on one (a machine runs one node at a time, and they share it), in the order
    `pytest_collection_modifyitems` gives (xdist would otherwise put the modules with the most
    tests first)."""
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class ModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if module.startswith(PODS):
                return "pods"
            return "killing" if module in KILLING else module

    config.option.loadscopereorder = False
    return ModuleScheduling(config, log)


_BUILDS: list[processes.Supervised] = []


def pytest_configure(config: pytest.Config) -> None:
    """Each process that runs tests counts its CPU time (`cpu_time`)."""
    cpu_time.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    cpu_time.stop()


def pytest_sessionstart(session: pytest.Session) -> None:
    """With DISTRIBUTARY_BUILD_AHEAD=1 (`make test`), build what the test beds need once per
    machine (`distributary.devtools.builds`) in the background while the
    first tests run; once, in the process that runs or schedules the tests."""
    if os.environ.get("DISTRIBUTARY_BUILD_AHEAD") != "1" or "PYTEST_XDIST_WORKER" in os.environ:
        return
    command = [sys.executable, "-m", "distributary.devtools.builds"]
    _BUILDS.append(processes.start(command, stdout=None))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A build still running when the tests end is stopped (it is taken up again next time)."""
    for build in _BUILDS:
        build.stop(10)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """After the slowest tests, the slowest modules (their tests' setup, call and teardown
    summed, with the CPU time of what they started: `cpu_time`) and each test worker's busy
    time: where the suite's minutes go, and how evenly the workers share them."""
    modules: collections.defaultdict[str, float] = collections.defaultdict(float)
    cpu: collections.defaultdict[str, float] = collections.defaultdict(float)
    workers: collections.defaultdict[str, float] = collections.defaultdict(float)
    for reports in terminalreporter.stats.values():
        for report in reports:
            duration, nodeid = getattr(report, "duration", None), getattr(report, "nodeid", "")
            if not isinstance(duration, int | float) or not nodeid:
                continue
            modules[nodeid.split("::")[0]] += duration
            cpu[nodeid.split("::")[0]] += cpu_time.seconds_of(report)
            gateway = getattr(getattr(report, "node", None), "gateway", None)
            workers[str(getattr(gateway, "id", "main"))] += duration
    if not modules:
        return
    terminalreporter.write_sep("=", "slowest modules (setup, call and teardown summed)")
    for module, seconds in sorted(modules.items(), key=lambda item: -item[1])[:25]:
        used = f" {cpu[module]:7.1f} CPU-s" if cpu[module] else ""
        terminalreporter.write_line(f"{seconds:8.1f}s{used} {module}")
    if any(cpu.values()):
        heaviest = sorted(cpu.items(), key=lambda item: -item[1])[:25]
        terminalreporter.write_sep("=", "heaviest modules (CPU time of all they started)")
        for module, seconds in heaviest:
            terminalreporter.write_line(f"{seconds:8.1f} CPU-s {module}")
        terminalreporter.write_line(f"CPU time in all: {sum(cpu.values()) / 60:.1f} min")
    busy = ", ".join(f"{name} {seconds / 60:.1f} min" for name, seconds in sorted(workers.items()))
    terminalreporter.write_line(f"busy per test worker: {busy}")


@pytest.fixture(scope="session", autouse=True)
def spark_class_archive() -> Path | None:
    """Spark's drivers map a class-data archive of Spark's classes (`devtools.spark_cds`, made
    once and cached, about 30 s): they start in about half the time (test_runner: 45 s against
    57 s side by side). What they compute is the same."""
    path = spark_cds.archive()
    os.environ["SPARK_SUBMIT_OPTS"] = spark_cds.submit_opts(
        path, os.environ.get("SPARK_SUBMIT_OPTS", "")
    )
    return path


@pytest.fixture(scope="session", autouse=True)
def kafka_class_archive() -> Path | None:
    """The embedded brokers map a class-data archive of Kafka's classes (`devtools.kafka_cds`,
    made once and cached, about 10 s): a broker starts on about 3 CPU-s instead of 5, and serves
    about 2 s sooner. What they do is the same."""
    path = kafka_cds.archive()
    os.environ[kafka_cds.VARIABLE] = kafka_cds.jvm_options(
        path, os.environ.get(kafka_cds.VARIABLE, "")
    )
    return path


HELM_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "helm.sh"


@pytest.fixture(scope="session")
def helm() -> str:
    """The cached helm binary (`tools/helm.sh`), built on first use (progress on stderr)."""
    result = subprocess.run(
        [str(HELM_SCRIPT)], capture_output=True, text=True, check=False, timeout=1800
    )
    assert result.returncode == 0, f"tools/helm.sh failed:\n{result.stderr[-3000:]}"
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """A running single-node KRaft broker for the whole session."""
    state: Path = tmp_path_factory.mktemp("kafka")
    with EmbeddedBroker(state) as running:
        yield running


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A running PostgreSQL 15 for the whole session, ready for logical decoding."""
    with PostgresServer(tmp_path_factory.mktemp("postgres")) as running:
        yield running


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A running Redis (no persistence) for the whole session."""
    with RedisServer(tmp_path_factory.mktemp("redis")) as running:
        yield running
