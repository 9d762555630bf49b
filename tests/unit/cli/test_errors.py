"""How a command ends on an error: a Distributary error is one line and exit status 1, anything
else is a bug and keeps its traceback."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from distributary.api import ResourceError
from distributary.artifacts import ArtifactError
from distributary.cli.errors import ReportingGroup, UserError
from distributary.devtools.controlplane import ControlPlaneError
from distributary.errors import DistributaryError
from distributary.kafka.admin import KafkaAdminError
from distributary.kafka.records import RecordsError
from distributary.kube.errors import KubeError
from distributary.local.broker import BrokerError
from distributary.local.run import RunError
from distributary.local.state import RunStateError
from distributary.plan.revisions.positions import CoverError, OffsetsError
from distributary.sql import SqlError
from distributary.streamjob import StreamJobError


def group_raising(error: Exception) -> click.Group:
    """A group like `distributary` with one command, `fail`, that raises `error`."""

    @click.group(cls=ReportingGroup)
    def group() -> None:
        """A group under test."""

    @group.command()
    def fail() -> None:
        raise error

    return group


@pytest.mark.parametrize(
    "error",
    [
        KubeError("DerivedView shop/urls: forbidden: grant the operator get on derivedviews"),
        RunStateError("/tmp/state/run.json is corrupt: delete it"),
        UserError("--produce x: write LOG=FILE"),
    ],
)
def test_a_distributary_error_is_one_line_and_exit_status_1(error: DistributaryError) -> None:
    result = CliRunner().invoke(group_raising(error), ["fail"])
    assert isinstance(result.exception, SystemExit)
    assert result.exit_code == 1
    assert result.stderr == f"error: {error}\n"
    assert result.stdout == ""


def test_a_bug_keeps_its_traceback() -> None:
    result = CliRunner().invoke(group_raising(KeyError("oops")), ["fail"])
    assert isinstance(result.exception, KeyError)
    assert result.exc_info is not None


def test_every_project_error_is_a_distributary_error_and_keeps_its_builtin_base() -> None:
    for error, builtin in [
        (ArtifactError, RuntimeError),
        (OffsetsError, ValueError),
        (CoverError, ValueError),
        (ResourceError, ValueError),
        (SqlError, ValueError),
        (RecordsError, RuntimeError),
        (KafkaAdminError, RuntimeError),
        (KubeError, RuntimeError),
        (BrokerError, RuntimeError),
        (RunStateError, RuntimeError),
        (RunError, RuntimeError),
        (StreamJobError, RuntimeError),
        (ControlPlaneError, RuntimeError),
        (UserError, click.ClickException),
    ]:
        assert issubclass(error, DistributaryError), error
        assert issubclass(error, builtin), error
