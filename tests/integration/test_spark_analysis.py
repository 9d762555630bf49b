"""`validate --spark`: Spark's own analyser on each view's query, over empty streams of its inputs.

One local Spark session serves the whole module (it takes most of the module's time to start);
`distributary validate --spark` run in this process uses it too. Each case is a view over two
logs, analysed as the runner would build it; a refusal must name the view's field and carry
Spark's words. Queries Spark runs, the examples' among them, must not be refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from distributary.cli import main
from distributary.graph import Pipeline, SpecProblem, load_pipeline
from distributary.plan.sources.source_plan import Column, TableShape, resolve_table, resolved
from distributary.runner.analysis import QueryCheck, local_session

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(path for path in (ROOT / "examples").iterdir() if path.is_dir())
# The examples' Sources' tables as their databases describe them (`examples/shop/app.py` makes
# `orders`): the views are analysed over these columns, as `validate --database --spark` does.
TABLES = {
    "public.orders": TableShape(
        "public.orders",
        (
            Column("id", "bigint"),
            Column("customer", "text"),
            Column("amount", "numeric(10,2)"),
            Column("placed_at", "timestamp with time zone"),
        ),
        ("id",),
    ),
    "public.customers": TableShape(
        "public.customers", (Column("id", "text"), Column("city", "text")), ("id",)
    ),
}

LOGS = """\
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: events}
spec:
  partitions: 2
  schema: "user_id STRING, amount INT, page STRING, ts TIMESTAMP, flag BOOLEAN"
---
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: users}
spec:
  partitions: 1
  schema: "user_id STRING, country STRING, joined TIMESTAMP"
"""


def view(
    name: str,
    sql: str,
    mode: str = "append",
    key: str | None = None,
    watermarks: bool = False,
    source: str = "events",
    spark: str = "",
) -> str:
    """A view reading `source` as `ev` and users as `us`; with `watermarks`, on ts and joined."""
    ev = ", watermark: {column: ts, delay: 10s}" if watermarks else ""
    us = ", watermark: {column: joined, delay: 10s}" if watermarks else ""
    output = f"{{mode: {mode}, key: [{key}]}}" if key else f"{{mode: {mode}}}"
    return f"""\
