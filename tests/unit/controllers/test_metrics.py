"""The operator's metrics: reconciles counted by outcome and timed, log offsets published and
forgotten."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from distributary.controllers import metrics


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_reconcile_is_counted_by_outcome_and_timed() -> None:
    ok_before = sample("distributary_reconciles_total", kind="Test", outcome="ok")
    errors_before = sample("distributary_reconciles_total", kind="Test", outcome="error")
    with metrics.reconciling("Test"):
        pass
    with pytest.raises(RuntimeError), metrics.reconciling("Test"):
        raise RuntimeError("broken")
    assert sample("distributary_reconciles_total", kind="Test", outcome="ok") == ok_before + 1
    assert (
        sample("distributary_reconciles_total", kind="Test", outcome="error") == errors_before + 1
    )
    assert sample("distributary_reconcile_duration_seconds_count", kind="Test") >= 2


def test_a_logs_offsets_are_published_and_forgotten_with_it() -> None:
    metrics.record_log_offsets("ns", "clicks", {"0": 5, "1": 7}, 12)
    assert sample("distributary_log_end_offset", namespace="ns", log="clicks", partition="1") == 7
    assert sample("distributary_log_records", namespace="ns", log="clicks") == 12
    metrics.forget_log("ns", "clicks")
    gone = REGISTRY.get_sample_value(
        "distributary_log_records", {"namespace": "ns", "log": "clicks"}
    )
    assert gone is None
    metrics.forget_log("ns", "clicks")  # forgetting twice is harmless


def test_a_views_lag_and_rate_are_published_from_its_status() -> None:
    status = {"servingRevision": 2, "lag": 42, "lastProgress": {"recordsPerSecond": 1500.0}}
    metrics.record_view("ns", "big", status)
    assert sample("distributary_view_lag_records", namespace="ns", view="big", revision="2") == 42
    rate = sample("distributary_view_records_per_second", namespace="ns", view="big", revision="2")
    assert rate == 1500.0
