"""The claims topic on a real broker: installations that share it agree on every topic's owner.

Two `ClaimsLog`s stand for two operator installations on one Kafka cluster (each its own
producer and consumer, as two processes would have). They race for the same topics from many
threads at once; each topic ends with exactly one owner that both see, and every loser's claim is
released. A third reader, started afterwards (a restarted operator), sees the same owners.
"""

from __future__ import annotations

import concurrent.futures
import uuid

from distributary.backends.direct import DirectTopics
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.claims import ClaimsLog
from distributary.local.broker import EmbeddedBroker
from distributary.plan.claims import Claimant, Deletion, claimant_of
from distributary.plan.topics import DesiredTopic


def claims_topic(broker: EmbeddedBroker) -> str:
    name = f"distributary.race-{uuid.uuid4().hex[:8]}.claims"
    DirectTopics(KafkaAdmin(broker.bootstrap_servers)).apply(
        DesiredTopic(name, 1, None, {"cleanup.policy": "compact"})
    )
    return name


def test_two_installations_racing_agree_on_one_owner_per_topic(broker: EmbeddedBroker) -> None:
    topic = claims_topic(broker)
    blue = ClaimsLog(broker.bootstrap_servers, topic)
    green = ClaimsLog(broker.bootstrap_servers, topic)
    topics = [f"orders-{n}" for n in range(20)]
    team_a, team_b = Claimant("team-a", "orders"), Claimant("team-b", "orders")

    def race(log: ClaimsLog, who: Claimant, name: str) -> tuple[str, str, bool]:
        verdict = log.claim(name, who, lambda: False)
        return name, verdict.owner.claimant.identity, verdict.mine

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(race, blue, team_a, t) for t in topics]
        futures += [pool.submit(race, green, team_b, t) for t in topics]
        results = [f.result() for f in futures]

    for name in topics:
        seen = [(owner, mine) for topic, owner, mine in results if topic == name]
        assert len({owner for owner, _ in seen}) == 1, f"{name}: {seen}"
        assert sorted(mine for _, mine in seen) == [False, True], f"{name}: {seen}"

    restarted = ClaimsLog(broker.bootstrap_servers, topic)
    for name in topics:
        owner = next(o for t, o, mine in results if t == name and mine)
        loser = team_b if owner == team_a.identity else team_a
        verdict = restarted.claim(name, loser, lambda: True)
        assert verdict.owner.claimant.identity == owner
        assert not verdict.mine
        assert restarted.deletion(name, loser) == (Deletion.KEEP_NOT_OWNED, verdict.owner.claimant)
    for log in (blue, green, restarted):
        log.close()


def test_a_release_hands_the_topic_to_the_next_claimant(broker: EmbeddedBroker) -> None:
    topic = claims_topic(broker)
    blue = ClaimsLog(broker.bootstrap_servers, topic)
    green = ClaimsLog(broker.bootstrap_servers, topic)
    owner, waiting = claimant_of("team-a", "payments"), claimant_of("team-b", "payments")
    assert blue.claim("payments", owner, lambda: False).mine
    assert not green.claim("payments", waiting, lambda: True).mine
    assert blue.deletion("payments", owner) == (Deletion.DELETE, owner)
    assert blue.release(owner) == ["payments"]
    verdict = green.claim("payments", waiting, lambda: True)
    assert verdict.mine
    assert not verdict.owner.created  # the topic was there: adopted, kept on deletion
    assert green.deletion("payments", waiting) == (Deletion.KEEP_ADOPTED, waiting)
    blue.close()
    green.close()
