"""What a StreamJob spec refuses: environment names, logs named twice, missing essentials."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api import ResourceError, StreamJob, parse_resource
from distributary.api.common import GROUP_VERSION


def _job(**spec: Any) -> dict[str, Any]:
    full = {"image": "app:1", "mainApplicationFile": "local:///app/job.py", **spec}
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "StreamJob",
        "metadata": {"name": "j"},
        "spec": full,
    }


def _only_problem(document: dict[str, Any]) -> str:
    with pytest.raises(ResourceError) as caught:
        parse_resource(document)
    assert caught.value.resource == "StreamJob/j"
    assert len(caught.value.problems) == 1, caught.value.problems
    return caught.value.problems[0]


@pytest.mark.parametrize("name", ["1ST", "MY-VAR", "has space", "É"])
def test_env_names_are_letters_digits_and_underscores(name: str) -> None:
    problem = _only_problem(_job(env={name: "x"}))
    assert f"env: {name!r} is not a valid environment variable name" in problem


def test_env_names_the_operator_sets_are_reserved() -> None:
    problem = _only_problem(_job(env={"DISTRIBUTARY_TOPIC": "x"}))
    assert "env: 'DISTRIBUTARY_TOPIC' starts with DISTRIBUTARY_" in problem
    assert "choose another name" in problem


def test_valid_env_names_are_accepted() -> None:
    job = parse_resource(_job(env={"MODEL_PATH": "/m", "_x1": "y", "distributary_lower": "z"}))
    assert isinstance(job, StreamJob)
    assert set(job.spec.env) == {"MODEL_PATH", "_x1", "distributary_lower"}


@pytest.mark.parametrize("field", ["inputs", "outputs"])
def test_a_log_is_named_once_per_direction(field: str) -> None:
    problem = _only_problem(_job(**{field: [{"log": "orders"}, {"log": "orders"}]}))
    assert f"{field}: log 'orders' is named twice; name it once" in problem


def test_a_job_may_read_and_write_different_logs() -> None:
    job = parse_resource(_job(inputs=[{"log": "orders"}], outputs=[{"log": "scores"}]))
    assert isinstance(job, StreamJob)
    assert [i.log for i in job.spec.inputs] == ["orders"]


@pytest.mark.parametrize("field", ["image", "mainApplicationFile"])
def test_a_job_needs_an_image_and_a_main_file(field: str) -> None:
    document = _job()
    del document["spec"][field]
    assert _only_problem(document) == f"spec.{field}: required field is missing"


def test_a_job_restarts_in_place_or_reprocesses_and_nothing_else() -> None:
    problem = _only_problem(_job(upgrade={"strategy": "Auto"}))
    assert problem.startswith("spec.upgrade.strategy: ")
