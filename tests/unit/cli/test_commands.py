"""The `distributary` command as a person uses it: exit codes, stdout, stderr, no tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from distributary.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"

LOG = """\
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: clicks}
spec:
  partitions: 2
  schema: "user_id STRING, url STRING"
"""

VIEW = """\
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {name: urls}
spec:
  inputs: [{log: clicks, alias: c}]
  sql: SELECT user_id, url FROM c
"""


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert not isinstance(result.exception, AssertionError)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, *documents: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text("---\n".join(documents))
    return path


@pytest.mark.parametrize("example", ["clickstream", "orders", "sensors"])
def test_the_examples_are_valid(example: str) -> None:
    code, out, err = run("validate", str(EXAMPLES / example))
    assert code == 0, err
    assert out.startswith("valid: ")
    assert err == ""


def test_validate_prints_one_line_per_problem_and_exits_1(tmp_path: Path) -> None:
    bad_view = VIEW.replace("FROM c", "FROM d").replace("user_id, url", "user_id, uri")
    orphan = VIEW.replace("name: urls", "name: orphan").replace("log: clicks", "log: nowhere")
    code, out, err = run("validate", str(write(tmp_path, LOG, bad_view, orphan)))
    assert code == 1
    assert out == ""
    lines = err.strip().splitlines()
    assert lines[-1] == "error: 2 problems found"
    problems = lines[:-1]
    assert len(problems) == 2
    assert any("DerivedView/default/urls spec.sql" in p and "'d'" in p for p in problems)
    assert any(
        "DerivedView/default/orphan spec.inputs[0].log" in p and "nowhere" in p for p in problems
    )
    assert "Traceback" not in err


def test_validate_names_the_file_and_field_of_a_model_error(tmp_path: Path) -> None:
    path = write(tmp_path, LOG.replace("partitions: 2", "partitions: 0"))
    code, _, err = run("validate", str(path))
    assert code == 1
    assert str(path) in err
    assert "spec.partitions" in err


def test_validate_refuses_a_folder_with_no_resources(tmp_path: Path) -> None:
    (tmp_path / "other.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    code, _, err = run("validate", str(tmp_path))
    assert code == 1
    assert "no Distributary resources found" in err


def test_a_missing_path_is_a_usage_error_not_a_traceback() -> None:
    code, _, err = run("validate", "/no/such/place")
    assert code == 2
    assert "does not exist" in err


def test_plan_lists_topics_with_configs_and_applications() -> None:
    code, out, _ = run("plan", str(EXAMPLES / "clickstream"))
    assert code == 0
    assert "+ page-views" in out
    assert "retention.ms=604800000" in out
    assert "views-per-user.r1" in out
    assert "cleanup.policy=compact" in out
    assert "Spark applications" in out
    assert "consumer group distributary.default.views-per-user.r1" in out


def test_plan_yaml_prints_the_child_manifests(tmp_path: Path) -> None:
    code, out, _ = run("plan", str(write(tmp_path, LOG, VIEW)), "-o", "yaml")
    assert code == 0
    manifests = list(yaml.safe_load_all(out))
    kinds = [(m["kind"], m["metadata"]["name"]) for m in manifests]
    assert kinds == [
        ("KafkaTopic", "clicks"),
        ("KafkaTopic", "urls.r1"),
        ("Log", "urls"),
        ("SparkApplication", "urls-r1"),
    ]
    app = manifests[-1]
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    assert app["spec"]["type"] == "Python"
    assert app["spec"]["sparkConf"]["spark.sql.shuffle.partitions"] == "2"


def test_plan_with_the_direct_backend_emits_no_kafka_topics(tmp_path: Path) -> None:
    code, out, _ = run("plan", str(write(tmp_path, LOG, VIEW)), "-o", "yaml", "--backend", "direct")
    assert code == 0
    assert "KafkaTopic" not in out


def test_plan_names_the_topic_backend_and_hides_its_old_name(tmp_path: Path) -> None:
    path = str(write(tmp_path, LOG, VIEW))
    code, out, _ = run("plan", path, "-o", "yaml", "--topic-backend", "direct")
    assert code == 0
    assert "KafkaTopic" not in out
    code, out, _ = run("plan", "--help")
    assert "--topic-backend" in out
    assert "--backend" not in out.replace("--topic-backend", "")


def test_plan_of_an_invalid_pipeline_plans_nothing(tmp_path: Path) -> None:
    code, out, err = run("plan", str(write(tmp_path, VIEW)))
    assert code == 1
    assert out == ""
    assert "nothing was planned" in err


@pytest.mark.parametrize(
    ("fmt", "first_line"), [("mermaid", "flowchart LR"), ("dot", "digraph pipeline {")]
)
def test_graph_draws_every_resource(fmt: str, first_line: str) -> None:
    code, out, _ = run("graph", str(EXAMPLES / "clickstream"), "--format", fmt)
    assert code == 0
    assert out.splitlines()[0] == first_line
    for name in ("page_views", "enriched_page_views", "views_per_user", "views_per_country"):
        assert f"log_default_{name}" in out
    assert "view_default_views_per_country" in out


def test_crds_check_passes_on_the_committed_crds_and_fails_on_a_stale_one(tmp_path: Path) -> None:
    code, out, _ = run("crds", "--check", "--out", str(ROOT / "crds"))
    assert code == 0
    assert "up to date" in out
    run("crds", "--out", str(tmp_path))
    stale = tmp_path / "distributary.dev_logs.yaml"
    stale.write_text(stale.read_text().replace("dlog", "dl"))
    code, _, err = run("crds", "--check", "--out", str(tmp_path))
    assert code == 1
    assert "distributary.dev_logs.yaml: differs from the models" in err


def test_the_console_script_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "distributary.cli", "validate", str(EXAMPLES / "orders")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("valid: 1 log, 1 view, 0 jobs")


def test_plan_against_the_previous_files_classifies_each_change(tmp_path: Path) -> None:
    old = tmp_path / "old"
    new = tmp_path / "new"
    old.mkdir()
    new.mkdir()
    gone = VIEW.replace("name: urls", "name: gone")
    (old / "pipeline.yaml").write_text("---\n".join([LOG, VIEW, gone]))
    changed = VIEW.replace("SELECT user_id, url FROM c", "SELECT user_id FROM c")
    added = VIEW.replace("name: urls", "name: added")
    (new / "pipeline.yaml").write_text("---\n".join([LOG, changed, added]))
    code, out, _ = run("plan", str(new), "--against", str(old))
    assert code == 0
    changes = out[out.index("Changes against") :].splitlines()
    at = next(i for i, line in enumerate(changes) if line.startswith("  DerivedView urls:"))
    assert changes[at].startswith("  DerivedView urls: Reprocess (recomputed beside the serving")
    assert changes[at + 1].startswith("      - ")
    assert "  DerivedView added: New (starts as revision 1)" in changes
    assert any(line.startswith("  DerivedView gone: Removed") for line in changes)
    code, out, _ = run("plan", str(old), "--against", str(old))
    assert out.rstrip().endswith("Changes against " + str(old) + ":\n  none")
