"""The images, built on this machine from their Dockerfiles (`make images`: buildah on a Debian
base made by debootstrap, no registry), run what they are for in containers that runc runs as a
node's runtime would.

- The operator image runs `distributary operator` as its own non-root user (10001).
- The job image runs a view through its entry point's `driver` command, as a driver pod does
  (spark-submit in client mode, here with a local master): the image's Spark (pyspark's), the
  Kafka connector from its jars, the runner from `local:///opt/distributary/runner.py` (the file
  every SparkApplication names), as Spark's user (185), reading the test broker on loopback and
  writing its output log exactly once. Stopped with SIGTERM, as the kubelet stops a pod, the
  runner gets the signal, finishes its batch and the container exits 0 (sent to spark-submit,
  the JVM exited at once with 143). Its checkpoint, on a host folder bound in, belongs to uid
  185.

The first build on a machine downloads Debian's packages, pyspark and the connector's jars
(minutes); later runs use the archives cached under ~/.cache/distributary/images.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from tests.integration.spark_pipelines import (
    PipelineRun,
    as_multiset,
    produce,
    read_topic,
    values,
)

from distributary.devtools.containers import Container
from distributary.devtools.images import OPERATOR, SPARK, build_all
from distributary.local.broker import EmbeddedBroker

PIPELINE = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: img-events}
spec: {partitions: 2, schema: "who STRING, amount INT"}
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: img-big}
spec:
  inputs: [{log: img-events, alias: e}]
  sql: SELECT upper(who) AS who, amount * 10 AS amount FROM e WHERE amount >= 3
  spark: {trigger: 1s}
"""
EVENTS = [{"who": f"u{i}", "amount": i % 7} for i in range(60)]
EXPECTED = [{"who": f"U{i}", "amount": (i % 7) * 10} for i in range(60) if i % 7 >= 3]
SPARK_UID = 185


@pytest.fixture(scope="module")
def images() -> None:
    """Both images, built unless cached."""
    build_all(["operator", "spark"])


def output_of(container: Container, log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else "(no output)"


def test_the_operator_image_runs_the_operator_as_its_non_root_user(
    images: None, tmp_path: Path
) -> None:
    log = tmp_path / "operator.log"
    with Container(OPERATOR, ["operator", "--help"], log) as container:
        assert container.wait(120) == 0, output_of(container, log)
    assert "--topic-backend" in log.read_text()
    who = tmp_path / "id.log"
    command = ["-c", "import os, distributary; print(os.getuid(), os.getgid())"]
    with Container(OPERATOR, command, who, entrypoint=["python"]) as container:
        assert container.wait(120) == 0, output_of(container, who)
    assert who.read_text().split() == ["10001", "10001"]


def test_a_view_runs_in_the_job_image_as_sparks_user(
    images: None, tmp_path: Path, broker: EmbeddedBroker
) -> None:
    run = PipelineRun(tmp_path / "pipeline", PIPELINE, broker.bootstrap_servers)
    try:
        view_in_a_container(run, tmp_path, broker)
    finally:
        run.stop()  # its clients and event loop (it started no runner of its own)


def view_in_a_container(run: PipelineRun, tmp_path: Path, broker: EmbeddedBroker) -> None:
    spec = run.view("img-big")
    schema = run.schema("img-events")
    produce(
        broker.bootstrap_servers,
        run.topics["img-events"],
        [(i % 2, None, schema.encode(e).value) for i, e in enumerate(EVENTS)],
    )
    # The spec as a SparkApplication would carry it: the image's Spark and jars, not the host's;
    # its checkpoint on a host folder bound in at the same path, owned by Spark's user.
    checkpoints = Path(spec.checkpoint_location.removeprefix("file://")).parent
    checkpoints.mkdir(parents=True, exist_ok=True)
    os.chown(checkpoints, SPARK_UID, SPARK_UID)
    conf = {k: v for k, v in spec.spark_conf.items() if k not in ("spark.jars", "spark.master")}
    conf |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    in_image = spec.model_copy(update={"spark_conf": conf})
    # The driver's command as a driver pod's (the entry point's `driver`), in local mode.
    args = [
        "driver",
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "local:///opt/distributary/runner.py",
        "--spec-json",
        in_image.model_dump_json(),
    ]
    log = tmp_path / "driver.log"
    output = spec.output
    assert output is not None
    env = {"SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1"}
    binds = {str(checkpoints): str(checkpoints)}
    with Container(SPARK, args, log, env=env, binds=binds) as container:
        deadline = time.monotonic() + 300
        while len(read_topic(broker.bootstrap_servers, output.topic)) < len(EXPECTED):
            assert container.poll() is None, f"the driver exited:\n{output_of(container, log)}"
            assert time.monotonic() < deadline, f"no output in 300 s:\n{output_of(container, log)}"
            time.sleep(2)
        code = container.stop(120)
        assert code == 0, f"stopped with SIGTERM, exit {code}:\n{output_of(container, log)}"
    assert values(read_topic(broker.bootstrap_servers, output.topic)) == as_multiset(EXPECTED)
    written = [p for p in checkpoints.rglob("*") if p.is_file()]
    assert written, "the view wrote no checkpoint"
    assert {p.stat().st_uid for p in written} == {SPARK_UID}
