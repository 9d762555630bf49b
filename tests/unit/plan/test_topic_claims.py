"""Who owns a topic: the first unreleased claim in log order, and what a deletion may delete."""

from __future__ import annotations

import json

from distributary.api.names import internal_topic_problem, reserved_topic
from distributary.plan.kafka_topics.claims import (
    Claimant,
    ClaimRecord,
    Claims,
    Deletion,
    claim_created,
    claimant_of,
    deletion,
    kept_message,
    owns,
    parse_record,
    record_key,
    record_value,
    stale_claims,
    taken_message,
)

A = Claimant("team-a", "orders")
B = Claimant("team-b", "orders")
C = Claimant("team-c", "orders")


def claim(
    who: Claimant, offset: int, *, released: bool = False, created: bool = True
) -> ClaimRecord:
    return ClaimRecord("orders", who, released, created, offset)


def test_the_first_unreleased_claim_in_log_order_owns_the_topic() -> None:
    claims = Claims([claim(A, 0), claim(B, 1)])
    assert owns(claims, "orders", A)
    assert not owns(claims, "orders", B)
    assert claims.owner("orders") == claim(A, 0)


def test_a_release_hands_the_topic_to_the_next_standing_claim() -> None:
    claims = Claims([claim(A, 0), claim(B, 1), claim(A, 2, released=True)])
    assert owns(claims, "orders", B)


def test_a_released_claim_made_again_goes_behind_the_others() -> None:
    # compaction keeps the pair's latest record: its place is that record's offset
    claims = Claims([claim(A, 0), claim(B, 1), claim(A, 2, released=True), claim(A, 3)])
    assert owns(claims, "orders", B)
    claims.add(claim(B, 4, released=True))
    assert owns(claims, "orders", A)


def test_a_topic_nobody_claims_has_no_owner() -> None:
    claims = Claims([claim(A, 0), claim(A, 1, released=True)])
    assert claims.owner("orders") is None
    assert claims.owner("other") is None


def test_kinds_asking_for_one_log_are_one_claimant() -> None:
    view = claimant_of("team-a", "orders", {"kind": "DerivedView", "name": "enrich"})
    claims = Claims([ClaimRecord("orders.r1", view, False, True, 0)])
    assert owns(claims, "orders.r1", Claimant("team-a", "orders"))
    assert claims.held_by(A) == ["orders.r1"]
    assert view.shown() == "DerivedView team-a/enrich (for its Log team-a/orders)"
    assert claimant_of("team-a", "orders", {"kind": "Log", "name": "x"}).shown() == (
        "Log team-a/orders"
    )


def test_a_claim_says_whether_the_claimant_made_the_topic_or_adopted_it() -> None:
    empty = Claims()
    assert claim_created(empty, "orders", A, exists=False)
    assert not claim_created(empty, "orders", A, exists=True)
    assert claim_created(empty, "orders", A, exists=True, held_before=True)
    # a Log deleted with Retain and made again: its topic is still the one it made
    again = Claims([claim(A, 0, created=True), claim(A, 1, released=True, created=True)])
    assert claim_created(again, "orders", A, exists=True)
    adopted = Claims([claim(A, 0, created=False), claim(A, 1, released=True, created=False)])
    assert not claim_created(adopted, "orders", A, exists=True)
    # another's released claim says nothing of this claimant's
    assert not claim_created(again, "orders", B, exists=True)


def test_delete_deletes_only_a_topic_the_log_owns_and_made() -> None:
    made = Claims([claim(A, 0, created=True), claim(B, 1)])
    assert deletion(made, "orders", A) == (Deletion.DELETE, A)
    assert deletion(made, "orders", B) == (Deletion.KEEP_NOT_OWNED, A)
    adopted = Claims([claim(A, 0, created=False)])
    assert deletion(adopted, "orders", A) == (Deletion.KEEP_ADOPTED, A)
    assert deletion(Claims(), "orders", A) == (Deletion.KEEP_NOT_OWNED, None)


def test_messages_name_the_owner_the_field_and_the_fix() -> None:
    message = taken_message("orders", A, B, "spec.topicName")
    assert message.startswith("spec.topicName: topic orders belongs to Log team-a/orders;")
    assert "Log team-b/orders makes and changes nothing" in message
    assert "--topic-names '{namespace}.{name}'" in message
    kept = kept_message("orders", Deletion.KEEP_NOT_OWNED, A, B)
    assert kept == "topic orders kept: it belongs to Log team-a/orders, not to Log team-b/orders"
    assert "adopted, not created by Distributary" in kept_message(
        "orders", Deletion.KEEP_ADOPTED, A, A
    )


