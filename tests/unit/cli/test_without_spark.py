"""The lean install (no `spark` extra, as in the operator's image): the commands that run Spark
stop with one line naming the extra, and the others work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from distributary.cli import main

CLICKSTREAM = Path(__file__).resolve().parents[3] / "examples" / "clickstream"


@pytest.fixture
def without_pyspark(monkeypatch: pytest.MonkeyPatch) -> None:
    """`import pyspark` fails, as where the spark extra is not installed."""
    for name in [n for n in sys.modules if n.split(".")[0] in ("pyspark", "py4j")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark", None)


@pytest.mark.usefixtures("without_pyspark")
@pytest.mark.parametrize(
    ("args", "command"),
    [
        (["run", str(CLICKSTREAM), "--until-caught-up"], "run"),
        (["validate", str(CLICKSTREAM), "--spark"], "validate --spark"),
    ],
)
def test_a_spark_command_names_the_extra_in_one_line(args: list[str], command: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"error: distributary {command} needs Spark, and pyspark is not installed here: "
        "install the spark extra (pip install 'distributary[spark]')"
    ]


@pytest.mark.usefixtures("without_pyspark")
def test_validate_without_spark_needs_no_pyspark() -> None:
    result = CliRunner().invoke(main, ["validate", str(CLICKSTREAM)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("valid: ")
