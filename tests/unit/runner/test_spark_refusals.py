"""Spark's refusal of a query as one line: Spark's own words without its plan and stack, where in
the SQL, and what to do. The texts are what Spark 4.1 really gives (`str()` of the exception)."""

from __future__ import annotations

import pytest

from distributary.runner.refusals import MAX_WORDS, SparkWords, fix_hint, refusal, spark_words

FILTER_NOT_BOOLEAN = (
    '[DATATYPE_MISMATCH.FILTER_NOT_BOOLEAN] Cannot resolve "amount" due to data type mismatch: '
    'Filter expression "amount" of type "INT" is not a boolean. SQLSTATE: 42K09; line 1 pos 0;\n'
    "~Project [amount#0, ts#1]\n"
    "+- ~Filter amount#0: int\n"
    "   +- ~SubqueryAlias ev\n"
    "      +- View (`ev`, [amount#0, ts#1])\n"
    "         +- ~StreamingRelation DataSource(org.apache.spark.sql.classic.SparkSession@403433e5,"
    "parquet,List(),None), FileSource[/tmp/tmpkzuwj2vs], [amount#0, ts#1]\n"
)
SORTING = (
    "Sorting is not supported on streaming DataFrames/Datasets, unless it is on aggregated "
    "DataFrame/Dataset in Complete output mode;\n"
    "~Sort [amount#0 ASC NULLS FIRST], true\n"
    "+- ~Project [amount#0, ts#1]\n"
)
NON_TIME_WINDOW = (
    "[NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING] Window function is not supported in "
    "ROW_NUMBER() (as column `n`) on streaming DataFrames/Datasets.\n"
    "Structured Streaming only supports time-window aggregation using the WINDOW function. "
    "(window specification: (ORDER BY EV.TS ASC NULLS FIRST ROWS BETWEEN UNBOUNDED PRECEDING AND "
    "CURRENT ROW)) SQLSTATE: 42KDE; line 1 pos 0"
)
UNKNOWN_FUNCTION = (
    "[UNRESOLVED_ROUTINE] Cannot resolve routine `nosuchfn` on search path [`system`.`builtin`, "
    "`system`.`session`, `spark_catalog`.`default`]. SQLSTATE: 42883; line 2 pos 2"
)
PY4J_WRAPPED = (
    "An error occurred while calling o33.sql.\n"
    ": org.apache.spark.sql.AnalysisException: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, "
    "variable, or function parameter with name `nope` cannot be resolved. Did you mean one of "
    "the following? [`ts`, `amount`]. SQLSTATE: 42703; line 1 pos 7;\n"
    "'Project ['nope]\n"
    "\tat org.apache.spark.sql.catalyst.analysis.package$AnalysisErrorAt.failAnalysis("
    "package.scala:52)\n"
    "\tat org.apache.spark.sql.catalyst.analysis.CheckAnalysis.checkAnalysis0(Check.scala:1)"
)
WITH_JVM_STACK = (
    "[TABLE_OR_VIEW_NOT_FOUND] The table or view `orders` cannot be found. SQLSTATE: 42P01\n"
    "\n"
    "JVM stacktrace:\n"
    "org.apache.spark.sql.catalyst.ExtendedAnalysisException: [TABLE_OR_VIEW_NOT_FOUND] ...\n"
    "\tat org.apache.spark.sql.catalyst.analysis.package$AnalysisErrorAt.failAnalysis(x.scala:1)"
)


def test_an_analysis_error_loses_its_plan_sqlstate_and_whole_query_position() -> None:
    assert spark_words(FILTER_NOT_BOOLEAN) == SparkWords(
        "DATATYPE_MISMATCH.FILTER_NOT_BOOLEAN",
        'Cannot resolve "amount" due to data type mismatch: Filter expression "amount" of type '
        '"INT" is not a boolean',
    )


def test_an_error_without_condition_is_its_message_before_the_plan() -> None:
    words = spark_words(SORTING)
    assert words.condition is None
    assert words.message == (
        "Sorting is not supported on streaming DataFrames/Datasets, unless it is on aggregated "
        "DataFrame/Dataset in Complete output mode"
    )


def test_a_message_of_two_lines_is_kept_whole_on_one() -> None:
    words = spark_words(NON_TIME_WINDOW)
    assert words.condition == "NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING"
    assert words.message.startswith("Window function is not supported in ROW_NUMBER()")
    assert "Structured Streaming only supports time-window aggregation" in words.message
    assert "\n" not in words.message
    assert "SQLSTATE" not in words.message


def test_a_position_inside_the_query_is_kept() -> None:
    words = spark_words(UNKNOWN_FUNCTION)
    assert (words.condition, words.line, words.position) == ("UNRESOLVED_ROUTINE", 2, 2)
    assert words.message.endswith("`spark_catalog`.`default`]")


