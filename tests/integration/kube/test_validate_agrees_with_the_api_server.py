"""`distributary validate` is at least as strict as the API server, and names the same field.

Each invalid document of tests/unit/api/invalid_documents.py (schema and CEL cases) is applied
(server-side dry run, so nothing is stored) to a real kube-apiserver with the project's CRDs
installed: the server must refuse it naming the field, and `validate` must refuse it naming the
same field. The valid base
documents must pass both, so a refusal is the one change's doing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.kube.operator_harness import Cluster
from tests.unit.api.invalid_documents import CEL_REFUSED, INVALID, JOB, LOG, UNPLACED, VIEW, Invalid

from distributary.graph import load

pytestmark = pytest.mark.integration

NAMESPACE = "validate-agrees"


def _server_refusal(cluster: Cluster, document: dict[str, Any]) -> str | None:
    """What the API server says refusing `document`, or None when it accepts it."""
    result = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "apply",
            "--dry-run=server",
            "--validate=strict",
            "-n",
            cluster.namespace,
            "-f",
            "-",
        ],
        input=yaml.safe_dump(document),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return None if result.returncode == 0 else result.stderr


def _validate_fields(tmp_path: Path, document: dict[str, Any]) -> set[str]:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document))
    return {p.field for p in load([path]).problems}


@pytest.mark.parametrize("document", [LOG, VIEW, JOB], ids=["log", "view", "job"])
def test_the_base_documents_pass_both(
    cluster: Cluster, tmp_path: Path, document: dict[str, Any]
) -> None:
    assert _server_refusal(cluster, document) is None
    assert _validate_fields(tmp_path, document) == set()


@pytest.mark.parametrize("case", INVALID + CEL_REFUSED, ids=[c.name for c in INVALID + CEL_REFUSED])
def test_both_refuse_naming_the_same_field(cluster: Cluster, tmp_path: Path, case: Invalid) -> None:
    refusal = _server_refusal(cluster, case.document)
    assert refusal is not None, f"the API server accepted {case.name}"
    assert case.field in refusal, refusal
    assert case.named_in(_validate_fields(tmp_path, case.document))


@pytest.mark.parametrize("case", UNPLACED, ids=[c.name for c in UNPLACED])
def test_both_refuse_a_document_they_cannot_place(
    cluster: Cluster, tmp_path: Path, case: Invalid
) -> None:
    assert _server_refusal(cluster, case.document) is not None
    assert case.field in _validate_fields(tmp_path, case.document)