---
apiVersion: distributary.dev/v1alpha1
kind: DerivedView
metadata: {{name: {name}}}
spec:
  inputs: [{{log: {source}, alias: ev{ev}}}, {{log: users, alias: us{us}}}]
  sql: "{sql}"
  output: {output}
{spark}"""


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QueryCheck]:
    """One local Spark session for every case of the module."""
    folder = tmp_path_factory.mktemp("spark-analysis")
    with local_session(folder) as spark:
        yield QueryCheck(spark, folder)


def analysed(check: QueryCheck, folder: Path, *views: str) -> list[SpecProblem]:
    """What Spark refuses in the pipeline of LOGS and `views`, read from a file in `folder`."""
    path = folder / "pipeline.yaml"
    path.write_text(LOGS + "".join(views))
    done: list[str] = []
    problems = check.problems(load_pipeline([path]), progress=done.append)
    assert len(done) == len(views)  # every view was analysed, none skipped
    return problems


REFUSED = [
    # Types: Spark's type rules, which the static analysis does not know.
    (
        "plus-boolean",
        "SELECT user_id, flag + 1 AS x FROM ev",
        "append",
        None,
        "BINARY_OP_DIFF_TYPES",
    ),
    ("plus-time", "SELECT ts + 1 AS t FROM ev", "append", None, "BINARY_OP_DIFF_TYPES"),
    (
        "sum-boolean",
        "SELECT user_id, sum(flag) AS s FROM ev GROUP BY user_id",
        "upsert",
        "user_id",
        'requires the "NUMERIC" or "ANSI INTERVAL" type',
    ),
    # Conditions that are not true or false.
    ("where-int", "SELECT user_id FROM ev WHERE amount", "append", None, "FILTER_NOT_BOOLEAN"),
    ("where-string", "SELECT user_id FROM ev WHERE page", "append", None, "is not a boolean"),
    (
        "case-int",
        "SELECT CASE WHEN amount THEN 1 ELSE 0 END AS c FROM ev",
        "append",
        None,
        'requires the "BOOLEAN" type',
    ),
    (
        "join-on-int",
        "SELECT ev.user_id FROM ev JOIN us ON ev.amount",
        "append",
        None,
        "JOIN_CONDITION_IS_NOT_BOOLEAN_TYPE",
    ),
    # Names Spark cannot resolve.
    ("unknown-column", "SELECT nope FROM ev", "append", None, "UNRESOLVED_COLUMN"),
    ("unknown-function", "SELECT nosuchfn(page) AS p FROM ev", "append", None, "`nosuchfn`"),
    # What Structured Streaming does not run on a stream.
    (
        "exists",
        "SELECT user_id FROM ev WHERE EXISTS (SELECT 1 FROM us WHERE us.user_id = ev.user_id)",
        "append",
        None,
        "Streaming query is not allowed in subquery expressions",
    ),
    (
        "in-subquery",
        "SELECT user_id FROM ev WHERE user_id IN (SELECT user_id FROM us)",
        "append",
        None,
        "INVALID_SUBQUERY_EXPRESSION.STREAMING_QUERY",
    ),
    ("order-by", "SELECT user_id FROM ev ORDER BY amount", "append", None, "Sorting is not"),
    (
        "row-number",
        "SELECT row_number() OVER (ORDER BY ts) AS n FROM ev",
        "append",
        None,
        "NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING",
    ),
    ("limit-upsert", "SELECT * FROM ev LIMIT 5", "upsert", "user_id", "Limits are not supported"),
    (
        "intersect",
        "SELECT user_id FROM ev INTERSECT SELECT user_id FROM us",
        "upsert",
        "user_id",
        "Intersect of streaming",
    ),
    (
        "count-append",
        "SELECT user_id, count(*) AS n FROM ev GROUP BY user_id",
        "append",
        None,
        "without watermark",
    ),
    # Reads none of its inputs.
    ("no-input", "SELECT 1 AS x", "append", None, "Queries without streaming sources"),
    ("values", "SELECT col1 FROM VALUES (1)", "append", None, "read one of the view's inputs"),
    # Joins of two streams.
    (
        "outer-join-unbounded",
        "SELECT ev.user_id, us.country FROM ev LEFT JOIN us ON ev.user_id = us.user_id",
        "append",
        None,
        "Stream-stream LeftOuter join",
    ),
    (
        "join-upsert",
        "SELECT ev.user_id, us.country FROM ev JOIN us ON ev.user_id = us.user_id",
        "upsert",
        "user_id",
        "not supported in Update output mode",
    ),
]


@pytest.mark.parametrize(
    ("name", "sql", "mode", "key", "phrase"), REFUSED, ids=[case[0] for case in REFUSED]
)
def test_spark_refuses_on_spec_sql(
    check: QueryCheck, tmp_path: Path, name: str, sql: str, mode: str, key: str | None, phrase: str
) -> None:
    problems = analysed(check, tmp_path, view(name, sql, mode, key))
    assert len(problems) == 1, problems
    problem = problems[0]
    assert (problem.resource, problem.field) == (f"DerivedView/default/{name}", "spec.sql")
    assert problem.source == str(tmp_path / "pipeline.yaml")
    assert problem.message.startswith("Spark refuses the query: ")
    assert phrase in problem.message
    assert "\n" not in str(problem)
    assert "#" not in problem.message  # no plan (its attributes are `name#12`)
    assert "\tat " not in problem.message


def test_a_key_the_query_does_not_output_is_refused_on_the_key(
    check: QueryCheck, tmp_path: Path
) -> None:
    problems = analysed(
        check, tmp_path, view("keyed", "SELECT count(*) AS n FROM ev", "upsert", "user_id")
    )
    assert [(p.field, p.message.split(" (")[0]) for p in problems] == [
        ("spec.output.key", "names a column the query does not output")
    ]
    assert "`user_id` cannot be resolved" in problems[0].message


def test_a_watermark_on_a_column_that_is_not_a_time_is_refused_on_the_input(
    check: QueryCheck, tmp_path: Path
) -> None:
    text = view("late", "SELECT user_id FROM ev").replace(
        "alias: ev}", "alias: ev, watermark: {column: page, delay: 10s}}"
    )
    problems = analysed(check, tmp_path, text)
    assert [p.field for p in problems] == ["spec.inputs[0].watermark.column"]
    assert problems[0].message.startswith("Spark refuses input ev (events): ")
    assert "EVENT_TIME_IS_NOT_ON_TIMESTAMP_TYPE" in problems[0].message


def test_a_setting_spark_refuses_is_refused_on_spark_conf(
    check: QueryCheck, tmp_path: Path
) -> None:
    settings = '  spark: {sparkConf: {"spark.sql.shuffle.partitions": "many"}}\n'
    problems = analysed(check, tmp_path, view("conf", "SELECT * FROM ev", spark=settings))
    assert [p.field for p in problems] == ["spec.spark.sparkConf"]
    assert "spark.sql.shuffle.partitions" in problems[0].message


ACCEPTED = [
    ("all", "SELECT * FROM ev", "append", None, False),
    ("string-to-number", "SELECT amount + 1 AS a, upper(page) AS p FROM ev", "append", None, False),
    (
        "minutes",
        "SELECT window.start AS start, count(*) AS n FROM ev GROUP BY window(ts, '1 minute')",
        "append",
        None,
        True,
    ),
    (
        "totals",
        "SELECT user_id, sum(amount) AS total, max(ts) AS last FROM ev GROUP BY user_id",
        "upsert",
        "user_id",
        False,
    ),
    (
        "deletes",
        "SELECT user_id, page, amount < 0 AS __deleted FROM ev",
        "upsert",
        "user_id",
        False,
    ),
    (
        "bounded-join",
        "SELECT ev.user_id, us.country FROM ev JOIN us ON ev.user_id = us.user_id "
        "AND us.joined BETWEEN ev.ts - INTERVAL 1 HOUR AND ev.ts",
        "append",
        None,
        True,
    ),
    (
        "bounded-outer-join",
        "SELECT ev.user_id, us.country FROM ev LEFT JOIN us ON ev.user_id = us.user_id "
        "AND us.joined BETWEEN ev.ts - INTERVAL 1 HOUR AND ev.ts",
        "append",
        None,
        True,
    ),
    ("union", "SELECT user_id FROM ev UNION ALL SELECT user_id FROM us", "append", None, False),
    ("limit-append", "SELECT * FROM ev LIMIT 5", "append", None, False),
]


@pytest.mark.parametrize(
    ("name", "sql", "mode", "key", "watermarks"), ACCEPTED, ids=[case[0] for case in ACCEPTED]
)
def test_spark_accepts_what_it_runs(
    check: QueryCheck,
    tmp_path: Path,
    name: str,
    sql: str,
    mode: str,
    key: str | None,
    watermarks: bool,
) -> None:
    assert analysed(check, tmp_path, view(name, sql, mode, key, watermarks)) == []


def test_a_view_of_a_view_reads_the_schema_derived_for_its_input(
    check: QueryCheck, tmp_path: Path
) -> None:
    upstream = view("big", "SELECT user_id, amount * 2 AS doubled FROM ev WHERE amount > 10")
    good = view(
        "big-totals",
        "SELECT user_id, sum(doubled) AS s FROM ev GROUP BY user_id",
        "upsert",
        "user_id",
        source="big",
    )
    bad = view("big-pages", "SELECT page FROM ev", source="big")
    problems = analysed(check, tmp_path, upstream, good, bad)
    assert [(p.resource, p.field) for p in problems] == [
        ("DerivedView/default/big-pages", "spec.sql")
    ]
    assert "UNRESOLVED_COLUMN" in problems[0].message


def with_tables(pipeline: Pipeline) -> Pipeline:
    """The pipeline with its Sources' tables as `TABLES` has them, as `--database` reads them."""
    replaced = {
        ref: resolved(
            source,
            [
                resolve_table(source, index, table, TABLES[table.name])
                for index, table in enumerate(source.spec.tables)
            ],
        )
        for ref, source in pipeline.captures.items()
    }
    return pipeline.rebuilt(replaced) if replaced else pipeline


