"""`operator` and `run` take the one restart policy from the same five flags."""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

from distributary.cli import main
from distributary.cli.options import RESTART_POLICY
from distributary.plan.applications.restarts import RestartPolicy

FLAGS = (
    "--restart-delay",
    "--max-restart-delay",
    "--stable-after",
    "--failure-window",
    "--failures-before-stalled",
)


def policy_of(*args: str, env: dict[str, str] | None = None) -> RestartPolicy:
    seen: dict[str, Any] = {}

    @click.command()
    @click.option("--name", default="x")
    @RESTART_POLICY
    def command(name: str, restart_policy: RestartPolicy) -> None:
        seen["name"], seen["policy"] = name, restart_policy

    result = CliRunner().invoke(command, list(args), env=env or {})
    assert result.exit_code == 0, result.output
    assert seen["name"] == "x"
    return seen["policy"]


def test_the_defaults_are_the_documented_policy() -> None:
    assert policy_of() == RestartPolicy()


def test_each_flag_sets_its_part_of_the_policy() -> None:
    policy = policy_of(
        "--restart-delay", "1", "--max-restart-delay", "4", "--stable-after", "30",
        "--failure-window", "60", "--failures-before-stalled", "2",
    )  # fmt: skip
    assert policy == RestartPolicy(1.0, 4.0, 30.0, 60.0, 2)


def test_the_environment_sets_it_too_and_the_longest_delay_is_never_below_the_first() -> None:
    policy = policy_of(
        env={"DISTRIBUTARY_RESTART_DELAY": "20", "DISTRIBUTARY_MAX_RESTART_DELAY": "5"}
    )
    assert (policy.first_delay, policy.max_delay) == (20.0, 20.0)


def test_a_delay_below_a_tenth_of_a_second_is_refused_naming_the_flag() -> None:
    @click.command()
    @RESTART_POLICY
    def command(restart_policy: RestartPolicy) -> None:
        raise AssertionError("not reached")

    result = CliRunner().invoke(command, ["--restart-delay", "0"])
    assert result.exit_code == 2
    assert "--restart-delay" in result.output


@pytest.mark.parametrize("name", ["operator", "run"])
def test_operator_and_run_both_take_the_five_flags(name: str) -> None:
    with click.Context(main) as context:
        command = main.get_command(context, name)
    assert command is not None
    flags = {flag for param in command.params for flag in getattr(param, "opts", [])}
    assert set(FLAGS) <= flags
