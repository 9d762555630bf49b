"""How many integration test workers `make test` runs: two while Go programs are to be built
beside the tests, three once every one is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from distributary.devtools import builds, controlplane, sparkoperator


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DISTRIBUTARY_CACHE", str(tmp_path))
    return tmp_path


def build_everything_but(skip: str) -> None:
    programs = {
        "etcd": controlplane.etcd_programs(),
        "kube": controlplane.programs(controlplane.go_sources()),
        "spark-operator": sparkoperator.spark_operator_programs(),
        "kwok": sparkoperator.kwok_programs(),
    }
    for name, program in programs.items():
        if name != skip:
            (program.target()).mkdir(parents=True)
            (program.target() / ".complete").write_text("built\n")
    if skip != "helm":
        builds.helm_binary().parent.mkdir(parents=True, exist_ok=True)
        builds.helm_binary().write_text("#!/bin/sh\n")


def test_a_fresh_machine_runs_two_workers_and_names_every_program_to_build(cache: Path) -> None:
    assert builds.test_workers() == 2
    assert builds.unbuilt() == [
        "etcd",
        "kube-apiserver and kube-controller-manager",
        "the Spark operator",
        "kwok",
        "helm",
    ]


@pytest.mark.parametrize("skip", ["etcd", "kube", "spark-operator", "kwok", "helm"])
def test_one_program_left_to_build_keeps_two_workers(cache: Path, skip: str) -> None:
    build_everything_but(skip)
    assert builds.test_workers() == 2
    assert len(builds.unbuilt()) == 1


def test_everything_built_runs_three_workers(cache: Path) -> None:
    build_everything_but("nothing")
    assert builds.unbuilt() == []
    assert builds.test_workers() == 3


def test_helm_is_the_version_the_testbed_module_requires(cache: Path) -> None:
    go_mod = (Path(__file__).resolve().parents[3] / "testbed" / "go.mod").read_text()
    version = builds.helm_binary().name.removeprefix("helm-")
    assert version.startswith("v")
    assert f"helm.sh/helm/v3 {version}" in go_mod
