"""A Sink's reconcile, driven through in-memory parts: its process on the topic its Log serves,
restarted after the services' restart policy, a refusal read from its group's commit metadata,
and what it says in status."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.unit.reconcile.fakes import NS, Parts, parts

from distributary.plan.applications.restarts import RestartPolicy
from distributary.plan.sinks.sink_plan import REFUSED_METADATA, sink_group
from distributary.reconcile.sink import reconcile_sink

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
GROUP = sink_group(NS, "accounts-table")


def log(name: str = "accounts", topic: str | None = "accounts", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Log",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"partitions": 1, "schema": "id INT, owner STRING", "key": ["id"], **spec},
    }
    if topic:
        body["status"] = {"topicName": topic}
    return body


def sink(generation: int = 1, **postgres: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Sink",
        "metadata": {
            "name": "accounts-table",
            "namespace": NS,
            "uid": "uid-sink",
            "generation": generation,
        },
        "spec": {
            "log": "accounts",
            "postgres": {
                "host": "db",
                "database": "shop",
                "user": "app",
                "table": "public.accounts",
                "passwordSecret": {"name": "db", "key": "password"},
                **postgres,
            },
        },
    }


def setup(*logs: dict[str, Any], policy: RestartPolicy | None = None) -> Parts:
    p = parts(list(logs) or [log()], [])
    p.admin.ends = {"accounts": 5, "accounts.r2": 5}
    if policy is not None:
        p.policy = policy
    return p


def run(p: Parts, body: dict[str, Any] | None = None, at: datetime = T0) -> dict[str, Any]:
    read = {**copy.deepcopy(body or sink()), "status": p.store.status}
    asyncio.run(reconcile_sink(read, p.services(), p.store, p.world, p.events, now=at))
    return p.store.status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def stalled(status: dict[str, Any]) -> str | None:
    found = [c for c in status["conditions"] if c["type"] == "Stalled" and c["status"] == "True"]
    return found[0]["reason"] if found else None


def commit(p: Parts, offset: int, topic: str = "accounts", metadata: str = "") -> None:
    p.admin.commit(GROUP, {topic: {0: offset}}, metadata=metadata)


def test_the_process_runs_on_the_logs_topic_and_the_sink_is_ready_once_it_holds_the_log() -> None:
    p = setup()
    status = run(p)
    assert ("start sink", "accounts-table", "accounts") in p.journal
    assert ("event", "Started") in p.journal
    assert condition(status, "Ready")["status"] != "True"
    commit(p, 3)
    status = run(p)
    assert condition(status, "Reconciling")["reason"] == "CatchingUp"
    assert "2 records behind" in condition(status, "Reconciling")["message"]
    commit(p, 5)
    status = run(p)
    assert condition(status, "Ready")["status"] == "True"
    assert (status["topic"], status["position"], status["lag"]) == ("accounts", {"0": 5}, 0)
    assert status["process"]["state"] == "RUNNING"


def test_a_log_without_a_topic_or_a_topic_not_made_is_waited_for() -> None:
    p = setup(log(topic=None))
    status = run(p)
    assert condition(status, "Reconciling")["reason"] == "WaitingForLog"
    p = setup(log(topic="accounts.later"))
    status = run(p)
    assert "accounts.later" in condition(status, "Reconciling")["message"]
    assert not [e for e in p.journal if e[0] == "start sink"]


def test_a_log_without_a_schema_stalls_the_sink_and_says_so_once() -> None:
    bare = log()
    del bare["spec"]["schema"]
    p = setup(bare)
    run(p)
    run(p)
    assert stalled(p.store.status) == "LogHasNoSchema"
    assert p.journal.count(("warning", "LogHasNoSchema")) == 1
    assert not [e for e in p.journal if e[0] == "start sink"]


def test_a_missing_secret_stalls_the_sink_naming_the_field() -> None:
    p = setup()
    assert p.sinks is not None
    p.sinks.secrets = set()
    status = run(p, sink(passwordSecret={"name": "db-password", "key": "password"}))
    assert stalled(status) == "SecretMissing"
    assert "passwordSecret" in condition(status, "Stalled")["message"]


def test_a_process_that_exits_is_restarted_after_the_restart_policys_delay() -> None:
    p = setup(policy=RestartPolicy(first_delay=2.0, max_delay=8.0))
    assert p.sinks is not None
    run(p)
    run(p)
    p.sinks.exit("accounts-table", "code -9: killed")
    status = run(p, at=T0 + timedelta(seconds=10))
    assert ("event", "Restarting") in p.journal
    assert condition(status, "Reconciling")["reason"] == "Restarting"
    assert status["process"]["attempts"] == 1
    assert status["process"]["restartAt"] == "2026-11-01T12:00:12Z"  # the policy's 2 s
    mark = len(p.journal)
    run(p, at=T0 + timedelta(seconds=11))  # not due yet
    assert not [e for e in p.since(mark) if e[0] == "start sink"]
    run(p, at=T0 + timedelta(seconds=12))
    assert ("start sink", "accounts-table", "accounts") in p.since(mark)
    assert "accounts-table" in p.sinks.running


def test_failures_without_progress_back_off_and_stall_the_sink_progress_forgives_them() -> None:
    policy = RestartPolicy(first_delay=1.0, max_delay=4.0, failures_before_stalled=3)
    p = setup(policy=policy)
    assert p.sinks is not None
    at = T0
    for _ in range(3):
        run(p, at=at)
        p.sinks.exit("accounts-table", "code 1: the database does not answer")
        at += timedelta(seconds=1)
        run(p, at=at)  # counted
        at += timedelta(seconds=5)
    status = p.store.status
    assert stalled(status) == "ApplicationFailing"
    assert "the database does not answer" in condition(status, "Stalled")["message"]
    run(p, at=at)  # started again at its due time
    commit(p, 2)  # it moves on, then fails again
    p.sinks.exit("accounts-table", "code -9: killed")
    status = run(p, at=at + timedelta(seconds=1))
    assert status["process"]["attempts"] == 1
    assert stalled(status) is None


def test_a_refusal_in_the_groups_metadata_stalls_the_sink_until_its_spec_changes() -> None:
    p = setup()
    assert p.sinks is not None
    run(p)
    commit(p, 0, metadata=REFUSED_METADATA + "table public.accounts has column id of type text")
    p.sinks.exit("accounts-table", "code 3: refused")
    mark = len(p.journal)
    for seconds in (1, 60, 600):
        status = run(p, at=T0 + timedelta(seconds=seconds))
    assert stalled(status) == "StoreRefused"
    assert "column id of type text" in condition(status, "Stalled")["message"]
    assert not [e for e in p.since(mark) if e[0] == "start sink"]
    run(p, sink(2, table="public.accounts_v2"), at=T0 + timedelta(seconds=601))
    assert ("start sink", "accounts-table", "accounts") in p.since(mark)


def test_a_new_serving_topic_gets_a_new_process_filling_the_table_beside() -> None:
    p = setup()
    p.world.served["accounts"] = "accounts"
    run(p)
    mark = len(p.journal)
    p.world.served["accounts"] = "accounts.r2"
    status = run(p)
    assert ("event", "CutOver") in p.since(mark)
    assert ("start sink", "accounts-table", "accounts.r2") in p.since(mark)
    assert status["topic"] == "accounts.r2"


def test_a_view_output_read_before_keeps_its_columns_while_the_log_describes_the_next() -> None:
    p = setup()
    run(p)
    assert p.sinks is not None
    before = p.sinks.runs["accounts-table"]
    p.world.logs = [log(schema="id INT, owner STRING, added STRING")]
    run(p)
    assert p.sinks.runs["accounts-table"].columns == before.columns
