"""The images' hash locks agree with pyproject.toml, and each image installs from its own.

`make locks` writes them with uv; these checks read them as text, so a pin changed in pyproject.toml
without `make locks` fails here rather than in an image build.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
OPERATOR_LOCK = ROOT / "operator_image" / "requirements.lock"
SPARK_LOCK = ROOT / "spark_images" / "requirements.lock"
# Spark from PyPI: the job image's lock has them, the operator's must not.
SPARKS_OWN = {"pyspark", "py4j"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def entries(lock: Path) -> dict[str, tuple[str, list[str]]]:
    """Each requirement of `lock`: its name, the specifier after it and its hashes."""
    found: dict[str, tuple[str, list[str]]] = {}
    text = re.sub(r"\\\n\s*", " ", lock.read_text())  # join continued lines
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement, *options = line.split()
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(.*)", requirement)
        assert match is not None, f"{lock.name}: cannot read {requirement!r}"
        hashes = [o.removeprefix("--hash=") for o in options if o.startswith("--hash=")]
        found[canonical(match.group(1))] = (match.group(2), hashes)
    return found


def pins(extra: str | None = None) -> dict[str, str]:
    """pyproject.toml's exact pins: the base dependencies, or those of one extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["optional-dependencies"][extra] if extra else project["dependencies"]
    result = {}
    for dependency in declared:
        name, version = re.fullmatch(
            r"([A-Za-z0-9._-]+)(?:\[[a-z,]+\])?==(\S+)", dependency
        ).groups()  # type: ignore[union-attr]
        result[canonical(name)] = version
    return result


@pytest.mark.parametrize("lock", [OPERATOR_LOCK, SPARK_LOCK], ids=lambda p: p.parent.name)
def test_every_package_is_pinned_exactly_with_a_hash(lock: Path) -> None:
    found = entries(lock)
    assert found, f"{lock} has no requirement"
    for name, (specifier, hashes) in found.items():
        assert re.fullmatch(r"==[^=,;\s]+", specifier), f"{lock.name}: {name}{specifier}"
        assert hashes, f"{lock.name}: {name} has no --hash"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name


def test_the_operator_lock_is_the_base_install_without_spark() -> None:
    found = entries(OPERATOR_LOCK)
    assert not SPARKS_OWN & set(found)
    assert not set(pins("spark")) & set(found), "the operator lock has the spark extra"
    for name, version in pins().items():
        assert found.get(name, ("missing",))[0] == f"=={version}", name


def test_the_spark_lock_is_the_spark_extra_with_spark_itself() -> None:
    """The job image's Spark is pyspark from this lock (its jars are Spark's), at the pin."""
    found = entries(SPARK_LOCK)
    assert set(found) >= SPARKS_OWN
    wanted = pins() | pins("spark")
    for name, version in wanted.items():
        assert found.get(name, ("missing",))[0] == f"=={version}", name
    assert found["pyspark"][1], "pyspark without its hash"


def test_the_locks_are_regenerated_by_make_locks_with_a_pinned_uv() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^locks:", makefile, re.MULTILINE)
    assert "--generate-hashes" in makefile
    for lock in (OPERATOR_LOCK, SPARK_LOCK):
        assert f"-o {lock.relative_to(ROOT)}" in makefile
        assert "make locks" in lock.read_text().split("\n", 3)[1]
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(re.fullmatch(r"uv==[\d.]+", d) for d in dev["optional-dependencies"]["dev"])


@pytest.mark.parametrize(
    ("dockerfile", "lock"),
    [
        (ROOT / "operator_image" / "Dockerfile", OPERATOR_LOCK),
        (ROOT / "spark_images" / "Dockerfile", SPARK_LOCK),
    ],
    ids=["operator_image", "spark_images"],
)
def test_each_image_installs_from_its_lock_with_hashes(dockerfile: Path, lock: Path) -> None:
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    assert f"COPY {lock.relative_to(ROOT)} /tmp/requirements.lock" in text
    installs = [
        part.strip()
        for line in text.splitlines()
        for part in re.split(r";|&&", line)
        if "/bin/pip install" in part or '/bin/pip" install' in part
    ]
    assert any("--require-hashes" in i and "-r /tmp/requirements.lock" in i for i in installs)
    # The project itself adds nothing the lock did not hash.
    project = [i for i in installs if i.rstrip().endswith("/tmp/distributary")]
    assert project, f"{dockerfile}: the project is not installed"
    assert all("--no-deps" in i for i in project)
