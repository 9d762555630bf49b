"""Everything the test beds build or fetch once per machine, built ahead in one go.

On a fresh machine the integration tests need seven programs built from Go modules (etcd,
kube-apiserver with its garbage collector and namespace controller, helm, the Spark operator, kwok,
CoreDNS, the kubelet),
several CPU-minutes of compiling, Kafka Connect's jars, and the three images (`devtools.images`,
about two minutes with pip's cache filled by `make install`). Built lazily, the first test that
needs each one waits for it while the other test worker waits for the same lock. `make test` starts
this instead as soon as the integration tests start, while the tests that need none of it run first
(the Kubernetes tests are scheduled last, `tests/integration/conftest.py`). Each part is cached and
locked by its own builder, so a test that needs a part before it is ready waits for the one build,
and a machine that has them all pays nothing.

    python -m distributary.devtools.builds      build whatever is missing, one part after another
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

from distributary import jvm_operators
from distributary.artifacts import KAFKA_CONNECT, jars
from distributary.devtools import controlplane, dns, images, node, sparkoperator
from distributary.errors import DistributaryError


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
    ("Distributary's JVM operators", lambda: jvm_operators.operators_jar(required=False)),
    ("Kafka Connect jars", lambda: jars(KAFKA_CONNECT, quiet=True)),
    ("etcd", lambda: controlplane.etcd_binary(quiet=True)),
    ("kube-apiserver and kube-controllers", lambda: controlplane.build(quiet=True)),
    ("helm", _helm),
    ("the Spark operator", lambda: sparkoperator.spark_operator_programs().build(quiet=True)),
    ("the images", lambda: images.build_all(list(images.IMAGES))),
    ("CoreDNS", lambda: dns.coredns_binary(quiet=True)),
    ("the kubelet", lambda: node.kubelet_binary(quiet=True)),
    # Last: the pods tests, whose one worker is the suite's longest chain, need none of it.
    ("kwok", lambda: sparkoperator.kwok_programs().build(quiet=True)),
]


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
    # At the tests' own priority: with three test workers the machine has little idle time, and
    # builds niced below the tests got a tenth of the CPU, so the Kubernetes tests waited for them.
    sys.exit(main())
