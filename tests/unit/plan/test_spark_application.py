"""SparkApplication manifests of views and jobs: shape, names, owners, injected environment."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from distributary.api.common import SparkSettings
from distributary.api.job import StreamJob
from distributary.api.log import Log
from distributary.api.view import DerivedView
from distributary.plan.applications.runner_spec import RunnerSpec, view_runner_spec
from distributary.plan.applications.spark import (
    RUNNER_FILE,
    application_name,
    env_name,
    job_application,
    job_environment,
    label_value,
    spark_application,
)

OWNER = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "name": "counts",
    "uid": "1234-abcd",
}


def make_log(name: str, partitions: int = 3, **spec: Any) -> Log:
    return Log.model_validate(
        {
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"partitions": partitions, **spec},
        }
    )


def make_view(name: str = "counts", spark: dict[str, Any] | None = None) -> DerivedView:
    return DerivedView.model_validate(
        {
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {
                "inputs": [{"log": "page-views", "alias": "views"}],
                "sql": "SELECT user_id, count(*) AS n FROM views GROUP BY user_id",
                "output": {"mode": "upsert", "key": ["user_id"]},
                "spark": spark or {},
            },
        }
    )


def runner_spec(view: DerivedView) -> RunnerSpec:
    return view_runner_spec(
        view,
        {"views": make_log("page-views", 6)},
        make_log(view.output_log, 6),
        revision=3,
        spec_hash="f00d",
        output_topic=f"shop.{view.metadata.name}.r3",
        checkpoint_root="/checkpoints",
    )


def view_app(view: DerivedView | None = None, **kwargs: Any) -> dict[str, Any]:
    view = view or make_view()
    return spark_application(runner_spec(view), view.spec.spark, image="dist/job:1", **kwargs)


# --- a view's application ---------------------------------------------------------------------


def test_a_view_application_is_a_python_cluster_app_running_the_runner() -> None:
    app = view_app()
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    assert app["kind"] == "SparkApplication"
    spec = app["spec"]
    assert (spec["type"], spec["pythonVersion"], spec["mode"], spec["sparkVersion"]) == (
        "Python",
        "3",
        "cluster",
        "4.1.1",
    )
    assert spec["mainApplicationFile"] == RUNNER_FILE == "local:///opt/distributary/runner.py"
    assert spec["image"] == "dist/job:1"
    assert spec["restartPolicy"] == {"type": "Never"}


def test_the_runner_spec_travels_as_json_in_the_arguments() -> None:
    view = make_view()
    app = view_app(view)
    flag, payload = app["spec"]["arguments"]
    assert flag == "--spec-json"
    assert RunnerSpec.model_validate_json(payload) == runner_spec(view)
    assert json.loads(payload)["consumer_group"] == "distributary.shop.counts.r3"


def test_a_view_application_carries_resources_and_the_service_account() -> None:
    view = make_view(
        spark={
            "driver": {"cores": 2, "memory": "2g"},
            "executor": {"cores": 3, "memory": "4g", "instances": 5},
        }
    )
    app = view_app(view, service_account="spark-runner")
    driver, executor = app["spec"]["driver"], app["spec"]["executor"]
    assert (driver["cores"], driver["memory"], driver["serviceAccount"]) == (
        2,
        "2g",
        "spark-runner",
    )
    assert (executor["cores"], executor["memory"], executor["instances"]) == (3, "4g", 5)
    assert "env" not in driver


def test_the_default_service_account() -> None:
    assert view_app()["spec"]["driver"]["serviceAccount"] == "distributary-spark"


def test_spark_conf_is_the_runner_specs_with_the_users_winning() -> None:
    view = make_view(spark={"sparkConf": {"spark.sql.shuffle.partitions": "48"}})
    conf = view_app(view)["spec"]["sparkConf"]
    assert conf["spark.sql.shuffle.partitions"] == "48"
    assert conf["spark.sql.session.timeZone"] == "UTC"


def test_the_image_in_the_views_spark_settings_wins_over_the_default() -> None:
    assert view_app(make_view(spark={"image": "me/custom:2"}))["spec"]["image"] == "me/custom:2"


def test_labels_name_the_view_and_revision_on_the_app_and_its_pods() -> None:
    app = view_app()
    labels = {
        "app.kubernetes.io/managed-by": "distributary",
        "distributary.dev/view": "counts",
        "distributary.dev/revision": "3",
    }
    assert app["metadata"]["labels"] == labels
    assert app["spec"]["driver"]["labels"] == labels
    assert app["spec"]["executor"]["labels"] == labels
    assert app["metadata"]["annotations"] == {"distributary.dev/spec-hash": "f00d"}


def test_the_application_is_named_for_the_view_and_revision() -> None:
    app = view_app()
    assert app["metadata"]["name"] == "counts-r3"
    assert app["metadata"]["namespace"] == "shop"


def test_an_owner_becomes_the_controlling_owner_reference() -> None:
    (reference,) = view_app(owner=OWNER)["metadata"]["ownerReferences"]
    assert reference == {**OWNER, "controller": True, "blockOwnerDeletion": True}
    assert "ownerReferences" not in view_app()["metadata"]


def test_an_owner_without_a_uid_is_refused() -> None:
    with pytest.raises(ValueError, match="owner is missing uid"):
        view_app(owner={k: v for k, v in OWNER.items() if k != "uid"})


# --- names ----------------------------------------------------------------------------------


DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def test_a_short_name_is_kept_as_it_is() -> None:
    assert application_name("views-per-user", 12) == "views-per-user-r12"


def test_a_job_and_a_view_of_one_name_get_applications_of_their_own() -> None:
    assert application_name("enrich", 1, "StreamJob") == "enrich-job-r1"
    assert application_name("enrich", 1) == "enrich-r1"
    long = "j" * 60
    assert application_name(long, 1, "StreamJob") != application_name(long, 1)
    assert len(application_name(long, 1, "StreamJob")) <= 56


def test_a_long_name_is_shortened_with_a_hash_and_keeps_its_revision() -> None:
    name = "a-very-long-view-name-that-goes-on-and-on-past-the-limit-of-names"
    short = application_name(name, 7)
    assert len(short) <= 56  # room for the operator's -ui-svc and -driver suffixes in 63
    assert short.endswith("-r7")
    assert short.startswith("a-very-long-view-name")
    assert DNS_LABEL.fullmatch(short)
    assert short == application_name(name, 7)
    assert application_name(name + "x", 7) != short


def test_a_name_with_dots_or_a_leading_digit_becomes_a_dns_label() -> None:
    dotted = application_name("clicks.by.country", 1)
    assert DNS_LABEL.fullmatch(dotted)
    assert dotted.startswith("clicks-by-country-")
    # Two names that clean up alike still get different applications.
    assert dotted != application_name("clicks-by-country", 1)
    assert DNS_LABEL.fullmatch(application_name("9lives", 1))


def test_long_label_values_are_shortened_with_a_hash() -> None:
    assert label_value("counts") == "counts"
    long = "v" * 100
    assert len(label_value(long)) == 63
    assert label_value(long) != label_value("v" * 99 + "w")


def test_a_long_view_name_still_gives_valid_labels_and_names() -> None:
    view = make_view(name="n" * 80)
    app = view_app(view)
    assert len(app["metadata"]["name"]) <= 56
    assert len(app["metadata"]["labels"]["distributary.dev/view"]) <= 63


# --- a job's application ----------------------------------------------------------------------


def make_job(**spec: Any) -> StreamJob:
    body = {
        "image": "me/sessionizer:1.4",
        "mainApplicationFile": "local:///app/sessionize.py",
        "arguments": ["--gap", "30m"],
        "env": {"LOG_LEVEL": "debug"},
        "inputs": [
            {"log": "page-views", "startingPosition": {"from": "Latest"}},
            {"log": "users.v2"},
        ],
        "outputs": [{"log": "sessions"}],
    }
    body.update(spec)
    return StreamJob.model_validate(
        {"metadata": {"name": "sessionize", "namespace": "shop"}, "spec": body}
    )


JOB_INPUTS = {"page-views": make_log("page-views", 6), "users.v2": make_log("users.v2", 2)}
JOB_OUTPUTS = {
    "sessions": make_log("sessions", 8, compaction=True, schema="user STRING", key=["user"])
}


def job_app(job: StreamJob | None = None, **kwargs: Any) -> dict[str, Any]:
    return job_application(
        job or make_job(),
        JOB_INPUTS,
        JOB_OUTPUTS,
        revision=2,
        spec_hash="beef",
        checkpoint_root="/ckpt",
        **kwargs,
    )


def test_env_names_upper_case_the_log_and_replace_dashes_and_dots() -> None:
    assert env_name("INPUT", "page-views") == "DISTRIBUTARY_INPUT_PAGE_VIEWS_TOPIC"
    assert env_name("OUTPUT", "users.v2") == "DISTRIBUTARY_OUTPUT_USERS_V2_TOPIC"


def test_a_job_runs_its_own_file_with_its_arguments_and_image() -> None:
    app = job_app()
    spec = app["spec"]
    assert spec["mainApplicationFile"] == "local:///app/sessionize.py"
    assert spec["arguments"] == ["--gap", "30m"]
    assert spec["image"] == "me/sessionizer:1.4"
    assert (spec["type"], spec["mode"], spec["restartPolicy"]) == (
        "Python",
        "cluster",
        {"type": "Never"},
    )
    assert app["metadata"]["name"] == "sessionize-job-r2"  # a view may be named sessionize too
    assert app["metadata"]["labels"]["distributary.dev/job"] == "sessionize"
    assert "distributary.dev/view" not in app["metadata"]["labels"]


def test_a_job_gets_streaming_defaults_from_its_logs_partitions() -> None:
    conf = job_app()["spec"]["sparkConf"]
    assert conf["spark.sql.shuffle.partitions"] == "8"
    user = make_job(spark={"sparkConf": {"spark.sql.shuffle.partitions": "3"}})
    assert job_app(user)["spec"]["sparkConf"]["spark.sql.shuffle.partitions"] == "3"


def test_a_job_gets_topics_checkpoint_group_and_user_env_on_driver_and_executors() -> None:
    app = job_app(bootstrap_servers="kafka:9092")
    driver_env = app["spec"]["driver"]["envVars"]
    assert app["spec"]["executor"]["envVars"] == app["spec"]["driver"]["envVars"]
    assert driver_env["DISTRIBUTARY_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert driver_env["DISTRIBUTARY_INPUT_PAGE_VIEWS_TOPIC"] == "page-views"
    assert driver_env["DISTRIBUTARY_INPUT_USERS_V2_TOPIC"] == "users.v2"
    assert driver_env["DISTRIBUTARY_OUTPUT_SESSIONS_TOPIC"] == "sessions"
    assert driver_env["DISTRIBUTARY_CHECKPOINT_LOCATION"] == "/ckpt/shop/sessionize/r2"
    assert driver_env["DISTRIBUTARY_CONSUMER_GROUP"] == "distributary.shop.sessionize.r2"
    assert driver_env["DISTRIBUTARY_REVISION"] == "2"
    assert driver_env["LOG_LEVEL"] == "debug"


def test_a_job_gets_its_inputs_and_outputs_as_json() -> None:
    env = job_environment(make_job(), JOB_INPUTS, JOB_OUTPUTS, revision=2, checkpoint_root="/c")
    inputs = json.loads(env["DISTRIBUTARY_INPUTS"])
    assert [(i["log"], i["topic"], i["partitions"]) for i in inputs] == [
        ("page-views", "page-views", 6),
        ("users.v2", "users.v2", 2),
    ]
    assert inputs[0]["starting_position"]["kind"] == "latest"
    (output,) = json.loads(env["DISTRIBUTARY_OUTPUTS"])
    assert (output["log"], output["mode"], output["key"], output["partitions"]) == (
        "sessions",
        "upsert",
        ["user"],
        8,
    )


def test_bootstrap_servers_are_only_set_when_known() -> None:
    env = job_environment(make_job(), JOB_INPUTS, JOB_OUTPUTS, revision=1, checkpoint_root="/c")
    assert "DISTRIBUTARY_BOOTSTRAP_SERVERS" not in env


def test_a_missing_job_log_names_the_job_the_field_and_the_fix() -> None:
    with pytest.raises(ValueError, match=r"StreamJob/shop/sessionize: spec\.outputs.*'sessions'"):
        job_application(make_job(), JOB_INPUTS, {}, revision=1, spec_hash="h", checkpoint_root="/c")


def test_two_logs_mapping_to_one_variable_are_refused() -> None:
    job = make_job(inputs=[{"log": "a-b"}, {"log": "a.b"}], outputs=[])
    logs = {"a-b": make_log("a-b"), "a.b": make_log("a.b")}
    with pytest.raises(ValueError, match="DISTRIBUTARY_INPUT_A_B_TOPIC; rename one"):
        job_environment(job, logs, {}, revision=1, checkpoint_root="/c")


def test_a_jobs_spark_image_wins_over_its_image_and_owner_is_set() -> None:
    app = job_app(
        make_job(spark={"image": "me/other:2"}),
        owner={**OWNER, "kind": "StreamJob", "name": "sessionize"},
    )
    assert app["spec"]["image"] == "me/other:2"
    assert app["metadata"]["ownerReferences"][0]["kind"] == "StreamJob"


def test_spark_settings_defaults_give_one_small_driver_and_executor() -> None:
    settings = SparkSettings()
    spec = runner_spec(make_view())
    app = spark_application(spec, settings, image="i")
    assert app["spec"]["driver"]["cores"] == 1
    assert app["spec"]["executor"]["instances"] == 1
