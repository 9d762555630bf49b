"""The operator's setting that names the Spark drivers' service account: read from its flag or
environment variable (the chart sets it), and given to the driver of every application the
spark-operator runtime applies, a view's or a job's."""

from __future__ import annotations

from typing import Any

from tests.unit.plan.test_spark_application import job_app, make_job, make_view, runner_spec

from distributary.backends.spark_operator import SparkOperatorRuntime
from distributary.cli.operator import operator
from distributary.controllers.settings import OperatorSettings
from distributary.plan.applications.spark import DEFAULT_SERVICE_ACCOUNT


class AppliedKube:
    """Kube that has no application yet and keeps what is applied."""

    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []

    def get(self, *_: Any) -> None:
        return None

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.applied.append(manifest)
        return manifest


def test_the_flag_reads_the_variable_the_chart_sets() -> None:
    (option,) = [p for p in operator.params if p.name == "spark_service_account"]
    assert option.envvar == "DISTRIBUTARY_SPARK_SERVICE_ACCOUNT"
    assert option.default == DEFAULT_SERVICE_ACCOUNT
    assert (
        OperatorSettings(bootstrap_servers="k:9092").spark_service_account == "distributary-spark"
    )


def test_a_views_driver_runs_as_the_account() -> None:
    kube = AppliedKube()
    view = make_view()
    runtime = SparkOperatorRuntime(kube, "dist/job:1", service_account="spark")  # type: ignore[arg-type]
    runtime.view_app(view, runner_spec(view)).start()
    (applied,) = kube.applied
    assert applied["spec"]["driver"]["serviceAccount"] == "spark"


def test_a_jobs_driver_runs_as_the_account() -> None:
    kube = AppliedKube()
    runtime = SparkOperatorRuntime(kube, "dist/job:1", service_account="spark")  # type: ignore[arg-type]
    manifest = job_app()
    runtime.job_app(make_job(), 1, None, manifest).start()
    (applied,) = kube.applied
    assert applied["spec"]["driver"]["serviceAccount"] == "spark"
    assert manifest["spec"]["driver"]["serviceAccount"] == DEFAULT_SERVICE_ACCOUNT  # untouched
