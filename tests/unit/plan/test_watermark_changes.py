"""What a watermark edit means for a view's checkpoint and revision.

Spark restores the watermark from the checkpoint's offset log and never moves it back; state of
windows it has passed is gone. So on a query that keeps state, a new delay or a new watermark
restarts in place, while removing the watermark or moving it to another column needs a fresh
checkpoint. A query without state ignores the watermark.
"""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api.log import Log
from distributary.api.view import DerivedView
from distributary.plan.revisions.classify import (
    Classification,
    classify_view_change,
    revision_hash,
    view_definition,
)

SCHEMA = "user STRING, page STRING, ts TIMESTAMP, created TIMESTAMP"
INPUTS = {"pv": Log.model_validate({"metadata": {"name": "pageviews"}, "spec": {"schema": SCHEMA}})}
WINDOWED = (
    "SELECT window.start AS window_start, user, count(*) AS n FROM pv "
    "GROUP BY window(ts, '1 minute'), user"
)
STATELESS = "SELECT user, page, ts FROM pv"


def make_view(
    watermark: dict[str, str] | None,
    sql: str = WINDOWED,
    strategy: str = "Auto",
    mode: str = "append",
) -> DerivedView:
    item: dict[str, Any] = {"log": "pageviews", "alias": "pv"}
    if watermark is not None:
        item["watermark"] = watermark
    output: dict[str, Any] = {"mode": mode}
    if mode == "upsert":
        output["key"] = ["window_start", "user"]
    spec = {"inputs": [item], "sql": sql, "upgrade": {"strategy": strategy}, "output": output}
    return DerivedView.model_validate({"metadata": {"name": "counts"}, "spec": spec})


def classify(old: DerivedView, new: DerivedView) -> Classification:
    return classify_view_change(old, new, INPUTS, INPUTS)


def spec_hash(view: DerivedView) -> str:
    return revision_hash(view_definition(view, INPUTS))


TS_30 = {"column": "ts", "delay": "30s"}


def test_a_view_without_a_watermark_keeps_its_revision_hash() -> None:
    # The hash of this definition before inputs could declare a watermark.
    view = make_view(None, sql="SELECT user, page FROM pv", strategy="Reprocess")
    definition = view_definition(view, INPUTS)
    assert "watermark" not in definition.canonical_json()


def test_the_watermark_is_part_of_the_revision() -> None:
    assert spec_hash(make_view(TS_30)) != spec_hash(make_view(None))
    assert spec_hash(make_view(TS_30)) != spec_hash(make_view({"column": "ts", "delay": "1m"}))
    # The same delay written otherwise, and the column in another case, are the same watermark.
    assert spec_hash(make_view({"column": "TS", "delay": "30000ms"})) == spec_hash(make_view(TS_30))


def test_a_new_delay_on_a_stateful_query_restarts_in_place() -> None:
    result = classify(make_view(TS_30), make_view({"column": "ts", "delay": "2m"}))
    assert result.kind == "RestartInPlace"
    assert result.reasons == (
        "inputs[pv].watermark.delay changed from 30s to 2m: Spark's checkpoint accepts it; "
        "restart in place: the watermark it restores never moves back, so windows already "
        "written stay as they are",
    )


def test_a_new_delay_under_reprocess_recomputes_the_output() -> None:
    old = make_view(TS_30, strategy="Reprocess")
    result = classify(old, make_view({"column": "ts", "delay": "2m"}, strategy="Reprocess"))
    assert result.kind == "Reprocess"
    assert result.reasons[0].startswith("inputs[pv].watermark.delay changed from 30s to 2m: ")


@pytest.mark.parametrize("strategy", ["Auto", "InPlace"])
def test_adding_a_watermark_to_a_stateful_query_restarts_in_place(strategy: str) -> None:
    old = make_view(None, strategy=strategy, mode="upsert")
    result = classify(old, make_view(TS_30, strategy=strategy, mode="upsert"))
    assert result.kind == "RestartInPlace"
    assert result.reasons[0].startswith("inputs[pv].watermark was added (ts, 30s): ")
    assert "state of windows the watermark passes is dropped" in result.reasons[0]


def test_removing_a_watermark_from_a_stateful_query_reprocesses_under_auto() -> None:
    old = make_view(TS_30, mode="upsert")
    result = classify(old, make_view(None, mode="upsert"))
    assert result.kind == "Reprocess"
    assert result.reasons[0].startswith(
        "inputs[pv].watermark was removed (was ts, 30s) while the query keeps state: "
    )
    assert result.reasons[0].endswith("reprocess from the start of the inputs instead")


def test_removing_a_watermark_from_a_stateful_query_is_forbidden_in_place() -> None:
    old = make_view(TS_30, strategy="InPlace", mode="upsert")
    result = classify(old, make_view(None, strategy="InPlace", mode="upsert"))
    assert result.kind == "Forbidden"
    assert "set upgrade.strategy to Reprocess or Auto" in result.reasons[0]


def test_moving_the_watermark_to_another_column_reprocesses() -> None:
    sql = WINDOWED.replace("window(ts", "window(created")
    old = make_view({"column": "created", "delay": "30s"}, sql=sql, mode="upsert")
    result = classify(old, make_view(TS_30, sql=sql, mode="upsert"))
    assert result.kind == "Reprocess"
    assert result.reasons[0].startswith(
        "inputs[pv].watermark.column changed from created to ts while the query keeps state: "
        "the watermark Spark restores from the checkpoint was measured on created"
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [(None, TS_30), (TS_30, None), (TS_30, {"column": "created", "delay": "1h"})],
    ids=["added", "removed", "moved"],
)
def test_a_query_without_state_restarts_in_place_whatever_the_watermark(
    old: dict[str, str] | None, new: dict[str, str] | None
) -> None:
    result = classify(make_view(old, sql=STATELESS), make_view(new, sql=STATELESS))
    assert result.kind == "RestartInPlace"
    assert all(r.endswith("the watermark drops nothing; restart in place") for r in result.reasons)


def test_an_unchanged_watermark_is_no_change() -> None:
    assert classify(make_view(TS_30), make_view(dict(TS_30))) == Classification("Ignore")
