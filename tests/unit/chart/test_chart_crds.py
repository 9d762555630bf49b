"""The chart ships exactly the committed CRDs: `charts/distributary/crds/` equals `crds/`.

Helm installs the files in a chart's crds/ folder verbatim before anything else, so they must be
byte-for-byte the generated CRDs (which test_crd_drift.py holds to the models).
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
GENERATED = ROOT / "crds"
CHART_CRDS = ROOT / "charts" / "distributary" / "crds"
FIX = "copy them again: 'cp crds/*.yaml charts/distributary/crds/' and commit the result"


def yaml_files(folder: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(folder.glob("*.yaml"))}


def test_chart_holds_the_same_crd_files() -> None:
    assert sorted(yaml_files(CHART_CRDS)) == sorted(yaml_files(GENERATED)), (
        f"charts/distributary/crds/ and crds/ hold different files: {FIX}"
    )


def test_each_chart_crd_equals_the_generated_one() -> None:
    generated = yaml_files(GENERATED)
    for name, text in yaml_files(CHART_CRDS).items():
        assert text == generated.get(name), f"charts/distributary/crds/{name} differs: {FIX}"


def test_chart_crds_are_the_distributary_kinds() -> None:
    kinds = set()
    for text in yaml_files(CHART_CRDS).values():
        crd = yaml.safe_load(text)
        assert crd["kind"] == "CustomResourceDefinition"
        assert crd["spec"]["group"] == "distributary.dev"
        kinds.add(crd["spec"]["names"]["kind"])
    assert kinds == {"Log", "DerivedView", "StreamJob", "Source", "Sink"}


def test_chart_has_no_other_files_beside_the_crds() -> None:
    # Helm would install any other file in crds/ too (and never upgrade it).
    others = [p.name for p in CHART_CRDS.iterdir() if p.suffix != ".yaml"]
    assert others == []
