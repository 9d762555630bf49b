"""Chaos: `examples/clickstream` under the operator, killed and edited while records arrive.

Page views arrive continuously while, at seeded random moments, runner processes are killed
with SIGKILL (their JVMs with them), the operator is killed with SIGKILL and started again, the
enriched view's SQL is edited (it reprocesses and cuts over, and the per-country view reading it
reprocesses in turn) and the enriched view is rewound a few seconds (`chaos.py`). Then the records
stop, every view settles, and (`chaos_checks.py`):

- every output is exactly what the input implies: the enriched stream as a multiset (a rewind
  writes the records it re-reads again, by design, and nothing else twice), its dead letters,
  the per-user table and the per-country table over the enriched stream, row by row;
- every edit took effect: each view's serving revision runs its last spec (an edit cut over, or
  one back to the serving definition retired the catch-up), and the others are Retired;
- nothing is orphaned: no runner process but the serving revisions', no consumer group of a
  retired revision, no topic but the input's, the serving revisions' and the dead-letter topics.

Real API server, real broker, real Spark (`local` runtime: one runner process per revision), on
two cores: a few minutes. The seed is `DISTRIBUTARY_TEST_SEED` (1313 unless given) and every
failure names it; `bench/chaos` runs the same chaos for longer.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from tests.integration.kube.chaos import OPERATOR_FLAGS as CHAOS_FLAGS
from tests.integration.kube.chaos import Chaos, ChaosPlan, replay
from tests.integration.kube.chaos_checks import Check, final_checks
from tests.integration.kube.operator_harness import Cluster, Operator

from distributary.local.broker import EmbeddedBroker

NAMESPACE = "chaos"
SEED = int(os.environ.get("DISTRIBUTARY_TEST_SEED", "1313"))
CHECKS = (
    "input",
    "enriched-page-views",
    "views-per-user",
    "views-per-country",
    "cutover",
    "applications",
    "groups",
    "topics",
)
OPERATOR_FLAGS = CHAOS_FLAGS  # the operator fixture's: short restart back-offs


@dataclass
class Outcome:
    chaos: Chaos
    checks: dict[str, Check]


@pytest.fixture(scope="module")
def outcome(cluster: Cluster, operator: Operator, broker: EmbeddedBroker) -> Iterator[Outcome]:
    plan = ChaosPlan(SEED, runner_kills=4, operator_kills=2, edits=1, rewinds=1, gap=(3.0, 8.0))
    chaos = Chaos(plan, cluster, operator, broker.bootstrap_servers, say=print)
    try:
        # Generous: a few minutes on two cores, but Spark starts slowly on a busy machine.
        chaos.setup(timeout=420)
        chaos.run()
        chaos.settle(timeout=600)
        checks = final_checks(chaos)
        for check in checks:
            print(
                f"[chaos seed={SEED}] {'ok' if check.ok else 'FAILED'} {check.name}: {check.detail}"
            )
        yield Outcome(chaos, {c.name: c for c in checks})
    finally:
        chaos.close()


def test_the_chaos_happened(outcome: Outcome) -> None:
    done = Counter(a["action"] for a in outcome.chaos.actions)
    wanted = {"kill_runner": 3, "kill_operator": 2, "edit_sql": 1, "rewind done": 1}
    short = {a: (done[a], n) for a, n in wanted.items() if done[a] < n}
    assert not short, (
        f"seed {SEED}: too little chaos (done, wanted): {short}\n{replay(outcome.chaos)}"
    )


@pytest.mark.parametrize("name", CHECKS)
def test_the_settled_pipeline_holds(outcome: Outcome, name: str) -> None:
    check = outcome.checks.get(name)
    assert check is not None, f"seed {SEED}: check {name} was not made (an earlier one failed)"
    assert check.ok, f"seed {SEED}: {name}: {check.detail}\n{replay(outcome.chaos)}"
