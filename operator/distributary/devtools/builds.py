"""Everything the test beds build or fetch once per machine, built ahead in one go.

On a fresh machine the integration tests need five programs built from Go modules (etcd,
kube-apiserver with kube-controller-manager, helm, the Spark operator, kwok), about a quarter of
an hour of compiling on two cores, and Kafka Connect's jars. Built lazily, the first test that
needs each one waits for it while the other test worker waits for the same lock. `make test`
starts this instead as soon as the integration tests start, at a lower priority, while the
tests that need none of it run first (the Kubernetes tests are scheduled last,
`tests/integration/conftest.py`). Each part is cached and locked
by its own builder, so a test that needs a part before it is ready waits for the one build, and
a machine that has them all pays nothing.

    python -m distributary.devtools.builds                 build whatever is missing, one part
                                                           after another
    python -m distributary.devtools.builds --test-workers  how many integration test workers
                                                           `make test` runs on this machine

Two test workers while the Go programs are still to be built: the builds run in the idle time
two workers leave (a fifth of two cores), and a third worker would take it from them, so that
the Kubernetes tests wait longer for their control plane. Once everything is built, three: the
tests themselves wait on triggers and back-offs for about a quarter of the time, and a third
worker fills it (integration 31 min 6 s instead of 37 min 46 s on the same machine, at least
16.3 GB of memory free; docs/performance.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from distributary.artifacts import KAFKA_CONNECT, cache_root, jars
from distributary.devtools import controlplane, sparkoperator
from distributary.devtools.gobuild import checkout_module
from distributary.errors import DistributaryError

WORKERS_WHILE_BUILDING = 2
WORKERS_WHEN_BUILT = 3


def _helm() -> None:
    subprocess.run(
        ["bash", str(sparkoperator.helm_script())],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=3600,
    )


# The broker's and Spark's jars and Spark's class-data archive are what the first tests need at
# once: their fixtures fetch and make them. These are needed later, and take long.
PARTS: list[tuple[str, Callable[[], object]]] = [
    ("Kafka Connect jars", lambda: jars(KAFKA_CONNECT, quiet=True)),
    ("etcd", lambda: controlplane.etcd_binary(quiet=True)),
    ("kube-apiserver and kube-controller-manager", lambda: controlplane.build(quiet=True)),
    ("helm", _helm),
    ("the Spark operator", lambda: sparkoperator.spark_operator_programs().build(quiet=True)),
    ("kwok", lambda: sparkoperator.kwok_programs().build(quiet=True)),
]


def helm_binary() -> Path:
    """Where `tools/helm.sh` keeps the helm it builds (the version `testbed/go.mod` requires)."""
    go_mod = (checkout_module("testbed") / "go.mod").read_text()
    found = re.search(r"^\s*helm\.sh/helm/v3\s+(\S+)", go_mod, re.MULTILINE)
    return cache_root() / "bin" / f"helm-{found.group(1) if found else 'unknown'}"


def unbuilt() -> list[str]:
    """The Go programs this machine has not built yet (nothing is built to answer)."""
    programs = {
        "etcd": controlplane.etcd_programs(),
        "kube-apiserver and kube-controller-manager": controlplane.programs(
            controlplane.go_sources()
        ),
        "the Spark operator": sparkoperator.spark_operator_programs(),
        "kwok": sparkoperator.kwok_programs(),
    }
    missing = [name for name, p in programs.items() if not (p.target() / ".complete").exists()]
    return missing if helm_binary().is_file() else [*missing, "helm"]


def test_workers() -> int:
    """How many integration test workers suit this machine now (the module's docstring)."""
    try:
        return WORKERS_WHILE_BUILDING if unbuilt() else WORKERS_WHEN_BUILT
    except (DistributaryError, OSError):
        return WORKERS_WHILE_BUILDING


def main() -> int:
    """Build every part that is missing; a part that fails is reported and the rest go on (the
    test that needs it builds it again and shows why it fails)."""
    failed = 0
    for name, build in PARTS:
        started = time.monotonic()
        try:
            build()
        except (DistributaryError, OSError, subprocess.SubprocessError) as error:
            failed += 1
            print(f"builds: {name} failed: {error}", file=sys.stderr, flush=True)
            continue
        took = time.monotonic() - started
        if took > 1:
            print(f"builds: {name} ready in {took:.0f}s", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--test-workers"]:
        print(test_workers())
        sys.exit(0)
    os.nice(10)  # the tests running meanwhile come first
    sys.exit(main())
