"""The operator image's Dockerfile agrees with the project and the Helm chart that runs it.

No Docker engine is needed: the Dockerfile is read as text and what it declares (Python version,
user, ports, entry point, tag) compared with pyproject.toml, the chart's values and templates, and
the `distributary operator` command itself.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import click
import yaml

from distributary.cli import main
from distributary.cli.operator import operator

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "operator_image" / "Dockerfile"
CHART = ROOT / "charts" / "distributary"


def text() -> str:
    return DOCKERFILE.read_text()


def build_args() -> dict[str, str]:
    """The ARG defaults declared before the first FROM."""
    head = text().split("\nFROM ", 1)[0]
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", head, re.MULTILINE))


def substituted(value: str) -> str:
    args = build_args()
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], value)


def instructions(name: str) -> list[str]:
    """The arguments of every `name` instruction (e.g. FROM, EXPOSE), in order."""
    return re.findall(rf"^{name} (.+)$", text(), re.MULTILINE)


def final_stage() -> str:
    return "FROM " + text().split("\nFROM ")[-1]


def project() -> dict[str, Any]:
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text()))


def values() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "values.yaml").read_text()))


def app_version() -> str:
    return str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])


def exec_form(instruction: str) -> list[str]:
    (found,) = instructions(instruction)
    parsed = json.loads(found)
    assert isinstance(parsed, list), f"{instruction} must be in exec form (a JSON list)"
    return [str(item) for item in parsed]


def option_default(name: str) -> Any:
    (param,) = [p for p in operator.params if p.name == name]
    return param.default


def test_python_is_debians_and_the_lowest_version_the_project_allows() -> None:
    """Bookworm's python3 is 3.11, the lowest version requires-python allows."""
    assert build_args()["BASE"] == "debian:bookworm-slim"
    minimum = re.fullmatch(r">=(\d+\.\d+)", project()["project"]["requires-python"])
    assert minimum is not None
    assert minimum.group(1) == "3.11"
    assert project()["tool"]["mypy"]["python_version"] == minimum.group(1)
    assert "apt-get install -y -qq --no-install-recommends python3 python3-venv" in text()


def test_every_stage_stands_on_the_python_stage_made_from_the_base() -> None:
    """The venv is copied between identical Pythons: the build stage and the image are both the
    `python` stage, itself the base with Debian's python3."""
    bases = [line.split()[0] for line in instructions("FROM")]
    assert bases == ["${BASE}", "python", "python"]
    assert instructions("FROM")[0] == "${BASE} AS python"


def test_the_project_is_installed_from_the_hash_lock_without_extras() -> None:
    build = text().split("\nFROM ")[2]
    assert "COPY operator_image/requirements.lock /tmp/requirements.lock" in build
    assert (
        "/opt/distributary/venv/bin/pip install --quiet --require-hashes -r /tmp/requirements.lock"
        in build
    )
    assert '"$venv/bin/pip" install --quiet --no-deps /tmp/distributary;' in build
    assert (
        "ARG SOURCE_DATE_EPOCH=0" in build
    )  # hash-checked byte code: the same sources, same bytes
    assert "[dev]" not in text()
    assert "[spark]" not in text()
    assert '"$venv/bin/python" /tmp/check.py' in build
    assert 'find_spec("pyspark") is None' in (ROOT / "operator_image" / "check.py").read_text()
    base = project()["project"]["dependencies"]
    assert not any(d.startswith("pyspark") for d in base), "the base install brings pyspark"


def test_entry_point_is_the_console_script_and_the_default_command_the_operator() -> None:
    scripts = project()["project"]["scripts"]
    assert exec_form("ENTRYPOINT") == ["distributary"]
    assert scripts["distributary"] == "distributary.cli:main"
    assert exec_form("CMD") == ["operator"]
    with click.Context(main) as context:
        assert main.get_command(context, "operator") is operator


def test_the_charts_arguments_start_with_the_operator_command_and_name_its_flags() -> None:
    template = (CHART / "templates" / "deployment.yaml").read_text()
    args = template.split("          args:\n", 1)[1].split("\n          env:", 1)[0]
    first = args.splitlines()[0].strip()
    assert first == "- operator"  # replaces CMD: `distributary operator ...`
    flags = set(re.findall(r'printf "--([a-z-]+)=', args))
    assert flags >= {"health-port", "metrics-port"}
    known = {name for p in operator.params for name in p.opts}
    assert {f"--{flag}" for flag in flags} <= known


def test_exposed_ports_are_the_charts_and_the_commands_defaults() -> None:
    exposed = sorted(int(port) for line in instructions("EXPOSE") for port in line.split())
    ports = values()["ports"]
    assert exposed == sorted([ports["health"], ports["metrics"]])
    assert option_default("health_port") == ports["health"]
    assert option_default("metrics_port") == ports["metrics"]


def test_the_probes_path_is_the_operators_liveness_endpoint() -> None:
    template = (CHART / "templates" / "deployment.yaml").read_text()
    paths = set(re.findall(r"httpGet:\s+path: (\S+)\s+port: health", template))
    assert paths == {"/healthz"}
    source = (ROOT / "operator" / "distributary" / "controllers" / "main.py").read_text()
    assert 'liveness_endpoint=f"http://0.0.0.0:{health_port}/healthz"' in source


def test_runs_as_the_charts_non_root_user() -> None:
    users = re.findall(r"^USER (\S+)$", final_stage(), re.MULTILINE)
    assert users, "the image must say which user it runs as"
    context = values()["podSecurityContext"]
    assert users[-1] == f"{context['runAsUser']}:{context['runAsGroup']}"
    assert context["runAsNonRoot"] is True
    python = text().split("\nFROM ")[1]  # the stage the image is (`FROM python`)
    assert f"--uid {context['runAsUser']}" in python
    assert f"--gid {context['runAsGroup']}" in python
    assert final_stage().splitlines()[0] == "FROM python"


def test_the_charts_default_image_is_this_one_with_the_build_command_documented() -> None:
    repository = values()["image"]["repository"]
    assert values()["image"]["tag"] == ""  # the chart's appVersion
    command = f"docker build -f {DOCKERFILE.relative_to(ROOT)} -t {repository}:{app_version()} ."
    assert command in text()
    assert command in (ROOT / "README.md").read_text()
    assert f'org.opencontainers.image.title="{repository}"' in text()


def test_what_the_build_copies_exists() -> None:
    for line in instructions("COPY"):
        if line.startswith("--from="):
            continue
        *sources, _target = line.split()
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
