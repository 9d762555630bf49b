"""What a revision's failure says: the line of Spark's error that names the cause."""

from __future__ import annotations

from distributary.runner.main import _first_line

WRAPPED = "\n".join(
    [
        "An exception was raised by the Python Proxy. Return Message: Traceback (most recent "
        "call last):",
        '  File "/venv/lib/python3.11/site-packages/py4j/clientserver.py", line 644',
        "    return_value = getattr(self.pool[obj_id], method)(*params)",
        '  File "/work/operator/distributary/runner/exactly_once.py", line 121, in __call__',
        "    rows = frame.toArrow()",
        "pyspark.errors.exceptions.captured.NumberFormatException: [CAST_INVALID_INPUT] The value "
        "'x7' cannot be cast to \"INT\" because it is malformed. SQLSTATE: 22018",
        "",
        "JVM stacktrace:",
        "org.apache.spark.SparkNumberFormatException: [CAST_INVALID_INPUT] ...",
    ]
)


def test_a_failure_in_the_exactly_once_sink_names_the_spark_error() -> None:
    assert _first_line(WRAPPED) == (
        "NumberFormatException: [CAST_INVALID_INPUT] The value 'x7' cannot be cast to \"INT\" "
        "because it is malformed. SQLSTATE: 22018"
    )


def test_any_other_failure_is_its_first_line() -> None:
    assert (
        _first_line("\n  [TABLE_OR_VIEW_NOT_FOUND] nope\nmore") == "[TABLE_OR_VIEW_NOT_FOUND] nope"
    )
    assert _first_line("") == "unknown error"