def test_the_example_tables_are_those_the_shop_makes() -> None:
    made = (ROOT / "examples" / "shop" / "app.py").read_text()
    spelt = {"timestamp with time zone": "timestamptz"}  # as app.py's CREATE TABLE spells it
    for table in TABLES.values():
        for column in table.columns:
            assert f"    {column.name} {spelt.get(column.type, column.type)}" in made


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_every_example_passes(check: QueryCheck, example: Path) -> None:
    pipeline = with_tables(load_pipeline([example]))
    assert pipeline.ok
    assert pipeline.views
    said: list[str] = []
    assert check.problems(pipeline, progress=said.append) == []
    assert len(said) == len(pipeline.views)
    assert all(line.endswith(": ok") for line in said)  # every view analysed, none skipped


def test_a_view_over_a_sources_undeclared_columns_is_left_for_the_database(
    check: QueryCheck,
) -> None:
    shop = ROOT / "examples" / "shop"
    said: list[str] = []
    assert check.problems(load_pipeline([shop]), progress=said.append) == []
    assert said == [
        f"[{n}/2] DerivedView/default/{name}: skipped: input log shop-orders is Source "
        "shop's table, whose columns are read from its database: add --database (or declare "
        "the table's spec.tables[].schema) to analyse it"
        for n, name in ((1, "city-revenue"), (2, "customer-revenue"))
    ]
    result = CliRunner().invoke(main, ["validate", "--spark", str(shop)])
    assert result.exit_code == 0, result.output
    assert "Spark accepts every query it analysed (2 left for --database" in result.stdout


