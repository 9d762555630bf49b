"""A Source's reconcile, driven through in-memory parts: a re-snapshot's revision beside the
serving one where Connect lists the connectors' offsets (and not where it cannot), its cutover
moving the table Logs through the world's `serve` once the rows say so, the replaced revision
retired only after the rows recording it Retiring are written, failed connectors restarted
after the restart policy's back-off."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.unit.reconcile.fakes import Parts, parts

from distributary.plan.applications.restarts import RestartPolicy
from distributary.plan.sources.source_plan import Column, TableShape
from distributary.plan.sources.source_revisions import CATCHING_UP, RETIRED, RETIRING, SERVING
from distributary.plan.views.view_plan import SERVING_ANNOTATION
from distributary.reconcile.source import reconcile_source

R1, R2 = "distributary.sales.shop", "distributary.sales.shop.r2"
SERVING_ONLY = [{"revision": 1, "phase": SERVING, "epoch": 0, "snapshotDone": True}]
SHAPE = TableShape("public.orders", (Column("id", "integer"), Column("amount", "integer")), ("id",))


def source(epoch: int = 0, paused: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "Source",
        "metadata": {"name": "shop", "namespace": "sales", "uid": "u", "generation": 2},
        "spec": {
            "postgres": {
                "host": "db",
                "database": "shop",
                "user": "cdc",
                "passwordSecret": {"name": "db"},
            },
            "tables": [{"name": "public.orders"}],
            "snapshot": {"epoch": epoch},
            "paused": paused,
        },
    }


def offsets(lsn: int) -> dict[str, Any]:
    return {"offsets": [{"partition": {}, "offset": {"lsn_proc": lsn, "lsn_commit": lsn}}]}


def setup(lists: bool = True, revisions: list[dict[str, Any]] | None = None) -> Parts:
    p = parts([], [])
    assert p.connectors is not None
    assert p.captures is not None
    p.connectors.lists = lists
    p.captures.shapes = {"public.orders": SHAPE}
    if revisions is not None:
        p.store.saved = {"servingRevision": 1, "revisions": revisions}
    return p


def run(p: Parts, body: dict[str, Any] | None = None) -> dict[str, Any]:
    read = {**copy.deepcopy(body or source()), "status": p.store.status}
    asyncio.run(reconcile_source(read, p.services(), p.store, p.world, p.events))
    return p.store.status


def phases(status: dict[str, Any]) -> dict[int, str]:
    return {r["revision"]: r["phase"] for r in status["revisions"]}


def stalled(status: dict[str, Any]) -> dict[str, Any] | None:
    found = [c for c in status["conditions"] if c["type"] == "Stalled" and c["status"] == "True"]
    return found[0] if found else None


def at(journal: list[Any], entry: Any) -> int:
    return next(i for i, e in enumerate(journal) if e == entry or e[: len(entry)] == entry)


def test_a_source_applies_its_table_log_and_runs_its_connector() -> None:
    p = setup()
    status = run(p)
    assert ("apply", "shop-orders") in p.journal
    assert ("connector", R1, "running") in p.journal
    assert status["connector"] == R1
    assert status["connectorState"] == "RUNNING"
    assert status["tables"][0]["log"] == "shop-orders"
    assert next(c for c in status["conditions"] if c["type"] == "Ready")["reason"] == "Capturing"
    assert p.topics_made == ["distributary-heartbeat.distributary.sales.shop"]


def test_a_raised_epoch_starts_revision_2_beside_and_its_cutover_is_written_ahead() -> None:
    p = setup(revisions=list(SERVING_ONLY))
    assert p.connectors is not None
    p.connectors.known[R1] = offsets(900)
    recorded = run(p, source(1))
    assert phases(recorded) == {1: SERVING, 2: CATCHING_UP}
    assert ("connector", R2, "running") in p.journal
    assert not [e for e in p.journal if e[0] == "serve"]
    assert p.world.adopted["shop-orders"]["metadata"].get("annotations") in (None, {})
    mark = len(p.journal)
    p.connectors.known[R2] = offsets(950)  # whole, and past what revision 1 has written
    status = run(p, source(1))
    after = p.since(mark)
    assert status["servingRevision"] == 2
    assert phases(status) == {1: RETIRED, 2: SERVING}
    topic = status["tables"][0]["topic"]
    assert topic.endswith(".r2")
    assert p.world.served["shop-orders"] == topic
    assert p.world.adopted["shop-orders"]["metadata"]["annotations"] == {SERVING_ANNOTATION: "2"}
    record = next(i for i, e in enumerate(after) if e[0] == "record")
    assert phases(after[record][1]) == {1: RETIRING, 2: SERVING}
    assert record < at(after, ("serve", "shop-orders"))
    assert at(after, ("serve", "shop-orders")) < at(after, ("delete connector", R1))
    assert at(after, ("delete connector", R1)) < at(after, ("drop", "distributary_sales_shop"))
    assert status["connector"] == R2
    assert status["publication"] == "distributary_sales_shop_r2"
    assert ("event", "CutOver") in after


def cut_over_rows() -> list[dict[str, Any]]:
    """The rows a cutover writes: revision 2 serves (its snapshot whole), revision 1 retires."""
    return [
        {"revision": 1, "phase": RETIRING, "epoch": 0},
        {
            "revision": 2,
            "phase": SERVING,
            "epoch": 1,
            "snapshotDone": True,
            "topics": {"public.orders": "shop-orders.r2"},
        },
    ]


def test_a_revision_recorded_retiring_is_retired_by_the_next_reconcile() -> None:
    p = setup(revisions=cut_over_rows())
    p.store.saved["servingRevision"] = 2
    assert p.connectors is not None
    p.connectors.known[R2] = offsets(950)
    status = run(p, source(1))
    assert ("delete connector", R1) in p.journal
    assert ("drop", "distributary_sales_shop") in p.journal
    assert phases(status) == {1: RETIRED, 2: SERVING}


def test_rows_written_but_not_acted_on_are_acted_on_by_the_next_reconcile() -> None:
    """A crash after the cutover's rows were written, before the table Log moved: the rows say
    revision 2 serves, so the next reconcile points the Log at its topic."""
    p = setup(revisions=cut_over_rows())
    p.store.saved["servingRevision"] = 2
    status = run(p, source(1))
    assert p.world.served["shop-orders"] == status["tables"][0]["topic"]
    assert status["tables"][0]["topic"].endswith(".r2")


def test_a_raised_epoch_is_stalled_where_offsets_cannot_be_listed_and_the_connector_kept() -> None:
    p = setup(lists=False, revisions=list(SERVING_ONLY))
    status = run(p, source(1))
    found = stalled(status)
    assert found is not None
    assert found["reason"] == "ResnapshotUnsupported"
    assert "spec.snapshot.epoch" in found["message"]
    assert [e[1] for e in p.journal if e[0] == "connector"] == [R1]  # kept as before
    assert phases(status) == {1: SERVING}
    assert not [e for e in p.journal if e[0] in ("delete connector", "drop")]


def test_a_failed_connector_is_restarted_after_the_restart_policys_delay() -> None:
    p = setup()
    p.policy = RestartPolicy(first_delay=0.0)
    assert p.connectors is not None
    run(p)
    p.connectors.failed.add(R1)
    status = run(p)  # seen failed: its restart scheduled
    assert ("warning", "ConnectorFailed") in p.journal
    assert not [e for e in p.journal if e[0] == "restart connector"]
    assert next(c for c in status["conditions"] if c["type"] == "Reconciling")["status"] == "True"
    run(p)  # due at once
    assert ("restart connector", R1) in p.journal
    assert p.memory.restarted == {R1}  # its snapshot, if it took one, is not to be trusted


def test_a_missing_secret_or_table_stalls_the_source_naming_the_fix() -> None:
    p = setup()
    p.secrets = set()
    found = stalled(run(p))
    assert found is not None
    assert found["reason"] == "SecretMissing"
    p = setup()
    assert p.captures is not None
    p.captures.shapes = {"public.orders": None}
    found = stalled(run(p))
    assert found is not None
    assert "public.orders" in found["message"]
    assert not [e for e in p.journal if e[0] == "connector"]


def test_a_database_that_does_not_answer_is_work_under_way() -> None:
    p = setup()
    assert p.captures is not None
    p.captures.down = "connection refused"
    status = run(p)
    reconciling = next(c for c in status["conditions"] if c["type"] == "Reconciling")
    assert reconciling["status"] == "True"
    assert "connection refused" in reconciling["message"]
