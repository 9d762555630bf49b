"""The committed CRDs in crds/ are exactly what the models generate."""

from __future__ import annotations

from pathlib import Path

import yaml

from distributary.api import KINDS
from distributary.api.crd import crd, crd_files, drift, write_crds

CRD_DIR = Path(__file__).resolve().parents[3] / "crds"
FIX = "run 'distributary crds --out crds/' and commit the result"


def test_crds_directory_holds_exactly_the_generated_files() -> None:
    generated = crd_files()
    on_disk = {path.name: path.read_text() for path in CRD_DIR.glob("*.yaml")}
    assert sorted(on_disk) == sorted(generated), FIX
    for name, text in generated.items():
        assert on_disk[name] == text, f"crds/{name} differs from the models: {FIX}"


def test_drift_reports_nothing_for_the_committed_crds() -> None:
    assert drift(CRD_DIR) == []


def test_each_file_is_one_crd_that_reads_back_as_generated() -> None:
    files = crd_files()
    assert len(files) == len(KINDS)
    for kind in KINDS.values():
        text = files[f"distributary.dev_{kind.plural}.yaml"]
        assert text.startswith("# Generated from operator/distributary/api")
        assert yaml.safe_load(text) == crd(kind)


def test_drift_names_a_missing_file_and_an_edited_one(tmp_path: Path) -> None:
    written = write_crds(tmp_path)
    assert drift(tmp_path) == []
    written[0].write_text(written[0].read_text() + "# edited\n")
    written[1].unlink()
    assert drift(tmp_path) == [f"{written[0]}: differs from the models", f"{written[1]}: missing"]