def test_validate_spark_reports_what_only_spark_finds(check: QueryCheck, tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        LOGS
        + view("a-where", "SELECT user_id FROM ev WHERE amount")
        + view("b-function", "SELECT nosuchfn(page) AS p FROM ev")
        + view("c-fine", "SELECT user_id, amount FROM ev WHERE flag")
    )
    assert load_pipeline([path]).ok  # the static checks pass all three
    result = CliRunner().invoke(main, ["validate", "--spark", str(path)])
    assert result.exit_code == 1
    assert "spark: [3/3] DerivedView/default/c-fine: ok" in result.stderr
    refused = [line for line in result.stderr.splitlines() if "Spark refuses" in line]
    assert [line.split(": Spark refuses")[0] for line in refused] == [
        f"{path}: DerivedView/default/a-where spec.sql",
        f"{path}: DerivedView/default/b-function spec.sql",
    ]
    assert "FILTER_NOT_BOOLEAN" in refused[0]
    assert "UNRESOLVED_ROUTINE" in refused[1]
    assert result.stderr.rstrip().endswith("error: 2 problems found by Spark")
    assert result.stdout == ""


def test_validate_spark_passes_an_example(check: QueryCheck) -> None:
    result = CliRunner().invoke(main, ["validate", "--spark", str(ROOT / "examples/clickstream")])
    assert result.exit_code == 0, result.output
    assert result.stdout == "valid: 2 logs, 4 views, 0 jobs; Spark accepts every query\n"
    assert "spark: [4/4]" in result.stderr


def test_validate_spark_asks_spark_only_after_the_static_checks_pass(
    check: QueryCheck, tmp_path: Path
) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(LOGS + view("ordered", "SELECT user_id FROM ev ORDER BY ts"))
    result = CliRunner().invoke(main, ["validate", "--spark", str(path)])
    assert result.exit_code == 1
    assert "DerivedView/default/ordered spec.sql: orders a stream (ORDER BY" in result.stderr
    assert "spark:" not in result.stderr
    assert "Spark refuses" not in result.stderr
