"""The build context (.dockerignore) leaves out what is local, large or secret, and keeps every
file the Dockerfiles copy."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILES = [ROOT / "operator_image" / "Dockerfile", ROOT / "spark_images" / "Dockerfile"]


def patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str) -> bool:
    """Whether .dockerignore leaves `path` (or a folder above it) out of the context."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns():
        assert not pattern.startswith("!"), "the check below does not read exceptions"
        bare = pattern.removeprefix("**/")
        for prefix in prefixes:
            if fnmatch.fnmatch(prefix, pattern) or fnmatch.fnmatch(prefix.split("/")[-1], bare):
                return True
    return False


def copied_sources() -> list[str]:
    sources = []
    for dockerfile in DOCKERFILES:
        for line in dockerfile.read_text().splitlines():
            if line.startswith("COPY ") and "--from=" not in line and "<<" not in line:
                sources += line.split()[1:-1]
    return [s.rstrip("/") for s in sources]


@pytest.mark.parametrize(
    "path",
    [
        ".git",
        ".venv/bin/python",
        ".mypy_cache/x",
        ".pytest_cache/x",
        ".distributary/demo",
        "spark-warehouse/t",
        "operator/distributary/__pycache__/cli.cpython-311.pyc",
        "bench/x",
        "tests/unit/x.py",
    ],
)
def test_local_files_stay_out_of_the_context(path: str) -> None:
    assert ignored(path)


def test_every_file_the_dockerfiles_copy_is_in_the_context() -> None:
    sources = copied_sources()
    assert "operator/" in [s + "/" for s in sources]
    for source in sources:
        assert not ignored(source), f"COPY {source}: .dockerignore leaves it out"
    for module in (ROOT / "operator").rglob("*.py"):
        relative = module.relative_to(ROOT).as_posix()
        assert "__pycache__" in relative or not ignored(relative), relative
