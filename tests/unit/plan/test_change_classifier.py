"""Classifying a spec change as Spark's checkpoint recovery rules allow: per kind and strategy."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api.job import StreamJob
from distributary.api.log import Log
from distributary.api.view import DerivedView
from distributary.plan.revisions.classify import (
    Classification,
    change_status,
    classify_job_change,
    classify_view_change,
    stateful_parts,
)

STATELESS = "SELECT user, page FROM pv WHERE page <> 'home'"
COUNTS = "SELECT user, COUNT(*) AS n FROM pv GROUP BY user"
SCHEMA = "user STRING, page STRING, ts TIMESTAMP, ms BIGINT"
INPUTS = {"pv": Log.model_validate({"metadata": {"name": "pageviews"}, "spec": {"schema": SCHEMA}})}


def make_view(sql: str = STATELESS, strategy: str = "Reprocess", **spec: Any) -> DerivedView:
    base: dict[str, Any] = {
        "inputs": [{"log": "pageviews", "alias": "pv"}],
        "sql": sql,
        "upgrade": {"strategy": strategy},
    }
    base.update(spec)
    return DerivedView.model_validate({"metadata": {"name": "counts"}, "spec": base})


def classify(
    old: DerivedView,
    new: DerivedView,
    old_inputs: dict[str, Log] | None = None,
    new_inputs: dict[str, Log] | None = None,
) -> Classification:
    return classify_view_change(old, new, old_inputs or INPUTS, new_inputs or INPUTS)


def with_schema(schema: str) -> dict[str, Log]:
    return {
        "pv": Log.model_validate({"metadata": {"name": "pageviews"}, "spec": {"schema": schema}})
    }


STRATEGIES = ["Reprocess", "InPlace", "Auto"]


# --- Ignore and RestartInPlace, whatever the strategy ----------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_no_change_is_ignored(strategy: str) -> None:
    assert classify(make_view(strategy=strategy), make_view(strategy=strategy)) == Classification(
        "Ignore"
    )


@pytest.mark.parametrize(
    "spec",
    [
        {"output": {"retention": {"time": "30d"}}},
        {"output": {"partitions": 6}},
        {"output": {"deletionPolicy": "Delete"}},
    ],
    ids=["retention", "partitions", "deletion-policy"],
)
def test_output_log_settings_are_ignored(spec: dict[str, Any]) -> None:
    result = classify(make_view(), make_view(**spec))
    assert result.kind == "Ignore"
    assert len(result.reasons) == 1
    assert "output Log applies it" in result.reasons[0]


def test_upgrade_settings_are_ignored() -> None:
    old = make_view()
    new = make_view(upgrade={"strategy": "InPlace", "cutoverWindow": "1m"})
    result = classify(old, new)
    assert result.kind == "Ignore"
    assert [r.split(" ")[0] for r in result.reasons] == [
        "upgrade.strategy",
        "upgrade.cutoverWindow",
    ]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_starting_position_change_alone_is_ignored(strategy: str) -> None:
    moved = [{"log": "pageviews", "alias": "pv", "startingPosition": {"from": "Latest"}}]
    result = classify(make_view(strategy=strategy), make_view(strategy=strategy, inputs=moved))
    assert result.kind == "Ignore"
    assert "only when a fresh checkpoint is made" in result.reasons[0]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    ("spark", "field"),
    [
        ({"trigger": "1m"}, "trigger"),
        ({"maxOffsetsPerTrigger": 5000}, "maxOffsetsPerTrigger"),
        ({"executor": {"instances": 3, "memory": "4g"}}, "executor"),
        ({"driver": {"cores": 2}}, "driver"),
        ({"sparkConf": {"spark.sql.shuffle.partitions": "12"}}, "sparkConf"),
        ({"image": "registry/job:2"}, "image"),
    ],
)
def test_spark_settings_restart_in_place(strategy: str, spark: dict[str, Any], field: str) -> None:
    result = classify(make_view(COUNTS, strategy), make_view(COUNTS, strategy, spark=spark))
    assert result == Classification(
        "RestartInPlace", (f"spark.{field} changed: restart in place (the checkpoint is kept)",)
    )


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_renaming_the_output_log_is_forbidden(strategy: str) -> None:
    old = make_view(strategy=strategy, output={"log": "counts-a"})
    result = classify(old, make_view(strategy=strategy, output={"log": "counts-b"}))
    assert result.kind == "Forbidden"
    assert "output.log changed from counts-a to counts-b: it is immutable" in result.reasons[0]


def test_naming_the_default_output_log_is_no_rename() -> None:
    assert classify(make_view(), make_view(output={"log": "counts"})).kind == "Ignore"


# --- An output change under Reprocess ----------------------------------------------------------


def test_an_output_change_under_reprocess_reprocesses_even_when_stateless() -> None:
    result = classify(make_view(), make_view(STATELESS.replace("home", "about")))
    assert result == Classification(
        "Reprocess",
        ("sql changed: a new revision recomputes the output from the start of the inputs",),
    )


# --- InPlace and Auto: what the checkpoint accepts ---------------------------------------------


@pytest.mark.parametrize(
    ("old_sql", "new_sql"),
    [
        (STATELESS, "SELECT user, upper(page) AS page FROM pv WHERE page <> 'about'"),
        (STATELESS, "SELECT user, page, ts FROM pv"),
        (COUNTS, "SELECT user, COUNT(*) AS n FROM pv WHERE page <> 'home' GROUP BY user"),
        (COUNTS, "select pv.User, count(*) as views from pv group by pv.USER"),
        (COUNTS, "SELECT user, COUNT(*) AS n, 1 AS one FROM pv GROUP BY user"),
    ],
    ids=[
        "stateless-projection-filter",
        "stateless-new-column",
        "stateful-added-filter",
        "stateful-respelt",
        "stateful-projection-after-aggregate",
    ],
)
@pytest.mark.parametrize("strategy", ["InPlace", "Auto"])
def test_changes_the_checkpoint_accepts_restart_in_place(
    strategy: str, old_sql: str, new_sql: str
) -> None:
    result = classify(make_view(old_sql, strategy), make_view(new_sql, strategy))
    assert result.kind == "RestartInPlace"
    assert all("restart in place" in r for r in result.reasons)


BLOCKED = [
    (COUNTS, "SELECT user, page, COUNT(*) AS n FROM pv GROUP BY user, page", "GROUP BY keys"),
    (COUNTS, "SELECT user, COUNT(*) AS n, MAX(ts) AS last FROM pv GROUP BY user", "aggregates"),
    (COUNTS, "SELECT user, SUM(ms) AS n FROM pv GROUP BY user", "aggregates"),
    (STATELESS, COUNTS, "aggregates"),
    (COUNTS, "SELECT user, page FROM pv", "aggregates"),
    (
        # sqlglot 30 cannot parse `GROUP BY window(...)` as the first key (WINDOW clause).
        "SELECT page, COUNT(*) FROM pv GROUP BY page, window(ts, '5 minutes')",
        "SELECT page, COUNT(*) FROM pv GROUP BY page, window(ts, '1 hour')",
        "time windows",
    ),
    (
        "SELECT session_window(ts, '5 minutes') AS s, COUNT(*) FROM pv "
        "GROUP BY session_window(ts, '5 minutes')",
        "SELECT session_window(ts, '9 minutes') AS s, COUNT(*) FROM pv "
        "GROUP BY session_window(ts, '9 minutes')",
        "time windows",
    ),
    (STATELESS, "SELECT DISTINCT user, page FROM pv WHERE page <> 'home'", "DISTINCT or UNION"),
    (
        "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY user ORDER BY ts) AS rn FROM pv) "
        "WHERE rn = 1",
        "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY page ORDER BY ts) AS rn FROM pv) "
        "WHERE rn = 1",
        "OVER windows",
    ),
    (STATELESS, STATELESS + " LIMIT 10", "LIMIT"),
    (
        "SELECT a.user FROM pv AS a JOIN pv AS b ON a.user = b.user",
        "SELECT a.user FROM pv AS a LEFT JOIN pv AS b ON a.user = b.user",
        "joins",
    ),
]


@pytest.mark.parametrize(("old_sql", "new_sql", "part"), BLOCKED)
def test_stateful_changes_are_forbidden_in_place(old_sql: str, new_sql: str, part: str) -> None:
    result = classify(make_view(old_sql, "InPlace"), make_view(new_sql, "InPlace"))
    assert result.kind == "Forbidden"
    assert any(f"the {part}" in r and "Spark cannot restore" in r for r in result.reasons)
    assert all("set upgrade.strategy to Reprocess" in r for r in result.reasons)


@pytest.mark.parametrize(("old_sql", "new_sql", "part"), BLOCKED)
def test_stateful_changes_reprocess_under_auto(old_sql: str, new_sql: str, part: str) -> None:
    result = classify(make_view(old_sql, "Auto"), make_view(new_sql, "Auto"))
    assert result.kind == "Reprocess"
    assert any(part in r and "reprocess from the start" in r for r in result.reasons)


def test_a_new_source_is_forbidden_in_place() -> None:
    inputs = {**INPUTS, "u": Log.model_validate({"metadata": {"name": "users"}})}
    two = [{"log": "pageviews", "alias": "pv"}, {"log": "users", "alias": "u"}]
    old = make_view(strategy="InPlace")
    new = make_view("SELECT pv.user FROM pv JOIN u ON pv.user = u.user", "InPlace", inputs=two)
    result = classify(old, new, INPUTS, inputs)
    assert result.kind == "Forbidden"
    assert "the topics read changed (pageviews -> pageviews, users)" in result.reasons[0]


def test_a_new_upstream_topic_is_forbidden_in_place() -> None:
    served = {
        "pv": Log.model_validate(
            {
                "metadata": {"name": "pageviews"},
                "spec": {"schema": SCHEMA},
                "status": {"topicName": "pageviews-r2"},
            }
        )
    }
    view = make_view(strategy="InPlace")
    result = classify(view, view, INPUTS, served)
    assert result.kind == "Forbidden"
    assert "pageviews -> pageviews-r2" in result.reasons[0]


@pytest.mark.parametrize(
    ("old_output", "new_output", "says"),
    [
        ({"mode": "append"}, {"mode": "upsert", "key": ["user"]}, "output.mode changed"),
        (
            {"mode": "upsert", "key": ["user"]},
            {"mode": "upsert", "key": ["user", "page"]},
            "output.key changed from [user] to [user, page]",
        ),
    ],
)
def test_mode_and_key_changes_are_forbidden_in_place(
    old_output: dict[str, Any], new_output: dict[str, Any], says: str
) -> None:
    result = classify(
        make_view(STATELESS, "InPlace", output=old_output),
        make_view(STATELESS, "InPlace", output=new_output),
    )
    assert result.kind == "Forbidden"
    assert any(says in r for r in result.reasons)


def test_a_schema_change_restarts_a_stateless_query_in_place() -> None:
    result = classify(
        make_view(strategy="InPlace"),
        make_view(strategy="InPlace"),
        INPUTS,
        with_schema("user STRING, page STRING, ts STRING"),
    )
    assert result.kind == "RestartInPlace"
    assert "the schema of log pageviews changed" in result.reasons[0]


def test_a_retyped_column_the_state_reads_is_forbidden_in_place() -> None:
    sums = "SELECT user, SUM(ms) AS total FROM pv GROUP BY user"
    result = classify(
        make_view(sums, "InPlace"),
        make_view(sums, "InPlace"),
        INPUTS,
        with_schema("user STRING, page STRING, ts TIMESTAMP, ms DOUBLE"),
    )
    assert result.kind == "Forbidden"
    assert (
        "inputs[pv]: column ms of log pageviews changed while the query keeps state"
        in (result.reasons[0])
    )


def test_a_column_the_stateful_query_does_not_read_may_change() -> None:
    result = classify(
        make_view(COUNTS, "InPlace"),
        make_view(COUNTS, "InPlace"),
        INPUTS,
        with_schema("user STRING, page INT, ts TIMESTAMP, ms BIGINT, ref STRING"),
    )
    assert result.kind == "RestartInPlace"


def test_any_schema_change_blocks_a_stateful_query_that_reads_star() -> None:
    dedup = "SELECT DISTINCT * FROM pv"
    result = classify(
        make_view(dedup, "InPlace"),
        make_view(dedup, "InPlace"),
        INPUTS,
        with_schema(SCHEMA + ", ref STRING"),
    )
    assert result.kind == "Forbidden"
    assert "the record schema of log pageviews changed" in result.reasons[0]


# --- Several differences -----------------------------------------------------------------------


def test_several_differences_list_every_reason_strongest_first() -> None:
    old = make_view(COUNTS)
    new = make_view(
        COUNTS.replace("COUNT(*)", "COUNT(DISTINCT page)"),
        spark={"trigger": "30s"},
        output={"retention": {"time": "1d"}},
    )
    result = classify(old, new)
    assert result.kind == "Reprocess"
    assert [r.split(":")[0] for r in result.reasons] == [
        "sql changed",
        "spark.trigger changed",
        "output.retention changed",
    ]


def test_forbidden_wins_over_everything_else() -> None:
    old = make_view(COUNTS, "InPlace")
    new = make_view(
        "SELECT page, COUNT(*) AS n FROM pv GROUP BY page",
        "InPlace",
        output={"log": "other"},
        spark={"trigger": "30s"},
    )
    result = classify(old, new)
    assert result.kind == "Forbidden"
    assert len(result.reasons) == 3
    assert result.reasons[0].startswith("output.log changed")
    assert result.reasons[-1].startswith("spark.trigger changed")


def test_change_status_records_the_classification() -> None:
    change = change_status(Classification("Reprocess", ("sql changed: ...",)), generation=7)
    assert change.to_yaml_dict() == {
        "generation": 7,
        "classification": "Reprocess",
        "reasons": ["sql changed: ..."],
    }


# --- What Spark keeps state for ----------------------------------------------------------------


def test_a_filter_and_projection_keep_no_state() -> None:
    assert stateful_parts(STATELESS).stateless
    assert stateful_parts("SELECT a FROM t UNION ALL SELECT a FROM u").stateless


def test_stateful_parts_are_found_in_a_normal_form() -> None:
    parts = stateful_parts(
        "SELECT pv.User, window(ts, '5 minutes') AS w, count(*), collect_set(page) FROM pv "
        "GROUP BY pv.user, WINDOW(ts, '5 minutes')"
    )
    assert parts.grouping == ("user",)
    assert parts.time_windows == ("WINDOW(ts, '5 minutes')",)
    assert len(parts.aggregates) == 2
    assert not parts.stateless


def test_deduplication_window_functions_joins_and_limits_are_state() -> None:
    assert stateful_parts("SELECT a FROM t UNION SELECT a FROM u").deduplication == ("UNION (a)",)
    assert stateful_parts("SELECT DISTINCT a, b FROM t").deduplication == ("DISTINCT a, b",)
    ranked = stateful_parts("SELECT sum(x) OVER (PARTITION BY k) FROM t")
    assert ranked.aggregates == ()
    assert ranked.window_functions == ("SUM(x) OVER (PARTITION BY k)",)
    assert stateful_parts("SELECT * FROM a JOIN b ON a.k = b.k").joins == ("JOIN b ON a.k = b.k",)
    assert stateful_parts("SELECT * FROM a LIMIT 5").limits == ("LIMIT 5",)


# --- Jobs --------------------------------------------------------------------------------------


def make_job(strategy: str = "InPlace", **spec: Any) -> StreamJob:
    base: dict[str, Any] = {
        "image": "registry/job:1",
        "mainApplicationFile": "local:///app/job.py",
        "inputs": [{"log": "orders"}],
        "outputs": [{"log": "totals"}],
        "upgrade": {"strategy": strategy},
    }
    base.update(spec)
    return StreamJob.model_validate({"metadata": {"name": "totals"}, "spec": base})


CODE_CHANGES = [
    ({"image": "registry/job:2"}, "image"),
    ({"mainApplicationFile": "local:///app/other.py"}, "mainApplicationFile"),
    ({"arguments": ["--fast"]}, "arguments"),
    ({"env": {"MODE": "fast"}}, "env"),
    ({"spark": {"executor": {"instances": 4}}}, "spark.executor"),
    ({"spark": {"trigger": "1m"}}, "spark.trigger"),
]


@pytest.mark.parametrize(("spec", "field"), CODE_CHANGES)
def test_job_code_and_settings_restart_in_place(spec: dict[str, Any], field: str) -> None:
    result = classify_job_change(make_job(), make_job(**spec))
    assert result == Classification(
        "RestartInPlace", (f"{field} changed: restart in place (the checkpoint is kept)",)
    )


@pytest.mark.parametrize(("spec", "field"), CODE_CHANGES)
def test_job_code_and_settings_reprocess_under_reprocess(spec: dict[str, Any], field: str) -> None:
    result = classify_job_change(make_job("Reprocess"), make_job("Reprocess", **spec))
    assert result.kind == "Reprocess"
    assert result.reasons[0].startswith(f"{field} changed: start again from the inputs")


def test_job_inputs_changed_are_forbidden_in_place() -> None:
    new = make_job(inputs=[{"log": "orders"}, {"log": "refunds"}])
    result = classify_job_change(make_job(), new)
    assert result.kind == "Forbidden"
    assert "inputs changed (orders -> orders, refunds)" in result.reasons[0]
    assert "Reprocess" in result.reasons[0]


def test_job_inputs_changed_reprocess_under_reprocess() -> None:
    result = classify_job_change(
        make_job("Reprocess"), make_job("Reprocess", inputs=[{"log": "refunds"}])
    )
    assert result.kind == "Reprocess"


@pytest.mark.parametrize("strategy", ["InPlace", "Reprocess"])
def test_job_outputs_changed_restart_in_place(strategy: str) -> None:
    result = classify_job_change(
        make_job(strategy), make_job(strategy, outputs=[{"log": "totals-v2"}])
    )
    assert result.kind == "RestartInPlace"
    assert result.reasons[0].startswith("outputs changed (totals -> totals-v2)")


def test_job_starting_position_alone_is_ignored() -> None:
    moved = [{"log": "orders", "startingPosition": {"from": "Latest"}}]
    result = classify_job_change(make_job(), make_job(inputs=moved))
    assert result.kind == "Ignore"
    assert "fresh checkpoint" in result.reasons[0]


def test_job_strategy_change_alone_is_ignored_and_no_change_has_no_reason() -> None:
    assert classify_job_change(make_job(), make_job("Reprocess")).kind == "Ignore"
    assert classify_job_change(make_job(), make_job()) == Classification("Ignore")


# --- Views over a table ---------------------------------------------------------------------

TABLE = {
    "pv": Log.model_validate(
        {"metadata": {"name": "pageviews"}, "spec": {"schema": SCHEMA, "compaction": True}}
    )
}
UPSERT = {"output": {"mode": "upsert", "key": ["user"]}}


@pytest.mark.parametrize("strategy", ["Reprocess", "Auto"])
def test_a_query_over_a_table_that_changes_reads_the_table_anew(strategy: str) -> None:
    old = make_view("SELECT user, page FROM pv", strategy, **UPSERT)
    new = make_view("SELECT user, upper(page) AS page FROM pv", strategy, **UPSERT)
    result = classify(old, new, TABLE, TABLE)
    assert result.kind == "Reprocess"
    assert any("over table pv" in r or "sql changed" in r for r in result.reasons), result.reasons


def test_reading_a_table_as_changes_instead_is_a_new_revision() -> None:
    old = make_view(COUNTS, "Auto", **UPSERT)
    new = make_view(
        COUNTS, "Auto", **UPSERT, inputs=[{"log": "pageviews", "alias": "pv", "read": "changes"}]
    )
    result = classify(old, new, TABLE, TABLE)
    assert result.kind == "Reprocess"
    assert any("read as a stream of changes instead of a table" in r for r in result.reasons)


def test_a_view_over_a_log_that_becomes_compacted_computes_its_rows_anew() -> None:
    view = make_view(COUNTS, "Auto", **UPSERT)
    result = classify(view, view, INPUTS, TABLE)
    assert result.kind == "Reprocess"
    assert "inputs[pv].read changed from changes to table" in result.reasons[-1] or any(
        "read as a table" in r for r in result.reasons
    )


def test_a_stream_views_revision_hash_does_not_change_with_tables() -> None:
    from distributary.plan.revisions.classify import revision_hash, view_definition

    definition = view_definition(make_view(COUNTS, **UPSERT), INPUTS)
    assert '"read"' not in definition.canonical_json()
    assert revision_hash(definition) != revision_hash(
        view_definition(make_view(COUNTS, **UPSERT), TABLE)
    )
