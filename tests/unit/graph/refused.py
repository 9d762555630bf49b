"""A view planned among its Logs as the operator plans it, when the graph refuses it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from distributary.api.view import DerivedView
from distributary.plan.views.view_plan import namespace_pipeline, plan_view
from distributary.plan.views.view_status import RunObservation, view_status


def refused_conditions(
    logs: Sequence[Mapping[str, Any]], view: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Plan `view` among `logs`; it must start nothing and have one `InvalidSpec` problem. The
    conditions its status then has, by type."""
    pipeline, children, _ = namespace_pipeline(list(logs), [dict(view)])
    plan = plan_view(
        pipeline,
        children,
        DerivedView.model_validate(view),
        None,
        checkpoint_root="s3a://bucket/ck",
        bootstrap_servers="kafka:9092",
        generation=1,
    )
    assert plan.runner is None
    assert [p.reason for p in plan.problems] == ["InvalidSpec"]
    status = view_status(plan, RunObservation(), None, 1, datetime(2025, 1, 1, tzinfo=UTC))
    return {c["type"]: c for c in status["conditions"]}
