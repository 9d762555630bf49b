"""Which checkpoint file manager a revision's session gets (`runner.query.checkpoint_files`):
Distributary's local one where the runner's JVM has the operators' jar, Spark's FileSystem-based
one where it does not (a JVM without the jar would fail the query at its start), and whatever
the view's own `sparkConf` named, untouched. The manager itself writes a real query's
checkpoint in `tests/integration/test_local_run.py`."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("pyspark")

from py4j.java_gateway import JavaPackage

from distributary.plan.applications.runner_spec import (
    LOCAL_CHECKPOINT_FILES,
    SPARK_LOCAL_CHECKPOINT_FILES,
)
from distributary.runner.query import checkpoint_files


def spark_whose_jvm_finds(found: Any) -> Any:
    """A session whose JVM answers `found` for Distributary's manager class."""
    checkpoints = SimpleNamespace(LocalCheckpointFiles=found)
    jvm = SimpleNamespace(
        dev=SimpleNamespace(distributary=SimpleNamespace(checkpoints=checkpoints))
    )
    return SimpleNamespace(_jvm=jvm)


def test_ours_where_the_jvm_has_it() -> None:
    spark = spark_whose_jvm_finds(object())  # py4j's JavaClass for a class it found
    assert checkpoint_files(spark, LOCAL_CHECKPOINT_FILES) == LOCAL_CHECKPOINT_FILES


def test_sparks_where_the_jvm_lacks_the_operators_jar() -> None:
    missing = JavaPackage(LOCAL_CHECKPOINT_FILES, None)  # py4j's answer for a class not found
    spark = spark_whose_jvm_finds(missing)
    assert checkpoint_files(spark, LOCAL_CHECKPOINT_FILES) == SPARK_LOCAL_CHECKPOINT_FILES


def test_a_manager_the_view_named_is_left_as_it_is() -> None:
    spark = spark_whose_jvm_finds(JavaPackage("x", None))
    named = "com.example.S3CheckpointFiles"
    assert checkpoint_files(spark, named) == named
    assert checkpoint_files(spark, SPARK_LOCAL_CHECKPOINT_FILES) == SPARK_LOCAL_CHECKPOINT_FILES
