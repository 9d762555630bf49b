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

from collections.abc import Iterable, Mapping

from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.plan.topics import (
    AddPartitions,
    AlterConfigs,
    CreateTopic,
    DesiredTopic,
    ReassignReplicas,
    TopicAction,
    TopicPlan,
    plan_topic,
)


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
