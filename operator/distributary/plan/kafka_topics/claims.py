"""Who owns a topic: the rule every Distributary installation on one Kafka cluster applies alike.

A topic belongs to one Log across the cluster, whatever namespace or installation it comes from.
Ownership is decided by a log, not by a lock: each claim is a record appended to one compacted,
single-partition claims topic per Kafka cluster (`kafka.claims`), and the first unreleased claim
of a topic in log order owns it. Two claimants racing each append, read the log past their own
record and see the same order, so they agree on one owner without talking to each other; an
operator that restarts reads the log again and finds what it held.

A record is keyed by the topic and the claiming Log (`namespace/name`), so compaction keeps one
record per pair: its latest claim or release. A claim is never appended again while it stands
(that would move it behind later claims), a claimant that lost appends a release at once (so no
stale claim waits to take over a topic), and a Log's deletion releases all of its claims.

A claim also says whether the claimant found the topic missing and made it (`created`) or found
it already in Kafka and adopted it (how a user attaches a Log to an existing topic). Deleting
a Log with `deletionPolicy: Delete` deletes only a topic it owns and created (`deletion`).

The claimant is always a Log: a view's revision and dead-letter topics are claimed for its output
Log, a job's dead-letter topic for the Log its dead letters go with, so the Log that deletes them
is the one that owns them. What asked (`kind`, `name`) is kept to name the owner to the loser.

A Log deleted while no operator watched it (or whose release failed) leaves its claims standing;
the operator sweeps them (`stale_claims`): a standing claim older than a listing of the Logs,
whose Log is not in it, is a deleted Log's.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

SWEEP_SECONDS = 300.0  # between sweeps of deleted Logs' claims: how long such a claim may stand


@dataclass(frozen=True)
class Claimant:
    """The Log a topic is claimed for (`namespace`, `log`), and what asked for the topic:
    the Log itself, a DerivedView (its revision and dead-letter topics) or a StreamJob."""

    namespace: str
    log: str
    kind: str = "Log"
    name: str = ""

    @property
    def identity(self) -> str:
        """`namespace/log`: one claimant however many kinds ask on its behalf."""
        return f"{self.namespace}/{self.log}"

    def shown(self) -> str:
        """The claimant as messages name it: kind, namespace/name."""
        name = self.name or self.log
        if self.kind == "Log":
            return f"Log {self.namespace}/{self.log}"
        return f"{self.kind} {self.namespace}/{name} (for its Log {self.namespace}/{self.log})"


@dataclass(frozen=True)
class ClaimRecord:
    """One record of the claims topic as read back: a standing claim or a release, at `offset`
    (its place in log order)."""

    topic: str
    claimant: Claimant
    released: bool
    created: bool
    offset: int
    cluster: str | None = None  # the Kubernetes cluster of the installation that wrote it


def record_key(topic: str, claimant: Claimant) -> str:
    """The key of `claimant`'s record for `topic`: a space cannot be in either half."""
    return f"{topic} {claimant.identity}"


def record_value(
    claimant: Claimant, *, released: bool, created: bool, cluster: str | None = None
) -> dict[str, Any]:
    """The value of a claim or release record (JSON); `cluster` names the Kubernetes cluster
    whose installation wrote it (the uid of its kube-system namespace), when known."""
    value: dict[str, Any] = {
        "namespace": claimant.namespace,
        "log": claimant.log,
        "kind": claimant.kind,
        "name": claimant.name or claimant.log,
        "released": released,
        "created": created,
    }
    if cluster is not None:
        value["cluster"] = cluster
    return value


