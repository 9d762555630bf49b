"""The operator's sweep of deleted Logs' claims: the claims topic's end is read before the Logs
are listed, only the watched namespaces are listed and swept, one log line per Log released,
none when nothing is stale, and a listing that fails releases nothing and says so once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from distributary.backends.claimed import ClaimedTopicBackend
from distributary.controllers.logs import sweep_claims
from distributary.controllers.services import OperatorServices
from distributary.controllers.settings import OperatorSettings
from distributary.kafka.claims import SweepStart
from distributary.kube.errors import KubeError
from distributary.plan.kafka_topics.claims import Claimant

GONE = Claimant("team-a", "gone")


@dataclass
class FakeClaims:
    """The claims log: what a sweep asked of it, in order, with the calls to the API server."""

    calls: list[Any]
    stale: dict[Claimant, list[str]] = field(default_factory=dict)

    def sweep_start(self) -> SweepStart:
        self.calls.append("end read")
        return SweepStart(7, 0.0)

    def release_stale(
        self, start: SweepStart, existing: Collection[str], watched: Collection[str] | None
    ) -> dict[Claimant, list[str]]:
        self.calls.append(("release", start.end, set(existing), watched))
        return self.stale


@dataclass
class FakeKube:
    calls: list[Any]
    failure: KubeError | None = None

    def list(self, api_version: str, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        self.calls.append(("list", kind, namespace))
        if self.failure is not None:
            raise self.failure
        return [{"metadata": {"namespace": namespace or "team-a", "name": "orders"}}]


def services(
    namespaces: tuple[str, ...], stale: dict[Claimant, list[str]], failure: KubeError | None = None
) -> tuple[OperatorServices, list[Any]]:
    calls: list[Any] = []
    claims = FakeClaims(calls, stale)
    topics = ClaimedTopicBackend(cast(Any, None), cast(Any, claims), cast(Any, None))
    built = OperatorServices(
        checkpoint_root="file:///ck",
        bootstrap_servers="kafka:9092",
        admin=cast(Any, None),
        progress=cast(Any, None),
        topics=topics,
        runtime=cast(Any, None),
        lost_history=lambda _topics, _tables: None,
        settings=OperatorSettings("kafka:9092", namespaces=namespaces),
        kube=cast(Any, FakeKube(calls, failure)),
    )
    return built, calls


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "distributary.claims"]


def test_the_end_is_read_before_the_watched_namespaces_are_listed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    built, calls = services(("team-a", "team-b"), {GONE: ["gone", "gone.r1"]})
    assert asyncio.run(sweep_claims(built))
    assert calls == [
        "end read",
        ("list", "Log", "team-a"),
        ("list", "Log", "team-b"),
        ("release", 7, {"team-a/orders", "team-b/orders"}, ("team-a", "team-b")),
    ]
    assert said(caplog) == [
        (logging.INFO, "Log team-a/gone is gone: released its claims on gone, gone.r1")
    ]


def test_an_operator_of_every_namespace_sweeps_every_namespace_and_says_nothing_when_none_is_stale(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    built, calls = services((), {})
    assert asyncio.run(sweep_claims(built))
    assert calls[1:] == [("list", "Log", None), ("release", 7, {"team-a/orders"}, None)]
    assert said(caplog) == []


def test_a_listing_that_fails_releases_nothing_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    forbidden = KubeError("listing Log in team-a is forbidden", 403)
    built, calls = services(("team-a",), {GONE: ["gone"]}, forbidden)
    assert not asyncio.run(sweep_claims(built))
    assert calls == ["end read", ("list", "Log", "team-a")]
    assert said(caplog) == [
        (
            logging.WARNING,
            "claims sweep: none released, the Logs could not be listed: "
            "listing Log in team-a is forbidden",
        )
    ]
