"""What `make images` decides without building: cache keys, the base's recipe, and the runc
configuration of a container (`devtools.containers`), whose image is read from a fake here."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

import pytest

from distributary.devtools import containers, images
from distributary.devtools.images import ImageError


def test_a_key_changes_with_what_the_build_reads_and_not_with_byte_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(images, "ROOT", tmp_path)
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("a = 1\n")
    (tmp_path / "Dockerfile").write_text("FROM ${BASE}\n")
    first = images.digest_of(["Dockerfile", "pkg"])
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "pkg" / "b.pyc").write_bytes(b"\0")
    assert images.digest_of(["Dockerfile", "pkg"]) == first
    (tmp_path / "pkg" / "a.py").write_text("a = 2\n")
    assert images.digest_of(["Dockerfile", "pkg"]) != first
    (tmp_path / "pkg" / "a.py").write_text("a = 1\n")
    assert images.digest_of(["Dockerfile", "pkg"]) == first
    assert images.digest_of(["Dockerfile", "pkg"], extra="another base") != first
    (tmp_path / "pkg" / "c.py").write_text("")  # a new file, even empty
    assert images.digest_of(["Dockerfile", "pkg"]) != first


def test_the_images_keys_cover_their_dockerfiles_and_everything_they_copy() -> None:
    for image in images.IMAGES.values():
        dockerfile = (images.ROOT / image.dockerfile).read_text()
        copied = [
            word.rstrip("/")
            for line in dockerfile.splitlines()
            if line.startswith("COPY ") and "--from=" not in line
            for word in line.split()[1:-1]
            if not word.startswith("--")
        ]
        assert copied
        for source in copied:
            assert any(
                source == given or source.startswith(given + "/") or given.startswith(source)
                for given in image.inputs
            ), f"{image.dockerfile} copies {source}, which its key does not read"


def test_the_base_is_debians_slim_shape_and_its_sources_have_updates() -> None:
    assert images.BASE_IMAGE.endswith(f":{images.RELEASE}-slim")
    sources = images.sources_list()
    assert f"{images.RELEASE} main" in sources
    assert f"{images.RELEASE}-updates main" in sources
    assert f"{images.RELEASE}-security main" in sources
    assert "path-exclude /usr/share/doc/*" in images.DPKG_EXCLUDES
    assert "etc/resolv.conf" in images.TIDY  # the runtime's, never the build machine's


def config_of(tmp_path: Path, **settings: Any) -> dict[str, Any]:
    return {
        "Env": ["PATH=/opt/distributary/venv/bin:/usr/bin", "SPARK_HOME=/opt/spark"],
        "Entrypoint": ["/opt/distributary/entrypoint.sh"],
        "Cmd": None,
        "User": "185",
        "WorkingDir": "",
        **settings,
    }


def test_a_container_runs_the_images_entry_point_as_its_user_on_the_hosts_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(containers, "image_config", lambda _image: config_of(tmp_path))
    container = containers.Container(
        images.SPARK,
        ["spark-submit", "--version"],
        tmp_path / "log",
        env={"EXTRA": "1"},
        binds={"/host/checkpoints": "/var/lib/distributary/checkpoints"},
    )
    spec = container.spec("/rootfs")
    process = spec["process"]
    assert process["args"] == ["/opt/distributary/entrypoint.sh", "spark-submit", "--version"]
    assert process["user"] == {"uid": 185, "gid": 185}
    assert "SPARK_HOME=/opt/spark" in process["env"]
    assert "EXTRA=1" in process["env"]
    assert process["noNewPrivileges"] is True
    assert "CAP_SYS_ADMIN" not in process["capabilities"]["bounding"]
    (limit,) = process["rlimits"]
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert limit["soft"] <= limit["hard"] == hard  # never above the hard limit (refused here)
    kinds = {n["type"] for n in spec["linux"]["namespaces"]}
    assert kinds == {"pid", "ipc", "uts", "mount"}  # the host's network: a broker on loopback
    binds = {m["destination"]: m for m in spec["mounts"] if m["type"] == "bind"}
    assert binds["/var/lib/distributary/checkpoints"]["source"] == "/host/checkpoints"
    assert "ro" in binds["/sys"]["options"]
    assert spec["root"] == {"path": "/rootfs", "readonly": False}


def test_a_container_can_replace_the_entry_point_and_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = config_of(tmp_path, Entrypoint=["distributary"], Cmd=["operator"], User="10001:10001")
    monkeypatch.setattr(containers, "image_config", lambda _image: config)
    default = containers.Container(images.OPERATOR, None, tmp_path / "log")
    assert default.spec("/r")["process"]["args"] == ["distributary", "operator"]
    assert default.spec("/r")["process"]["user"] == {"uid": 10001, "gid": 10001}
    other = containers.Container(
        images.OPERATOR, ["-V"], tmp_path / "log", entrypoint=["python"], user="0"
    )
    assert other.spec("/r")["process"]["args"] == ["python", "-V"]
    assert other.spec("/r")["process"]["user"] == {"uid": 0, "gid": 0}


def test_a_user_given_by_name_is_refused() -> None:
    with pytest.raises(ImageError, match="by number"):
        containers.user_ids("spark")
    assert containers.user_ids("185") == (185, 185)
    assert containers.user_ids("10001:10002") == (10001, 10002)
