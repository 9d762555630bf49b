"""Sweeping the claims of deleted Logs on a real broker: only those older than the listing.

A sweep reads the claims topic's end, then the Logs are listed, then the claims below that end
whose Log is not listed are released. A Log made during the sweep (its claim appended after the
end was read), a Log made again under a deleted one's name (it owns that Log's claim without
appending one) and a Log of a namespace not watched all keep their claims; another installation
reading the claims topic sees what the sweep released.
"""

from __future__ import annotations

from tests.integration.test_topic_claims_log import all_present, claims_topic, none_present

from distributary.kafka.claims import ClaimsLog
from distributary.local.broker import EmbeddedBroker
from distributary.plan.kafka_topics.claims import Claimant

GONE = Claimant("team-a", "gone")
AGAIN = Claimant("team-a", "again")
LATE = Claimant("team-a", "late")
ELSEWHERE = Claimant("team-x", "theirs")
REMOTE = Claimant("team-a", "remote")  # team-a of another Kubernetes cluster


def test_a_sweep_releases_only_claims_older_than_the_listing(broker: EmbeddedBroker) -> None:
    topic = claims_topic(broker)
    claims = ClaimsLog(broker.bootstrap_servers, topic, cluster="here")
    other = ClaimsLog(broker.bootstrap_servers, topic, cluster="here")  # another process
    # An installation in another Kubernetes cluster sharing the Kafka cluster: its team-a is
    # not ours, and its Logs are in no listing here.
    remote = ClaimsLog(broker.bootstrap_servers, topic, cluster="there")
    for who in (GONE, AGAIN, ELSEWHERE):
        assert claims.claim(f"{who.log}-topic", who, none_present).mine
    assert remote.claim("remote-topic", REMOTE, none_present).mine

    start = claims.sweep_start()
    assert other.claim("late-topic", LATE, none_present).mine  # appended after the end read
    assert claims.claim("again-topic", AGAIN, none_present).mine  # made again: no new record
    released = claims.release_stale(start, existing=set(), watched=["team-a"])

    assert released == {GONE: ["gone-topic"]}
    newcomer = Claimant("team-b", "new")
    assert other.claim("gone-topic", newcomer, all_present).mine
    for who in (AGAIN, LATE, ELSEWHERE, REMOTE):
        verdict = other.claim(f"{who.log}-topic", newcomer, all_present)
        assert verdict.owner.claimant.identity == who.identity
    # Nothing of team-a is stale now; the next sweep releases nothing.
    listed = {AGAIN.identity, LATE.identity}
    assert claims.release_stale(claims.sweep_start(), listed, ["team-a"]) == {}
    for log in (claims, other, remote):
        log.close()
