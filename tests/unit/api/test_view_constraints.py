"""What a DerivedView spec refuses: output modes and keys, aliases, SQL, Spark settings."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api import DerivedView, ResourceError, parse_resource
from distributary.api.common import GROUP_VERSION


def _view(**spec: Any) -> dict[str, Any]:
    full = {"inputs": [{"log": "clicks", "alias": "c"}], "sql": "SELECT * FROM c", **spec}
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "DerivedView",
        "metadata": {"name": "v"},
        "spec": full,
    }


def _only_problem(document: dict[str, Any]) -> str:
    with pytest.raises(ResourceError) as caught:
        parse_resource(document)
    assert caught.value.resource == "DerivedView/v"
    assert len(caught.value.problems) == 1, caught.value.problems
    return caught.value.problems[0]


@pytest.mark.parametrize("output", [{"mode": "upsert"}, {"mode": "upsert", "key": []}])
def test_an_upsert_view_needs_a_key(output: dict[str, Any]) -> None:
    problem = _only_problem(_view(output=output))
    assert problem.startswith("spec.output: ")
    assert "output.key is required when output.mode is upsert" in problem


def test_an_append_view_may_not_have_a_key() -> None:
    problem = _only_problem(_view(output={"mode": "append", "key": ["user_id"]}))
    assert problem.startswith("spec.output: ")
    assert "remove it or set mode: upsert" in problem


def test_an_upsert_view_with_a_key_is_accepted() -> None:
    view = parse_resource(_view(output={"mode": "upsert", "key": ["user_id", "day"]}))
    assert isinstance(view, DerivedView)
    assert view.spec.output.key == ["user_id", "day"]


def test_an_unknown_output_mode_is_refused() -> None:
    assert _only_problem(_view(output={"mode": "merge"})).startswith("spec.output.mode: ")


@pytest.mark.parametrize("aliases", [("a", "a"), ("a", "A")])
def test_two_inputs_may_not_share_an_alias(aliases: tuple[str, str]) -> None:
    inputs = [{"log": "clicks", "alias": aliases[0]}, {"log": "views", "alias": aliases[1]}]
    problem = _only_problem(_view(inputs=inputs))
    assert f"inputs: alias {aliases[1]!r} is used twice" in problem
    assert "give each input its own alias" in problem


@pytest.mark.parametrize("alias", ["page-views", "1st", "a b", ""])
def test_an_alias_must_be_a_plain_sql_identifier(alias: str) -> None:
    problem = _only_problem(_view(inputs=[{"log": "clicks", "alias": alias}]))
    assert problem.startswith("spec.inputs[0].alias: ")


def test_an_input_names_a_log_by_its_kubernetes_name() -> None:
    problem = _only_problem(_view(inputs=[{"log": "Clicks_Raw", "alias": "c"}]))
    assert problem.startswith("spec.inputs[0].log: ")


def test_a_view_reads_at_least_one_and_at_most_sixteen_inputs() -> None:
    assert _only_problem(_view(inputs=[])).startswith("spec.inputs: ")
    many = [{"log": f"l{i}", "alias": f"a{i}"} for i in range(17)]
    assert _only_problem(_view(inputs=many)).startswith("spec.inputs: ")


def test_a_view_needs_sql() -> None:
    assert _only_problem(_view(sql="")).startswith("spec.sql: ")
    document = _view()
    del document["spec"]["sql"]
    assert _only_problem(document) == "spec.sql: required field is missing"


def test_spark_conf_keys_start_with_spark() -> None:
    problem = _only_problem(_view(spark={"sparkConf": {"sql.shuffle.partitions": "4"}}))
    assert problem.startswith("spec.spark.sparkConf: ")
    assert "sparkConf key 'sql.shuffle.partitions' does not start with 'spark.'" in problem


@pytest.mark.parametrize("trigger", ["5 s", "1d", "soon", "5"])
def test_a_trigger_is_an_interval_or_available_now(trigger: str) -> None:
    assert _only_problem(_view(spark={"trigger": trigger})).startswith("spec.spark.trigger: ")


@pytest.mark.parametrize("trigger", ["500ms", "5s", "1m", "1h", "AvailableNow"])
def test_triggers_spark_accepts_are_accepted(trigger: str) -> None:
    view = parse_resource(_view(spark={"trigger": trigger}))
    assert isinstance(view, DerivedView)
    assert view.spec.spark.trigger == trigger


@pytest.mark.parametrize("memory", ["1Gi", "512M", "0g", "2 g"])
def test_memory_is_written_in_sparks_units(memory: str) -> None:
    problem = _only_problem(_view(spark={"driver": {"memory": memory}}))
    assert problem.startswith("spec.spark.driver.memory: ")


@pytest.mark.parametrize(
    ("executor", "field"),
    [
        ({"instances": 0}, "instances"),
        ({"instances": 1001}, "instances"),
        ({"cores": 0}, "cores"),
        ({"cores": 65}, "cores"),
    ],
)
def test_executor_counts_and_cores_are_bounded(executor: dict[str, int], field: str) -> None:
    problem = _only_problem(_view(spark={"executor": executor}))
    assert problem.startswith(f"spec.spark.executor.{field}: ")


def test_max_offsets_per_trigger_is_positive() -> None:
    problem = _only_problem(_view(spark={"maxOffsetsPerTrigger": 0}))
    assert problem.startswith("spec.spark.maxOffsetsPerTrigger: ")


@pytest.mark.parametrize(
    ("upgrade", "field"),
    [
        ({"strategy": "Blue"}, "strategy"),
        ({"cutoverMaxLag": -1}, "cutoverMaxLag"),
        ({"cutoverWindow": "ten"}, "cutoverWindow"),
        ({"retireAfter": "1y"}, "retireAfter"),
    ],
)
def test_upgrade_settings_are_checked(upgrade: dict[str, Any], field: str) -> None:
    assert _only_problem(_view(upgrade=upgrade)).startswith(f"spec.upgrade.{field}: ")


def test_dead_letters_are_kept_a_week_unless_the_view_says_otherwise() -> None:
    default = parse_resource(_view())
    assert isinstance(default, DerivedView)
    assert default.spec.dead_letters.retention == "7d"
    assert default.spec.dead_letters.topic_configs() == {
        "cleanup.policy": "delete",
        "retention.ms": "604800000",
    }
    set_ = parse_resource(_view(deadLetters={"retention": "1m"}))
    assert isinstance(set_, DerivedView)
    assert set_.spec.dead_letters.topic_configs()["retention.ms"] == "60000"


@pytest.mark.parametrize("retention", ["7 days", "1y", "", 7])
def test_the_dead_letter_retention_is_a_duration(retention: Any) -> None:
    problem = _only_problem(_view(deadLetters={"retention": retention}))
    assert problem.startswith("spec.deadLetters.retention: ")


@pytest.mark.parametrize("retention", ["0s", "0d", "59s", "59999ms", "500ms"])
def test_the_dead_letter_retention_is_at_least_a_minute(retention: str) -> None:
    problem = _only_problem(_view(deadLetters={"retention": retention}))
    assert problem == (
        f"spec.deadLetters.retention: {retention!r} is less than a minute: dead letters would "
        "be deleted before anyone could read them; give 1m or more (the default is 7d)"
    )


def test_dead_letters_take_no_other_setting() -> None:
    problem = _only_problem(_view(deadLetters={"compaction": True}))
    assert problem.startswith("spec.deadLetters.compaction: unknown field")