def test_py4j_wrapping_java_class_and_stack_are_dropped() -> None:
    words = spark_words(PY4J_WRAPPED)
    assert words.condition == "UNRESOLVED_COLUMN.WITH_SUGGESTION"
    assert words.message == (
        "A column, variable, or function parameter with name `nope` cannot be resolved. Did you "
        "mean one of the following? [`ts`, `amount`]"
    )
    assert (words.line, words.position) == (1, 7)


def test_pysparks_jvm_stacktrace_section_is_dropped() -> None:
    words = spark_words(WITH_JVM_STACK)
    assert words == SparkWords(
        "TABLE_OR_VIEW_NOT_FOUND", "The table or view `orders` cannot be found"
    )


def test_a_very_long_message_is_cut() -> None:
    words = spark_words("[X] " + "word " * 500)
    assert len(words.message) == MAX_WORDS
    assert words.message.endswith("...")


def test_an_empty_error_still_says_something() -> None:
    assert spark_words("").message == "no message"


def test_the_line_names_spark_its_words_the_condition_and_the_fix() -> None:
    assert refusal(FILTER_NOT_BOOLEAN, ["ev"], "append") == (
        'Spark refuses the query: Cannot resolve "amount" due to data type mismatch: Filter '
        'expression "amount" of type "INT" is not a boolean '
        "(DATATYPE_MISMATCH.FILTER_NOT_BOOLEAN); write a condition that is true or false, such "
        "as `amount > 0` or `flag = true`"
    )
    assert refusal(UNKNOWN_FUNCTION, ["ev"], "append").startswith(
        "Spark refuses the query: Cannot resolve routine `nosuchfn` on search path "
    )
    assert "(UNRESOLVED_ROUTINE, line 2 position 2); call one of Spark SQL's built-in" in (
        refusal(UNKNOWN_FUNCTION, ["ev"], "append")
    )


def test_an_error_without_a_known_fix_is_spark_words_alone() -> None:
    text = "[SOMETHING_NEW] Spark found something else. SQLSTATE: 42000"
    assert refusal(text, ["ev"], "append", "input ev (log events)") == (
        "Spark refuses input ev (log events): Spark found something else (SOMETHING_NEW)"
    )


@pytest.mark.parametrize(
    ("text", "mode", "fix"),
    [
        (SORTING, "append", "remove the ORDER BY"),
        (NON_TIME_WINDOW, "append", "GROUP BY window(column, '1 minute')"),
        (PY4J_WRAPPED, "append", "use a column the inputs declare"),
        (WITH_JVM_STACK, "append", "by their aliases (ev, us)"),
        (
            "Queries without streaming sources cannot be executed with writeStream.start();\n"
            "Project [1 AS x#25]",
            "append",
            "read one of the view's inputs (ev, us) in its FROM",
        ),
        (
            "[INVALID_SUBQUERY_EXPRESSION.STREAMING_QUERY] Invalid subquery: Streaming query is "
            "not allowed in subquery expressions. SQLSTATE: 42823",
            "append",
            "LEFT SEMI JOIN",
        ),
        (
            "Join between two streaming DataFrames/Datasets is not supported in Update output "
            "mode, only in Append output mode;\n~Join Inner",
            "upsert",
            "set spec.output.mode to append",
        ),
        (
            "Stream-stream LeftOuter join between two streaming DataFrame/Datasets is not "
            "supported without a watermark in the join keys, or a watermark on the nullable side "
            "and an appropriate range condition;\n~Join LeftOuter",
            "append",
            "declare a watermark on both",
        ),
        (
            '[JOIN_CONDITION_IS_NOT_BOOLEAN_TYPE] The join condition "amount" has the invalid type '
            '"INT", expected "BOOLEAN". SQLSTATE: 42K0E',
            "append",
            "true or false",
        ),
        (
            '[DATATYPE_MISMATCH.BINARY_OP_DIFF_TYPES] Cannot resolve "(flag + 1)" due to data type '
            "mismatch. SQLSTATE: 42K09",
            "append",
            "CAST(expr AS type)",
        ),
    ],
)
def test_common_refusals_say_what_to_do(text: str, mode: str, fix: str) -> None:
    hint = fix_hint(spark_words(text), ["ev", "us"], mode)
    assert hint is not None
    assert fix in hint


def test_the_output_mode_fix_is_for_append_views_only() -> None:
    text = (
        "[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] Invalid streaming output mode: append. "
        "This output mode is not supported for streaming aggregations without watermark on "
        "streaming DataFrames/DataSets. SQLSTATE: 42KDE"
    )
    append = fix_hint(spark_words(text), ["ev"], "append")
    assert append is not None
    assert "spec.inputs[].watermark" in append
    assert "spec.output.mode: upsert" in append
    assert fix_hint(spark_words(text), ["ev"], "upsert") is None
