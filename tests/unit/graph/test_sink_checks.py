"""What the graph checks of a Sink: the Log it reads exists, and its table is keyed as the Log."""

from __future__ import annotations

from typing import Any

from distributary.api import parse_resource
from distributary.graph import Pipeline, Ref

LOG: dict[str, Any] = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "accounts"},
    "spec": {"schema": "id INT, owner STRING", "key": ["id"], "compaction": True},
}


def _sink(**postgres: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Sink",
        "metadata": {"name": "accounts-table"},
        "spec": {
            "log": postgres.pop("log", "accounts"),
            "postgres": {
                "host": "db",
                "database": "serving",
                "user": "server",
                "passwordSecret": {"name": "serving-db"},
                "table": "public.accounts",
                **postgres,
            },
        },
    }


def _problems(*documents: dict[str, Any]) -> list[str]:
    return [str(p) for p in Pipeline.build([parse_resource(d) for d in documents]).problems]


def test_a_sink_reads_its_log_and_comes_after_it() -> None:
    pipeline = Pipeline.build([parse_resource(LOG), parse_resource(_sink())])
    assert pipeline.ok
    sink = Ref("Sink", "default", "accounts-table")
    assert (Ref.log("accounts"), sink) in pipeline.edges
    assert pipeline.order[-1] == sink


def test_an_unknown_log_a_key_that_is_not_the_logs_and_an_unkeyed_upsert_are_refused() -> None:
    assert _problems(LOG, _sink(log="acounts")) == [
        "Sink/default/accounts-table spec.log: names no Log 'acounts' in namespace 'default' "
        "(did you mean 'accounts'?): declare a Log of that name or fix the name"
    ]
    assert _problems(LOG, _sink(key=["owner"])) == [
        "Sink/default/accounts-table spec.postgres.key: is ['owner'], but Log 'accounts' is "
        "keyed by ['id']: a row's key is its records' key; remove spec.postgres.key or make it "
        "the Log's key"
    ]
    unkeyed = {**LOG, "spec": {"schema": "id INT, owner STRING"}}
    assert _problems(unkeyed, _sink()) == [
        "Sink/default/accounts-table spec.postgres.mode: is upsert, but Log 'accounts' has no "
        "key: a table of the latest record per key needs one; key the Log (a view: output.mode "
        "upsert with a key), or set mode: append"
    ]
    assert _problems(unkeyed, _sink(mode="append")) == []
