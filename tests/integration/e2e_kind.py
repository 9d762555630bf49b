"""What the checks of `e2e/kind` share: its scripts' own functions, its pinned versions, the
charts it installs rendered with its arguments, and Strimzi's real CRDs.

The kind run needs Docker; here its pieces are taken from the scripts themselves (`lib.sh` is
sourced and its functions called), so the checks see exactly what the run would install.

Strimzi's Helm chart is served by no registry this project reaches (it is published as an OCI
artifact and on Strimzi's own chart site; neither PyPI, npm, the Go module proxy, Maven Central
nor Debian has it), so it cannot be rendered here. Its CRDs can be had all the same, and exactly:
Strimzi generates them from its API classes with its own `CrdGenerator` (`io.strimzi:api` and
`io.strimzi:crd-generator` on Maven Central), with the arguments its build gives it, which are in
the api jar's POM. They are generated that way here, at the pinned version.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

import yaml

from distributary.artifacts import Bundle, jars

ROOT = Path(__file__).resolve().parents[2]
E2E = ROOT / "e2e" / "kind"
LIB = E2E / "lib.sh"
POM = "{http://maven.apache.org/POM/4.0.0}"
GENERATOR = "io.strimzi.crdgenerator.CrdGenerator"

Manifest = dict[str, Any]


def lib(*command: str) -> str:
    """Run `command` (a function of lib.sh, or any command) in bash with lib.sh sourced; its
    stdout."""
    result = subprocess.run(
        ["bash", "-c", f'source "{LIB}" && "$@"', "lib.sh", *command],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"lib.sh {' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def filled(name: str, *variables: str, **values: str) -> str:
    """lib.sh's `manifest NAME VARIABLE...`: e2e/kind/manifests/NAME with each @VARIABLE@ set,
    from lib.sh or else from `values` (what the run finds out, such as the Kafka version)."""
    given = [f"{k}={v}" for k, v in values.items()]
    script = f'source "{LIB}" && manifest "$@"'
    return lib("env", *given, "bash", "-c", script, "manifest", name, *variables, *values)


def setting(name: str) -> str:
    """A variable of lib.sh (and so of versions.env), as the scripts see it."""
    out = subprocess.run(
        ["bash", "-c", f'source "{LIB}" && printf "%s" "${{{name}}}"'],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


def array(name: str) -> list[str]:
    """An array of lib.sh, as the scripts see it."""
    out = subprocess.run(
        ["bash", "-c", f'source "{LIB}" && printf "%s\\n" "${{{name}[@]}}"'],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.splitlines()


def versions() -> dict[str, str]:
    """versions.env as NAME -> value."""
    pinned = {}
    for line in (E2E / "versions.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            pinned[name.strip()] = value.strip()
    return pinned


def documents(text: str) -> list[Manifest]:
    return [d for d in yaml.safe_load_all(text) if d]


def render(helm: str, args_function: str, *extra: str) -> list[Manifest]:
    """`helm template` with the arguments lib.sh's `args_function` gives `helm install`."""
    args = lib(args_function).splitlines()
    result = subprocess.run(
        [helm, "template", *args, *extra], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, f"helm template {' '.join(args)}:\n{result.stderr[-3000:]}"
    return documents(result.stdout)


def find(manifests: list[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    return [
        m
        for m in manifests
        if m.get("kind") == kind and (name is None or m["metadata"]["name"] == name)
    ]


# Strimzi's CRDs ----------------------------------------------------------------------------


def java_21() -> str | None:
    """A java of version 21 or newer (Strimzi's generator is built for 21): $JAVA_HOME's, the
    PATH's, or one under /usr/lib/jvm."""
    candidates = [
        shutil.which("java"),
        *sorted(str(p) for p in Path("/usr/lib/jvm").glob("*/bin/java")),
    ]
    for java in candidates:
        if not java:
            continue
        shown = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
        found = re.search(r'version "(\d+)', shown.stderr)
        if found and int(found.group(1)) >= 21:
            return java
    return None


def generator_arguments(api_jar: Path) -> list[str]:
    """The arguments Strimzi's build passes to its CRD generator, from the api jar's POM: the
    options, then one `Class=path` per CRD file."""
    with zipfile.ZipFile(api_jar) as jar:
        pom = next(n for n in jar.namelist() if n.endswith("/api/pom.xml"))
        root = ET.fromstring(jar.read(pom))
    for execution in root.iter(f"{POM}execution"):
        args = [a.text or "" for a in execution.iter(f"{POM}argument")]
        if GENERATOR in args:
            return args[args.index(GENERATOR) + 1 :]
    raise AssertionError(f"{api_jar}: no execution of {GENERATOR} in its POM")


def strimzi_crds(version: str, out: Path) -> dict[str, Path]:
    """Strimzi's CRDs at `version`, generated as its build generates them; kind -> file."""
    java = java_21()
    assert java, "Strimzi's CRD generator needs Java 21 or newer (e.g. /usr/lib/jvm/temurin-25-*)"
    bundle = Bundle(
        "strimzi-crd-generator",
        tuple(f"io.strimzi:{a}:{version}" for a in ("api", "crd-generator", "crd-annotations")),
    )
    classpath = jars(bundle)
    api_jar = next(j for j in classpath if j.name == f"api-{version}.jar")
    args = []
    for arg in generator_arguments(api_jar):
        if (
            "=" in arg and "${" in arg
        ):  # Class=${project.basedir}/../packaging/.../040-Crd-kafka.yaml
            model, path = arg.split("=", 1)
            arg = f"{model}={out / path.replace('${file.separator}', '/').rsplit('/', 1)[-1]}"
        args.append(arg)
    out.mkdir(parents=True, exist_ok=True)
    command = [java, "-cp", ":".join(map(str, classpath)), GENERATOR, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"Strimzi's CRD generator failed:\n{result.stderr[-3000:]}"
    crds = {}
    for path in sorted(out.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        crds[crd["spec"]["names"]["kind"]] = path
    return crds
