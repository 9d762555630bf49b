"""Programs built from the project's Go modules are cached under a key of what determines them."""

from __future__ import annotations

from pathlib import Path

import pytest

from distributary.devtools import controlplane, sparkoperator
from distributary.devtools.gobuild import GO_BUILD, GoBuildError, GoPrograms, checkout_module


def programs(src: Path, release: str = "v1.0.0", flags: tuple[str, ...] = ("build",)) -> GoPrograms:
    return GoPrograms(
        part="test",
        cache="test",
        src=src,
        release=release,
        binaries=("tool",),
        go_build=flags,
        needs="Go",
    )


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DISTRIBUTARY_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "src"
    (src / "cmd" / "tool").mkdir(parents=True)
    (src / "go.mod").write_text("module example.dev/tool\n")
    (src / "go.sum").write_text("")
    (src / "cmd" / "tool" / "main.go").write_text("package main\n")
    return src


def test_the_key_changes_with_the_sources_the_release_and_the_flags(module: Path) -> None:
    first = programs(module).target()
    assert first == programs(module).target()
    assert first.parent == module.parent / "cache" / "test"
    assert first.name.startswith("v1.0.0-")
    assert programs(module, release="v1.0.1").target() != first
    assert programs(module, flags=("build", "-trimpath")).target() != first
    (module / "cmd" / "tool" / "main.go").write_text("package main\n\nfunc main() {}\n")
    assert programs(module).target() != first


def test_files_other_than_the_sources_do_not_change_the_key(module: Path) -> None:
    first = programs(module).target()
    (module / "README.md").write_text("notes\n")
    assert programs(module).target() == first


def test_a_complete_build_is_used_without_go(module: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = programs(module).target()
    target.mkdir(parents=True)
    (target / ".complete").write_text("v1.0.0\n")
    monkeypatch.setenv("PATH", "")
    assert programs(module).build(quiet=True) == target


def test_without_go_a_build_says_what_to_install(
    module: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "")
    with pytest.raises(GoBuildError, match=r"install Go .* so that `go` is on PATH"):
        programs(module).build(quiet=True)


def test_each_program_is_pinned_to_the_release_its_go_mod_requires() -> None:
    so = sparkoperator
    pins = {
        "sparkoperator": f"{so.SPARK_OPERATOR_MODULE} {so.SPARK_OPERATOR_VERSION}",
        "testbed": f"{so.KWOK_MODULE} {so.KWOK_VERSION}",
        "controlplane": f"k8s.io/kubernetes {controlplane.KUBERNETES_VERSION}",
    }
    for name, requirement in pins.items():
        go_mod = (checkout_module(name) / "go.mod").read_text()
        assert f"\t{requirement}\n" in go_mod or f"require {requirement}\n" in go_mod, name
        assert (checkout_module(name) / "go.sum").stat().st_size > 0, name


def test_helm_is_built_from_the_module_kwok_is_built_from() -> None:
    """tools/helm.sh builds the helm that testbed/go.mod requires, as a tool of that module, so
    that the packages helm and kwok share are compiled once for both."""
    go_mod = (checkout_module("testbed") / "go.mod").read_text()
    assert "\ntool helm.sh/helm/v3/cmd/helm\n" in go_mod
    script = (checkout_module("testbed").parent / "tools" / "helm.sh").read_text()
    assert '"$module/go.mod"' in script
    assert "helm.sh/helm/v3/cmd/helm@" not in script  # not helm's own go.mod: another resolution


def test_every_program_and_helm_compile_with_the_same_flags() -> None:
    """kwok and helm share one module and their compiled packages only if both compile with the
    same flags; the others use them too (no debugging information, which the binaries strip)."""
    compile_flags = [flag for flag in GO_BUILD if flag != "-v" and flag != "build"]
    assert "-gcflags=all=-dwarf=false" in compile_flags
    for built in (
        controlplane.GO_BUILD,
        controlplane.etcd_programs().go_build,
        sparkoperator.kwok_programs().go_build,
        sparkoperator.spark_operator_programs().go_build,
    ):
        assert list(built[: len(GO_BUILD)]) == list(GO_BUILD)
    helm = (Path(__file__).resolve().parents[3] / "tools" / "helm.sh").read_text()
    line = next(line for line in helm.splitlines() if "go build" in line)
    assert all(flag in line for flag in compile_flags), line
