"""Spark's refusal of a view's query as one line a person can act on.

Spark's errors are long: an error condition, a message, a SQLSTATE, a position, then the whole
logical plan and a JVM stack trace, sometimes wrapped in py4j's own report. Only the message is
the user's business, so `spark_words` keeps Spark's own words (they say exactly what it refused,
and they are what a search finds) and drops the rest; `refusal` adds where in the SQL and, for
the refusals a view meets most, what to do. This module imports no Spark, so it is tested on the
texts Spark really gives, without a JVM.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_WORDS = 400  # characters of Spark's message kept on the line

_PY4J_PREFIX = re.compile(r"^An error occurred while calling [^\n]*\n:\s*")
_EXCEPTION_CLASS = re.compile(r"^(?:[A-Za-z_][\w$]*\.)+[A-Za-z_][\w$]*(?:Exception|Error):\s*")
_CONDITION = re.compile(r"^\[([A-Z][A-Z0-9_.]*)\]\s*")
_SQLSTATE = re.compile(r"\s*SQLSTATE:\s*[0-9A-Z]{5}")
_POSITION = re.compile(r";?\s*line (\d+) pos (\d+)\s*;?\s*$")
_STACK = re.compile(
    r"^\s*(?:at [\w$.<>]+\(|\.\.\. \d+ more|JVM stacktrace:|Caused by:|Suppressed:)"
)


@dataclass(frozen=True)
class SparkWords:
    """What Spark said, without its plan and stack: the error condition (e.g.
    `UNRESOLVED_COLUMN.WITH_SUGGESTION`, None for older errors), the message, and the line and
    position in the SQL it points at (None when it points at the whole query)."""

    condition: str | None
    message: str
    line: int | None = None
    position: int | None = None


def spark_words(text: str) -> SparkWords:
    """The part of Spark's error `text` (an exception's str) that says what is wrong."""
    text = _PY4J_PREFIX.sub("", text.strip())
    text = _EXCEPTION_CLASS.sub("", text)
    kept: list[str] = []
    for line in text.splitlines():
        if _STACK.match(line):
            break
        if line.strip():
            kept.append(line.strip())
        # An analysis error's message ends with ';' and the query's plan follows it.
        if line.rstrip().endswith(";"):
            break
    message = " ".join(" ".join(kept).split())
    found = _CONDITION.match(message)
    condition = found.group(1) if found else None
    message = _SQLSTATE.sub("", message[found.end() :] if found else message)
    line_no = position = None
    located = _POSITION.search(message)
    if located:
        message = message[: located.start()]
        line_no, position = int(located.group(1)), int(located.group(2))
        if (line_no, position) == (1, 0):  # Spark's origin of the whole query: says nothing
            line_no = position = None
    message = message.strip().rstrip(";").rstrip()
    if message.endswith(".") and not message.endswith(".."):
        message = message[:-1]  # the line goes on after Spark's words
    if len(message) > MAX_WORDS:
        message = message[: MAX_WORDS - 3].rstrip() + "..."
    return SparkWords(condition, message or "no message", line_no, position)


def refusal(text: str, aliases: Sequence[str], mode: str, subject: str = "the query") -> str:
    """One line saying that Spark refuses `subject` (of `spec.sql`: the query), in Spark's words,
    and what to do when that is clear: `text` is Spark's error, `aliases` the view's input
    aliases and `mode` its output mode (`append` or `upsert`)."""
    words = spark_words(text)
    where = [words.condition] if words.condition else []
    if words.line is not None:
        where.append(f"line {words.line} position {words.position}")
    said = f"{words.message} ({', '.join(where)})" if where else words.message
    hint = fix_hint(words, aliases, mode)
    return f"Spark refuses {subject}: {said}" + (f"; {hint}" if hint else "")


def fix_hint(words: SparkWords, aliases: Sequence[str], mode: str) -> str | None:
    """What to do about a refusal, for the common ones; None when Spark's words are all."""
    condition, message = words.condition or "", words.message
    if condition.startswith("UNRESOLVED_COLUMN"):
        return (
            "use a column the inputs declare (in their Log's spec.schema) or the query defines, "
            "or declare the column"
        )
    if condition.startswith(("UNRESOLVED_ROUTINE", "ROUTINE_NOT_FOUND")):
        return "call one of Spark SQL's built-in functions (a view cannot register its own)"
    if condition in ("DATATYPE_MISMATCH.FILTER_NOT_BOOLEAN", "JOIN_CONDITION_IS_NOT_BOOLEAN_TYPE"):
        return "write a condition that is true or false, such as `amount > 0` or `flag = true`"
    if condition.startswith("DATATYPE_MISMATCH"):
        return "make the types agree, e.g. with CAST(expr AS type)"
    if condition.startswith("TABLE_OR_VIEW_NOT_FOUND"):
        return f"read the view's inputs by their aliases ({_listed(aliases)})"
    if condition == "INVALID_SUBQUERY_EXPRESSION.STREAMING_QUERY":
        return "read the input with a JOIN instead (IN and EXISTS: LEFT SEMI JOIN)"
    if condition == "NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING":
        return "aggregate over time with GROUP BY window(column, '1 minute') instead of OVER (...)"
    if condition.startswith("STREAMING_OUTPUT_MODE") and mode == "append":
        return (
            "in append mode an aggregate is written once, when its window has closed: declare a "
            "watermark on the input (spec.inputs[].watermark) and GROUP BY a window() of its "
            "column, or make the view a table (spec.output.mode: upsert with spec.output.key)"
        )
    if message.startswith("Queries without streaming sources"):
        return f"read one of the view's inputs ({_listed(aliases)}) in its FROM clause"
    if message.startswith("Sorting is not supported"):
        return "remove the ORDER BY: a view's output is a log, in the order its rows are written"
    if message.startswith("Join between two streaming") and "Update output mode" in message:
        return "a join of two inputs runs in append mode only: set spec.output.mode to append"
    if message.startswith("Stream-stream") and "watermark" in message:
        return (
            "declare a watermark on both inputs (spec.inputs[].watermark) and bound the join by "
            "time in its ON clause, e.g. b.ts BETWEEN a.ts AND a.ts + INTERVAL 1 HOUR"
        )
    return None


def _listed(aliases: Sequence[str]) -> str:
    return ", ".join(aliases) or "none: declare spec.inputs"
