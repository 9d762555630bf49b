"""The claims topic on a real broker: installations that share it agree on every topic's owner.

Two `ClaimsLog`s stand for two operator installations on one Kafka cluster (each its own
producer and consumer, as two processes would have). They race for the same topics from many
threads at once; each topic ends with exactly one owner that both see, and every loser's claim is
released. A third reader, started afterwards (a restarted operator), sees the same owners.
"""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections import Counter
from collections.abc import Collection

from distributary.backends.direct import DirectTopics
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.claims import ClaimsLog
from distributary.kafka.records import TopicReader
from distributary.local.broker import EmbeddedBroker
from distributary.plan.kafka_topics.claims import (
    Claimant,
    ClaimRecord,
    Deletion,
    claimant_of,
    parse_record,
)
from distributary.plan.kafka_topics.topics import DesiredTopic


def none_present(topics: Collection[str]) -> Collection[str]:
    """As Kafka would answer when none of the claimed topics has been made yet."""
    return ()


def all_present(topics: Collection[str]) -> Collection[str]:
    """As Kafka would answer when every claimed topic is there already."""
    return topics


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
        verdict = log.claim(name, who, none_present)
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
        verdict = restarted.claim(name, loser, all_present)
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
    assert blue.claim("payments", owner, none_present).mine
    assert not green.claim("payments", waiting, all_present).mine
    assert blue.deletion("payments", owner) == (Deletion.DELETE, owner)
    assert blue.release(owner) == ["payments"]
    verdict = green.claim("payments", waiting, all_present)
    assert verdict.mine
    assert not verdict.owner.created  # the topic was there: adopted, kept on deletion
    assert green.deletion("payments", waiting) == (Deletion.KEEP_ADOPTED, waiting)
    blue.close()
    green.close()


def test_claims_made_at_once_are_decided_together_each_exactly_once(
    broker: EmbeddedBroker,
) -> None:
    """Three hundred Logs' claims from many threads, a rival's among them for every tenth topic:
    each topic has one owner, each claimant appended at most one claim per topic (a claim asked
    twice at once appends once), and the whole takes seconds, not half a second a claim."""
    topic = claims_topic(broker)
    claims = ClaimsLog(broker.bootstrap_servers, topic)
    topics = [f"events-{n}" for n in range(300)]
    mine = {name: Claimant("team-a", name) for name in topics}
    rival = Claimant("team-b", "events")
    asks = [(name, mine[name]) for name in topics]
    asks += [(name, mine[name]) for name in topics[:50]]  # asked twice at the same time
    asks += [(name, rival) for name in topics[::10]]
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        verdicts = list(
            pool.map(lambda ask: (ask, claims.claim(ask[0], ask[1], none_present)), asks)
        )
    took = time.monotonic() - started

    for name in topics:
        owners = {v.owner.claimant.identity for (t, _), v in verdicts if t == name}
        assert len(owners) == 1, f"{name}: {owners}"
        winners = {who.identity for (t, who), v in verdicts if t == name and v.mine}
        assert winners == owners, f"{name}: won by {winners}, owned by {owners}"
    appended = Counter(
        (record.topic, record.claimant.identity)
        for record in read_claims(broker, topic)
        if not record.released
    )
    assert set(appended.values()) == {1}, [key for key, n in appended.items() if n > 1]
    owned = {(t, v.owner.claimant.identity) for (t, _), v in verdicts}
    assert owned <= set(appended), "an owner without its claim in the log"
    assert took < 30, f"{len(asks)} claims took {took:.1f}s"
    claims.close()


def read_claims(broker: EmbeddedBroker, topic: str) -> list[ClaimRecord]:
    """Every record of the claims topic, as a fresh reader finds them."""
    with TopicReader(broker.bootstrap_servers) as reader:
        records, _ = reader.last(topic, 100_000)
    parsed = (parse_record(r.key, r.value, r.offset) for r in records)
    return [record for record in parsed if record is not None]