def parse_record(key: bytes | None, value: bytes | None, offset: int) -> ClaimRecord | None:
    """A record read back, or None for one that is not a claim (a tombstone, foreign bytes)."""
    if key is None or value is None:
        return None
    try:
        topic = key.decode().split(" ", 1)[0]
        data = json.loads(value)
        claimant = Claimant(
            str(data["namespace"]), str(data["log"]), str(data["kind"]), str(data["name"])
        )
        released, created = bool(data["released"]), bool(data["created"])
        cluster = None if data.get("cluster") is None else str(data["cluster"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError):
        return None
    return ClaimRecord(topic, claimant, released, created, offset, cluster)


class Claims:
    """What the claims topic says so far: the latest record of each (topic, claimant)."""

    def __init__(self, records: Iterable[ClaimRecord] = ()) -> None:
        self._latest: dict[str, dict[str, ClaimRecord]] = {}
        for record in records:
            self.add(record)

    def add(self, record: ClaimRecord) -> None:
        """Take in the next record in log order (it replaces the pair's earlier one)."""
        self._latest.setdefault(record.topic, {})[record.claimant.identity] = record

    def owner(self, topic: str) -> ClaimRecord | None:
        """The claim that owns `topic`: the first unreleased one in log order; None: no one's."""
        standing = [r for r in self._latest.get(topic, {}).values() if not r.released]
        return min(standing, key=lambda r: r.offset) if standing else None

    def mine(self, topic: str, claimant: Claimant) -> ClaimRecord | None:
        """`claimant`'s latest record for `topic`, if any."""
        return self._latest.get(topic, {}).get(claimant.identity)

    def standing(self) -> list[ClaimRecord]:
        """Every standing (unreleased) claim, in log order."""
        found = [r for records in self._latest.values() for r in records.values() if not r.released]
        return sorted(found, key=lambda r: r.offset)

    def held_by(self, claimant: Claimant) -> list[str]:
        """The topics `claimant` has a standing claim on."""
        return sorted(
            topic
            for topic, records in self._latest.items()
            if (found := records.get(claimant.identity)) is not None and not found.released
        )


def owns(claims: Claims, topic: str, claimant: Claimant) -> bool:
    """Whether `claimant` owns `topic`."""
    owner = claims.owner(topic)
    return owner is not None and owner.claimant.identity == claimant.identity


def stale_claims(
    claims: Claims,
    end: int,
    existing: Collection[str],
    watched: Collection[str] | None,
    cluster: str | None,
) -> dict[Claimant, list[str]]:
    """The standing claims of deleted Logs: each such Log (`Claimant(namespace, log)`) and its
    topics. `end` is the claims topic's end offset read before the Logs were listed,
    `existing` the listed Logs' identities (`namespace/name`), `watched` the namespaces the
    listing covers (None: every namespace), `cluster` the Kubernetes cluster listed.

    Only claims written from `cluster` count: installations in other Kubernetes clusters share
    the claims topic when they share the Kafka cluster, and their Logs are in no listing here.
    A claim that names no cluster (written before claims named one, or by an installation that
    could not tell its cluster) is never swept; nor is any when `cluster` is unknown.

    A claim is appended while reconciling a Log that exists, so a claim below `end` was
    appended before the listing began: if its Log is not listed, the Log was deleted. A claim
    at or past `end` may belong to a Log made after the listing, and is left for the next
    sweep. A claim of a namespace the listing did not cover is another installation's
    business, and is never touched."""
    stale: dict[Claimant, list[str]] = {}
    if cluster is None:
        return {}
    for record in claims.standing():
        who = record.claimant
        if record.cluster != cluster:
            continue
        if record.offset >= end or (watched is not None and who.namespace not in watched):
            continue
        if who.identity not in existing:
            stale.setdefault(Claimant(who.namespace, who.log), []).append(record.topic)
    return {who: sorted(topics) for who, topics in sorted(stale.items(), key=_by_identity)}


def _by_identity(item: tuple[Claimant, list[str]]) -> str:
    return item[0].identity


def claim_created(
    claims: Claims, topic: str, claimant: Claimant, *, exists: bool, held_before: bool = False
) -> bool:
    """What a new claim says of its topic's making: made by the claimant (it is missing now, or
    the claimant's own released claim had made it, or the Log held it before claims were kept:
    `held_before`) or adopted (it was in Kafka before anyone claimed it)."""
    if not exists:
        return True
    earlier = claims.mine(topic, claimant)
    return held_before or (earlier is not None and earlier.created)


def taken_message(topic: str, owner: Claimant, claimant: Claimant, field: str) -> str:
    """Why `claimant` may not have `topic`, naming the owner and the fix."""
    return (
        f"{field}: topic {topic} belongs to {owner.shown()}; {claimant.shown()} makes and changes "
        "nothing until that claim is released (the owner is deleted). Choose another topic "
        "(spec.topicName, or a different name), or run the operator with per-namespace topic "
        "names (--topic-names '{namespace}.{name}')"
    )


class Deletion(Enum):
    """What deleting a Log with `deletionPolicy: Delete` does to one of its topics."""

    DELETE = "delete"  # the Log owns the topic and made it
    KEEP_ADOPTED = "adopted"  # the Log owns it but found it in Kafka: not its data to delete
    KEEP_NOT_OWNED = "not-owned"  # another Log owns it, or no Log does


def deletion(claims: Claims, topic: str, claimant: Claimant) -> tuple[Deletion, Claimant | None]:
    """Whether `claimant`'s deletion deletes `topic`, and the topic's owner (None: no one's)."""
    owner = claims.owner(topic)
    if owner is None:
        return Deletion.KEEP_NOT_OWNED, None
    if owner.claimant.identity != claimant.identity:
        return Deletion.KEEP_NOT_OWNED, owner.claimant
    return (Deletion.DELETE if owner.created else Deletion.KEEP_ADOPTED), owner.claimant


def kept_message(topic: str, verdict: Deletion, owner: Claimant | None, claimant: Claimant) -> str:
    """What an event says of a topic a deletion kept."""
    if verdict is Deletion.KEEP_ADOPTED:
        return (
            f"topic {topic} kept: it was in Kafka before {claimant.shown()} claimed it (adopted, "
            "not created by Distributary), so deletionPolicy: Delete does not delete it; delete "
            "it with Kafka's tools if it is no longer wanted"
        )
    whose = owner.shown() if owner is not None else "no Log (no claim stands for it)"
    return f"topic {topic} kept: it belongs to {whose}, not to {claimant.shown()}"


def claimant_of(namespace: str, log: str, owner: Mapping[str, Any] | None = None) -> Claimant:
    """The claimant for a topic asked for on behalf of Log `namespace/log` by `owner` (an owner
    reference or `api.owner_of` mapping: kind and name; None: the Log itself)."""
    kind = str((owner or {}).get("kind") or "Log")
    name = str((owner or {}).get("name") or log)
    if kind == "Log":
        name = log
    return Claimant(namespace, log, kind, name)
