"""The chart's defaults agree with the project: versions, job image, checkpoints.

Read as plain YAML, without helm, so a drift shows up in the fast tests.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import yaml

from distributary.plan.applications import restarts
from distributary.plan.applications.checkpoint_storage import (
    DEFAULT_MOUNT_PATH,
    CheckpointClaim,
    checkpoint_problem,
)
from distributary.plan.pipelines import pipeline
from distributary.sql import UNSAFE_FUNCTIONS, allowed_functions

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "distributary"


def load(name: str) -> Any:
    return yaml.safe_load((CHART / name).read_text())


def test_app_version_is_the_package_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert load("Chart.yaml")["appVersion"] == project["version"]


def test_default_job_image_is_the_planners_default() -> None:
    # An empty spark.jobImage renders as distributary-spark:<appVersion>.
    assert load("values.yaml")["spark"]["jobImage"] == ""
    app_version = load("Chart.yaml")["appVersion"]
    assert pipeline.DEFAULT_IMAGE.split(":") == ["distributary-spark", app_version]


def test_default_checkpoint_root_is_the_planners_default() -> None:
    assert load("values.yaml")["checkpoints"]["root"] == pipeline.DEFAULT_CHECKPOINT_ROOT


def test_default_checkpoints_are_on_a_claim_the_operator_accepts() -> None:
    checkpoints = load("values.yaml")["checkpoints"]
    claim = checkpoints["claim"]
    assert claim["create"] is True
    assert claim["mountPath"] == DEFAULT_MOUNT_PATH
    assert checkpoints["allowNodeLocal"] is False
    mounted = CheckpointClaim("distributary-checkpoints", claim["mountPath"])
    assert checkpoint_problem(checkpoints["root"], "spark-operator", mounted) is None


def test_every_value_is_described_by_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    assert set(load("values.yaml")) <= set(schema["properties"])


def test_default_restarts_are_the_operators_defaults() -> None:
    assert load("values.yaml")["restarts"] == {
        "delaySeconds": restarts.FIRST_DELAY,
        "maxDelaySeconds": restarts.MAX_DELAY,
        "stableAfterSeconds": restarts.STABLE_AFTER,
        "failureWindowSeconds": restarts.FAILURE_WINDOW,
        "failuresBeforeStalled": restarts.FAILURES_BEFORE_STALLED,
    }


def test_no_unsafe_sql_function_is_allowed_by_default_and_the_schema_knows_them_all() -> None:
    assert load("values.yaml")["allowSqlFunctions"] == []
    schema = json.loads((CHART / "values.schema.json").read_text())
    names = schema["properties"]["allowSqlFunctions"]["items"]["enum"]
    assert names == list(UNSAFE_FUNCTIONS)
    assert allowed_functions(names) == frozenset(names)  # what the operator reads back
