"""The revision hash: what changes a view's output changes it, and nothing else does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from distributary.api.log import Log
from distributary.api.view import DerivedView
from distributary.plan.revisions.classify import revision_hash, view_definition

SQL = "SELECT v.user, c.country FROM v JOIN c ON v.user = c.user WHERE v.page <> 'home'"


def make_log(name: str, schema: str = "user STRING, page STRING", **status: Any) -> Log:
    document: dict[str, Any] = {"metadata": {"name": name}, "spec": {"schema": schema}}
    if status:
        document["status"] = status
    return Log.model_validate(document)


def make_view(**spec: Any) -> DerivedView:
    base: dict[str, Any] = {
        "inputs": [{"log": "views", "alias": "v"}, {"log": "countries", "alias": "c"}],
        "sql": SQL,
        "output": {"mode": "append"},
    }
    base.update(spec)
    return DerivedView.model_validate({"metadata": {"name": "enriched"}, "spec": base})


INPUTS = {"v": make_log("views"), "c": make_log("countries", "user STRING, country STRING")}


def hash_of(view: DerivedView, inputs: dict[str, Log] | None = None) -> str:
    return revision_hash(view_definition(view, INPUTS if inputs is None else inputs))


BASE = hash_of(make_view())


def test_hash_is_twelve_hex_digits_and_pinned() -> None:
    # A new hash format would reprocess every view in every cluster: change it knowingly.
    assert len(BASE) == 12
    assert int(BASE, 16) >= 0
    assert BASE == "a1c027df8e81"


def test_definition_json_is_canonical() -> None:
    text = view_definition(make_view(), INPUTS).canonical_json()
    document = json.loads(text)
    assert text == json.dumps(document, sort_keys=True, separators=(",", ":"))
    assert [i["alias"] for i in document["inputs"]] == ["c", "v"]
    assert document["sql"] == SQL


def test_reordering_inputs_keeps_the_hash() -> None:
    reordered = make_view(
        inputs=[{"log": "countries", "alias": "c"}, {"log": "views", "alias": "v"}]
    )
    assert hash_of(reordered) == BASE


@pytest.mark.parametrize(
    "sql",
    [
        "select v.user, c.country from v join c on v.user = c.user where v.page <> 'home'",
        "SELECT v.user,\n       c.country\n  FROM v\n  JOIN c ON v.user = c.user\n"
        " WHERE v.page <> 'home'  -- not the landing page",
        "/* enrich */ SELECT v.user, c.country FROM v JOIN c ON v.user = c.user "
        "WHERE v.page <> 'home'",
    ],
    ids=["keyword-case", "spacing-and-line-comment", "block-comment"],
)
def test_reformatting_sql_keeps_the_hash(sql: str) -> None:
    assert hash_of(make_view(sql=sql)) == BASE


@pytest.mark.parametrize(
    "spec",
    [
        {"spark": {"trigger": "1m", "executor": {"instances": 4}, "maxOffsetsPerTrigger": 1000}},
        {"spark": {"sparkConf": {"spark.sql.shuffle.partitions": "8"}, "image": "job:2"}},
        {"upgrade": {"strategy": "InPlace", "retireAfter": "2h"}},
        {"output": {"mode": "append", "partitions": 12, "retention": {"time": "7d"}}},
        {"output": {"mode": "append", "deletionPolicy": "Delete", "replicas": 3}},
        {
            "inputs": [
                {"log": "views", "alias": "v", "startingPosition": {"from": "Latest"}},
                {"log": "countries", "alias": "c"},
            ]
        },
    ],
    ids=[
        "spark-resources",
        "spark-conf-image",
        "upgrade",
        "output-topic",
        "output-policy",
        "starting-position",
    ],
)
def test_settings_that_do_not_shape_the_output_keep_the_hash(spec: dict[str, Any]) -> None:
    assert hash_of(make_view(**spec)) == BASE


def test_schema_spelling_keeps_the_hash() -> None:
    inputs = {**INPUTS, "v": make_log("views", "user   string,page STRING")}
    assert hash_of(make_view(), inputs) == BASE


@pytest.mark.parametrize(
    "spec",
    [
        {"sql": SQL.replace("<> 'home'", "<> 'about'")},
        {"sql": SQL.replace("JOIN", "LEFT JOIN")},
        {"output": {"mode": "upsert", "key": ["user"]}},
    ],
    ids=["sql-literal", "sql-join-type", "mode-and-key"],
)
def test_what_shapes_the_output_changes_the_hash(spec: dict[str, Any]) -> None:
    assert hash_of(make_view(**spec)) != BASE


def test_key_columns_and_their_order_change_the_hash() -> None:
    one = make_view(output={"mode": "upsert", "key": ["user"]})
    two = make_view(output={"mode": "upsert", "key": ["user", "country"]})
    swapped = make_view(output={"mode": "upsert", "key": ["country", "user"]})
    assert len({hash_of(one), hash_of(two), hash_of(swapped)}) == 3


def test_an_input_schema_change_changes_the_hash() -> None:
    inputs = {**INPUTS, "v": make_log("views", "user STRING, page STRING, ts TIMESTAMP")}
    assert hash_of(make_view(), inputs) != BASE


def test_a_new_serving_topic_upstream_changes_the_hash() -> None:
    # After an upstream view cuts over, its output Log serves another topic: read it afresh.
    inputs = {
        **INPUTS,
        "c": make_log("countries", "user STRING, country STRING", topicName="countries-r2"),
    }
    assert view_definition(make_view(), inputs).inputs[0].topic == "countries-r2"
    assert hash_of(make_view(), inputs) != BASE


def test_reading_another_log_under_the_same_alias_changes_the_hash() -> None:
    view = make_view(inputs=[{"log": "clicks", "alias": "v"}, {"log": "countries", "alias": "c"}])
    assert hash_of(view, {**INPUTS, "v": make_log("clicks")}) != BASE


def test_a_missing_input_log_is_named() -> None:
    with pytest.raises(ValueError, match=r"enriched.*alias 'c'.*countries"):
        view_definition(make_view(), {"v": INPUTS["v"]})
