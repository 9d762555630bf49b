"""Each command loads what it needs: the processes of a local pipeline (`run`, `tail`,
`produce`, `wait` on a state folder, `validate`) start without the operator's Kubernetes
clients, and every command is still listed and runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from distributary.cli import COMMANDS, main

PROBE = """
import json, sys
from distributary.cli import main
command = main.get_command(None, sys.argv[1])
print(json.dumps({
    "command": command.name,
    "loaded": sorted(m for m in ("kopf", "kubernetes", "aiohttp", "pyspark") if m in sys.modules),
}))
"""


def loaded_by(name: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, name], capture_output=True, text=True, check=True, timeout=60
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("name", ["run", "tail", "produce", "wait", "validate", "graph"])
def test_a_local_command_loads_no_kubernetes_client(name: str) -> None:
    assert loaded_by(name) == {"command": name, "loaded": []}


def test_the_operator_command_loads_the_operator() -> None:
    assert loaded_by("operator")["loaded"] == ["aiohttp", "kopf", "kubernetes"]


def test_every_command_is_listed_in_the_help() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    listed = [
        line.split()[0] for line in result.output.split("Commands:")[1].splitlines() if line.strip()
    ]
    assert listed == sorted(COMMANDS)


def test_an_unknown_command_is_refused_with_the_usual_message() -> None:
    result = CliRunner().invoke(main, ["runn"])
    assert result.exit_code == 2
    assert "No such command 'runn'" in result.output
