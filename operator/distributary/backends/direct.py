"""The direct topic backend: a Log's topic made and kept in shape through Kafka's Admin API.

It adds no judgement of its own. It observes the topic, lets the pure planner (`plan_topic`)
decide, and carries out exactly the planned actions, so what the operator does to a topic is
what `distributary plan` shows. The Admin API cannot reassign partitions, so a replica change is
always refused, never attempted.

Refusals are part of the result, not exceptions: a spec asking for fewer partitions still gets
its retention change applied, and the caller turns the refusal into a condition or a message.
What Kafka itself refuses (or never answers) is a `KafkaAdminError`, raised as it happens.
Nothing here prints; callers decide how to show plans.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.plan.kafka_topics.topics import (
    AddPartitions,
    AlterConfigs,
    CreateTopic,
    DesiredTopic,
    ReassignReplicas,
    TopicAction,
    TopicPlan,
    plan_topic,
)
from distributary.plan.revisions.positions import Watermarks


@dataclass(frozen=True)
class TopicOutcome:
    """A topic brought to its spec: the plan carried out, its partitions and its watermarks."""

    plan: TopicPlan
    partitions: int
    watermarks: Watermarks


class DirectTopics:
    """Applies topic plans with a `KafkaAdmin`."""

    def __init__(self, admin: KafkaAdmin) -> None:
        self.admin = admin

    def apply(self, desired: DesiredTopic, managed: frozenset[str] = frozenset()) -> TopicPlan:
        """Bring the topic to `desired` and return the plan: the actions now done and the changes
        refused. `managed` are the config keys set by the operator before, the only ones it may
        unset. Raises `KafkaAdminError` when Kafka refuses an action. Two controllers may make
        one topic (a view and its output Log): when the other created it between this look and
        this create, look again and plan from there."""
        try:
            return self._apply(desired, managed)
        except KafkaAdminError as exc:
            if exc.code != "TOPIC_ALREADY_EXISTS":
                raise
            return self._apply(desired, managed)

    def _apply(self, desired: DesiredTopic, managed: frozenset[str]) -> TopicPlan:
        observed = self.admin.describe_topic(desired.name)
        plan = plan_topic(desired, observed, managed_configs=managed, can_reassign=False)
        for action in plan.actions:
            self._perform(desired.name, action)
        return plan

    def ensure(
        self,
        desired: Iterable[DesiredTopic],
        managed: Mapping[str, frozenset[str]] | None = None,
    ) -> dict[str, TopicPlan]:
        """Create or update every topic of `desired`, in order, and return each one's plan by
        topic name; `managed` gives the config keys managed before, per topic."""
        managed = managed or {}
        return {
            topic.name: self.apply(topic, managed.get(topic.name, frozenset())) for topic in desired
        }

    def reconcile(
        self, desired: DesiredTopic, managed: frozenset[str] = frozenset()
    ) -> TopicOutcome:
        """`apply`, then the topic's partitions and watermarks as the brokers now show them."""
        plan = self.apply(desired, managed)
        observed = self.admin.describe_topic(desired.name)
        marks = self.admin.watermarks([desired.name])
        return TopicOutcome(plan, observed.partitions if observed else desired.partitions, marks)

    def reconcile_many(
        self, requests: Sequence[tuple[DesiredTopic, frozenset[str]]]
    ) -> dict[str, TopicOutcome | KafkaAdminError]:
        """`reconcile` of many topics (distinct names), each one's outcome or error by name.

        The common case takes five requests whatever the number of topics: the topics and their
        configs are described, the missing ones created, and their watermarks read, each for all
        at once. A topic that needs more (partitions added, configs changed) or that Kafka
        refused in the batch goes the one-topic way, which retries what is worth retrying and
        says what went wrong. Raises `KafkaAdminError` only when Kafka does not answer at all."""
        wanted = {desired.name: (desired, managed) for desired, managed in requests}
        observed = self.admin.describe_topics(wanted)
        plans = {
            name: plan_topic(desired, observed[name], managed_configs=managed, can_reassign=False)
            for name, (desired, managed) in wanted.items()
            if name in observed
        }
        creates = [a for plan in plans.values() for a in plan.actions if isinstance(a, CreateTopic)]
        refused = {name for name, error in self.admin.create_topics(creates).items() if error}
        one_by_one = (set(wanted) - set(plans)) | refused
        one_by_one |= {
            name
            for name, plan in plans.items()
            if any(not isinstance(action, CreateTopic) for action in plan.actions)
        }
        counts = {}
        for name in plans.keys() - one_by_one:
            seen = observed[name]
            counts[name] = seen.partitions if seen else wanted[name][0].partitions
        # A topic made just now is empty: its watermarks are known without asking.
        made = {name: counts[name] for name in counts if observed[name] is None}
        marks = self.admin.watermarks_each({n: c for n, c in counts.items() if n not in made})
        marks |= {name: {name: dict.fromkeys(range(n), (0, 0))} for name, n in made.items()}
        outcomes: dict[str, TopicOutcome | KafkaAdminError] = {}
        for name, count in counts.items():
            try:  # a new partition's leader may still be elected: asked alone, it is awaited
                found = marks[name] if name in marks else self.admin.watermarks([name])
            except KafkaAdminError as exc:
                outcomes[name] = exc
                continue
            outcomes[name] = TopicOutcome(plans[name], count, found)
        for name in sorted(one_by_one):
            try:
                outcomes[name] = self.reconcile(*wanted[name])
            except KafkaAdminError as exc:
                outcomes[name] = exc
        return outcomes

    def _perform(self, topic: str, action: TopicAction) -> None:
        match action:
            case CreateTopic():
                self.admin.create_topic(action)
            case AddPartitions(total=total):
                self.admin.add_partitions(topic, total)
            case AlterConfigs():
                self.admin.alter_configs(topic, action)
            case ReassignReplicas(replicas=replicas):
                raise KafkaAdminError(
                    f"topic {topic!r} needs {replicas} replicas per partition, but the direct "
                    "topic backend cannot reassign partitions: use a backend that can"
                )
