"""The live table of `distributary run` shows the pipeline's two ends beside its views: each Source
(its slot's lag, the Logs it writes, its state) and each Sink (its topic and table, position,
lag, state), from what the run records of them in `sources.json` and `sinks.json`."""

from __future__ import annotations

import io

from rich.console import Console

from distributary.local.status import Snapshot, one_line, render, sink_row, source_row

SOURCE = {
    "status": {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Capturing"},
            {"type": "DataLossRisk", "status": "True", "message": "the slot keeps 2 GiB of WAL"},
        ],
        "tables": [{"name": "public.orders", "log": "shop-orders"}],
        "slot": {"name": "distributary_default_shop", "lagBytes": 12345, "lagSeconds": 3.2},
    }
}
SINK = {"topic": "customer-revenue", "table": "public.customer_revenue",
        "position": {"0": 40, "1": 2}, "lag": 3, "ready": True, "problem": None}  # fmt: skip


def test_a_source_shows_its_slot_its_logs_its_lag_and_a_data_loss_risk() -> None:
    row = source_row("shop", SOURCE)
    assert row.where == "slot distributary_default_shop -> shop-orders"
    assert row.lag == "12,345 B / 3 s"
    assert row.state == "Capturing: the slot keeps 2 GiB of WAL"
    assert source_row("new", {}).state == "Starting"


def test_a_sink_shows_its_table_position_lag_and_why_it_stalled() -> None:
    row = sink_row("revenue-table", SINK)
    assert (row.where, row.position, row.lag, row.state) == (
        "customer-revenue -> public.customer_revenue", "42", "3", "Running",
    )  # fmt: skip
    stalled = sink_row("t", {**SINK, "ready": False, "problem": "column n changed type"})
    assert stalled.state == "Stalled: column n changed type"


def test_both_are_in_the_table_and_the_status_line() -> None:
    snapshot = Snapshot((), (), ends=(source_row("shop", SOURCE), sink_row("revenue-table", SINK)))
    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(render(snapshot))
    lines = out.getvalue().splitlines()
    assert any(line.split()[:2] == ["source", "shop"] for line in lines)
    assert any(line.split()[:2] == ["sink", "revenue-table"] and "42" in line for line in lines)
    assert one_line(snapshot) == (
        "source shop lag 12,345 B / 3 s Capturing: the slot keeps 2 GiB of WAL; "
        "sink revenue-table lag 3 Running"
    )
