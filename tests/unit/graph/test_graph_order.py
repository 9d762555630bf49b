"""The topological order of a pipeline, its edges, and the downstream set of a log."""

from __future__ import annotations

from pathlib import Path

from distributary.api.names import DEFAULT_TOPIC_NAMES, use_topic_names
from distributary.graph import Pipeline, Ref, load_pipeline

DATA = Path(__file__).resolve().parents[2] / "data" / "graph"
VIEW = Ref("DerivedView", "default", "enriched-views")
PLAN = Ref("DerivedView", "default", "views-per-plan")
JOB = Ref("StreamJob", "default", "alerter")


def pipeline() -> Pipeline:
    return load_pipeline([DATA / "pipeline"])


def test_order_puts_every_resource_after_what_it_reads() -> None:
    order = pipeline().order
    assert order == (
        Ref.log("page-views"),
        Ref.log("users"),
        VIEW,
        Ref.log("enriched-views"),
        PLAN,
        Ref.log("plan-counts"),
        JOB,
        Ref.log("alerts"),
    )


def test_order_holds_logs_views_jobs_and_derived_logs_once_each() -> None:
    built = pipeline()
    assert sorted(built.order) == sorted([*built.logs, *built.views, *built.jobs])


def test_order_does_not_depend_on_the_order_of_the_files() -> None:
    files = sorted((DATA / "pipeline").rglob("*.y*ml"))
    assert load_pipeline(files[::-1]).order == pipeline().order


def test_edges_run_from_logs_to_readers_and_from_writers_to_logs() -> None:
    edges = set(pipeline().edges)
    assert (Ref.log("users"), VIEW) in edges
    assert (VIEW, Ref.log("enriched-views")) in edges
    assert (PLAN, Ref.log("plan-counts")) in edges
    assert (JOB, Ref.log("alerts")) in edges
    assert len(edges) == 7


def test_downstream_of_a_primary_log_reaches_every_view_job_and_log_after_it() -> None:
    assert pipeline().downstream(Ref.log("users")) == {
        VIEW,
        Ref.log("enriched-views"),
        PLAN,
        Ref.log("plan-counts"),
        JOB,
        Ref.log("alerts"),
    }


def test_downstream_of_a_derived_log() -> None:
    assert pipeline().downstream(Ref.log("plan-counts")) == {JOB, Ref.log("alerts")}


def test_downstream_of_a_log_nobody_reads_is_empty() -> None:
    assert pipeline().downstream(Ref.log("alerts")) == frozenset()


def test_downstream_accepts_the_resource_itself() -> None:
    built = pipeline()
    assert built.downstream(built.logs[Ref.log("plan-counts")]) == {JOB, Ref.log("alerts")}


def test_readers_and_writers_of_a_log() -> None:
    built = pipeline()
    assert built.readers(Ref.log("enriched-views")) == (PLAN,)
    assert built.writer(Ref.log("enriched-views")) == VIEW
    assert built.writer(Ref.log("alerts")) == JOB
    assert built.writer(Ref.log("users")) is None
    assert built.is_derived(Ref.log("plan-counts"))
    assert not built.is_derived(Ref.log("alerts"))


def _two_namespaces(folder: Path) -> None:
    for namespace in ("a", "b"):
        (folder / f"{namespace}.yaml").write_text(
            (DATA / "pipeline" / "logs.yaml")
            .read_text()
            .replace("metadata:\n", f"metadata:\n  namespace: {namespace}\n")
        )


def test_one_log_name_in_two_namespaces_is_one_topic_under_default_names(tmp_path: Path) -> None:
    _two_namespaces(tmp_path)
    built = load_pipeline([tmp_path])
    found = {(str(p.resource), p.field) for p in built.problems}
    assert ("Log/b/users", "spec.topicName") in found
    assert any("Log/a/users's 'users'" in p.message for p in built.problems)


def test_namespaces_keep_pipelines_apart(tmp_path: Path) -> None:
    _two_namespaces(tmp_path)
    use_topic_names("{namespace}.{name}")
    try:
        built = load_pipeline([tmp_path])
    finally:
        use_topic_names(DEFAULT_TOPIC_NAMES)
    assert built.ok
    assert built.order[:3] == (
        Ref("Log", "a", "alerts"),
        Ref("Log", "a", "page-views"),
        Ref("Log", "a", "users"),
    )