def test_records_read_back_as_written_and_foreign_ones_are_skipped() -> None:
    value = record_value(B, released=False, created=True)
    raw = json.dumps(value).encode()
    assert parse_record(record_key("orders", B).encode(), raw, 7) == ClaimRecord(
        "orders", Claimant("team-b", "orders", "Log", "orders"), False, True, 7
    )
    assert parse_record(b"orders team-b/orders", None, 8) is None
    assert parse_record(b"orders", b"not json", 9) is None
    assert parse_record(b"orders", b"{}", 9) is None


HERE = "3f6b-kube-system-uid"  # this Kubernetes cluster


def held(
    topic: str, who: Claimant, offset: int, *, released: bool = False, cluster: str | None = HERE
) -> ClaimRecord:
    return ClaimRecord(topic, who, released, True, offset, cluster)


def test_a_sweep_releases_the_standing_claims_of_a_deleted_log() -> None:
    view = claimant_of("team-a", "orders", {"kind": "DerivedView", "name": "enrich"})
    claims = Claims([held("orders", A, 0), held("orders.r1", view, 1), held("payments", B, 2)])
    stale = stale_claims(claims, 3, {"team-b/orders"}, None, HERE)
    assert stale == {Claimant("team-a", "orders"): ["orders", "orders.r1"]}


def test_a_sweep_keeps_the_claims_of_a_listed_log() -> None:
    claims = Claims([held("orders", A, 0), held("payments", A, 1)])
    assert stale_claims(claims, 2, {"team-a/orders"}, None, HERE) == {}
    assert stale_claims(claims, 2, {"team-a/orders"}, ["team-a"], HERE) == {}


def test_a_sweep_keeps_a_claim_newer_than_the_end_read_before_the_listing() -> None:
    # appended after the sweep began: its Log may have been made after the listing
    claims = Claims([held("orders", A, 0), held("payments", B, 5)])
    assert stale_claims(claims, 5, set(), None, HERE) == {A: ["orders"]}
    assert stale_claims(claims, 6, set(), None, HERE) == {A: ["orders"], B: ["payments"]}


def test_a_sweep_keeps_the_claims_of_namespaces_it_does_not_watch() -> None:
    claims = Claims([held("orders", A, 0), held("payments", B, 1)])
    assert stale_claims(claims, 2, set(), ["team-b"], HERE) == {B: ["payments"]}
    assert stale_claims(claims, 2, set(), [], HERE) == {}


def test_a_sweep_ignores_released_claims() -> None:
    claims = Claims([held("orders", A, 0), held("orders", A, 1, released=True)])
    assert stale_claims(claims, 2, set(), None, HERE) == {}
    # claimed again after a release: the standing record is the latest one
    claims.add(held("orders", A, 2))
    assert stale_claims(claims, 2, set(), None, HERE) == {}
    assert stale_claims(claims, 3, set(), None, HERE) == {A: ["orders"]}


def test_a_sweep_keeps_the_claims_of_another_kubernetes_cluster_and_of_no_known_cluster() -> None:
    # Installations in other clusters share the claims topic; their Logs are in no listing here.
    claims = Claims(
        [
            held("orders", A, 0, cluster="another-cluster"),
            held("payments", B, 1, cluster=None),
            held("refunds", B, 2),
        ]
    )
    assert stale_claims(claims, 3, set(), None, HERE) == {B: ["refunds"]}
    assert stale_claims(claims, 3, set(), None, None) == {}


def test_a_record_names_the_cluster_that_wrote_it() -> None:
    value = record_value(B, released=False, created=True, cluster=HERE)
    parsed = parse_record(record_key("orders", B).encode(), json.dumps(value).encode(), 3)
    assert parsed is not None
    assert parsed.cluster == HERE
    assert "cluster" not in record_value(B, released=False, created=True)


def test_internal_topics_of_any_installation_are_reserved() -> None:
    assert reserved_topic("distributary.claims") is not None
    assert reserved_topic("distributary.blue.progress") is not None
    assert reserved_topic("distributary.blue.claims") is not None
    assert reserved_topic("orders.claims") is None
    assert internal_topic_problem("distributary.blue.progress", ".progress") is None
    assert internal_topic_problem("distributary.claims", ".claims") is None
    problem = internal_topic_problem("blue-progress", ".progress")
    assert problem is not None
    assert "must begin with 'distributary.'" in problem
