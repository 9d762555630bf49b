"""The rules of the names Distributary gives Kafka and Kubernetes, and how it fits names to them.

A resource's name may be 253 characters (a DNS-1123 subdomain); a Kafka topic may be 249, a label
value 63. Every name the project derives from a resource's name (a revision's topic, a dead-letter
topic, a consumer group, an application's name, a label value) is therefore either shortened here,
deterministically and with a digest of the whole so two long names never meet, or, where the user
chose the name and would not recognise it shortened (a Log's topic), refused with the limit and
the fix. The rules live in `api` so that the models, `graph` and the planners all apply the same.
The table of every derived name is in docs/names.md.
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass
from typing import Final

MAX_TOPIC_NAME: Final = 249
MAX_GROUP_ID: Final = 249  # no Kafka limit; kept to a topic's, so every Kafka tool can show it
MAX_LABEL_VALUE: Final = 63
MAX_DNS_LABEL: Final = 63
MAX_DNS_SUBDOMAIN: Final = 253
# Room kept for `.r<revision>` after a view's output topic: revisions up to 99,999,999.
REVISION_SUFFIX_ROOM: Final = len(".r") + 8
MAX_OUTPUT_TOPIC: Final = MAX_TOPIC_NAME - REVISION_SUFFIX_ROOM

# Topics the project writes itself: every revision's progress, who owns each topic (the claims,
# `plan.kafka_topics.claims`), and each view's or job's dead letters,
# `distributary.<namespace>.<name>.dlq`. An installation may name its progress and claims topics
# `distributary.<anything>.progress` and `distributary.<anything>.claims`: every such name is
# reserved too.
PROGRESS_TOPIC: Final = "distributary.progress"
CLAIMS_TOPIC: Final = "distributary.claims"
PROGRESS_SUFFIX: Final = ".progress"
CLAIMS_SUFFIX: Final = ".claims"
PROJECT_TOPIC_PREFIX: Final = "distributary."
DEAD_LETTER_SUFFIX: Final = ".dlq"
# Kafka's own topics (`__consumer_offsets`, `__transaction_state`, ...) all begin with this.
INTERNAL_TOPIC_PREFIX: Final = "__"

TOPIC_NAME_RE: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")
DNS_LABEL_RE: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN_RE: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
LABEL_VALUE_RE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?")
DIGEST_LENGTH: Final = 8


def name_digest(text: str) -> str:
    """Eight hex characters that tell apart names shortened to the same prefix."""
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_LENGTH]


def shortened(text: str, limit: int, *, keep: str = "", strip: str = ".-_") -> str:
    """`text + keep` when it fits in `limit` characters, else the head of `text`, `-`, a digest
    of `text + keep`, then `keep` (a suffix that must survive, such as `.dlq`)."""
    if len(text) + len(keep) <= limit:
        return text + keep
    digest = name_digest(text + keep)
    head = text[: limit - len(keep) - len(digest) - 1].rstrip(strip)
    return f"{head}-{digest}{keep}" if head else f"{digest}{keep}"


def is_topic_name(name: str) -> bool:
    """Whether Kafka accepts `name` as a topic: 1 to 249 of [a-zA-Z0-9._-], not `.` or `..`."""
    return TOPIC_NAME_RE.fullmatch(name) is not None and name not in (".", "..")


def is_label_value(value: str) -> bool:
    """Whether Kubernetes accepts `value` as a label value (63 characters at most)."""
    return LABEL_VALUE_RE.fullmatch(value) is not None


def is_dns_label(name: str) -> bool:
    """Whether `name` is a DNS-1123 label (a Service's or a pod's hostname part)."""
    return DNS_LABEL_RE.fullmatch(name) is not None


def is_dns_subdomain(name: str) -> bool:
    """Whether `name` is a DNS-1123 subdomain (most Kubernetes objects' names)."""
    return len(name) <= MAX_DNS_SUBDOMAIN and DNS_SUBDOMAIN_RE.fullmatch(name) is not None


def label_value(value: str) -> str:
    """`value` as a label value: itself when it is one, else its label characters cut to fit 63
    with a digest of the whole `value` (so two long values never share one)."""
    if is_label_value(value):
        return value
    cleaned = re.sub(r"[^-A-Za-z0-9_.]+", "-", value).strip("-_.")
    head = cleaned[: MAX_LABEL_VALUE - DIGEST_LENGTH - 1].rstrip("-_.")
    digest = name_digest(value)
    return f"{head}-{digest}" if head else digest


def reserved_topic(topic: str) -> str | None:
    """Why a Log may not have `topic`, or None: Kafka's internal topics and the project's own."""
    if topic.startswith(INTERNAL_TOPIC_PREFIX):
        return (
            "names a Kafka internal topic (names beginning with '__', such as "
            "__consumer_offsets, are Kafka's own)"
        )
    if topic == PROGRESS_TOPIC or _project_topic(topic, PROGRESS_SUFFIX):
        return "names a Distributary progress topic (distributary[.<installation>].progress)"
    if topic == CLAIMS_TOPIC or _project_topic(topic, CLAIMS_SUFFIX):
        return "names a Distributary claims topic (distributary[.<installation>].claims)"
    if topic.startswith(PROJECT_TOPIC_PREFIX) and topic.endswith(DEAD_LETTER_SUFFIX):
        return "names a Distributary dead-letter topic (distributary.<namespace>.<name>.dlq)"
    return None


def _project_topic(topic: str, suffix: str) -> bool:
    return topic.startswith(PROJECT_TOPIC_PREFIX) and topic.endswith(suffix)


def internal_topic_problem(topic: str, suffix: str) -> str | None:
    """What is wrong with `topic` as an installation's internal topic (its progress topic,
    `suffix` `.progress`, or its claims topic, `.claims`), or None. It must be a topic name of
    the form `distributary.<something>` ending in `suffix`, so no Log can ever name it."""
    if not is_topic_name(topic):
        return f"{topic!r} is not a Kafka topic name (1 to 249 of letters, digits, '.', '_', '-')"
    if not _project_topic(topic, suffix):
        return (
            f"{topic!r} must begin with {PROJECT_TOPIC_PREFIX!r} and end with {suffix!r} (e.g. "
            f"distributary.blue{suffix}), names no Log may take"
        )
    return None


def topic_problem(topic: str, limit: int = MAX_TOPIC_NAME) -> str | None:
    """What is wrong with `topic` as a Log's topic (at most `limit` characters), or None."""
    if len(topic) > limit:
        return f"is {len(topic)} characters long, more than the {limit} allowed"
    if not is_topic_name(topic):
        return "is not a Kafka topic name (1 to 249 of letters, digits, '.', '_' and '-')"
    return reserved_topic(topic)


DEFAULT_TOPIC_NAMES: Final = "{name}"
TOPIC_NAME_FIELDS: Final = ("namespace", "name")


@dataclass(frozen=True)
class TopicNames:
    """How a Log without `spec.topicName` names its topic, from its namespace and name: the
    operator's `--topic-names` (e.g. `{namespace}.{name}` on a Kafka cluster shared by teams).
    A result longer than Kafka allows is shortened with a digest of the whole."""

    template: str = DEFAULT_TOPIC_NAMES

    def topic(self, namespace: str, name: str) -> str:
        """The topic of Log `namespace/name`."""
        if self.template == DEFAULT_TOPIC_NAMES:
            return name
        return shortened(self.template.format(namespace=namespace, name=name), MAX_TOPIC_NAME)


def topic_names_problem(template: str) -> str | None:
    """What is wrong with `template` as the operator's topic naming, or None: it must name the
    Log (`{name}`), use no other field than `{namespace}` and `{name}`, and add only characters
    Kafka allows in a topic name."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"{template!r} is not a template: {exc}"
    fields = [field for _, field, _, _ in parts if field is not None]
    if "name" not in fields:
        return f"{template!r} must contain {{name}} (e.g. '{{namespace}}.{{name}}')"
    for literal, field, spec, conversion in parts:
        if field is not None and (field not in TOPIC_NAME_FIELDS or spec or conversion):
            return f"{template!r}: {{{field}}} is not one of {{namespace}} or {{name}}"
        if literal and TOPIC_NAME_RE.fullmatch(literal) is None:
            return (
                f"{template!r}: {literal!r} is not allowed in a topic name (letters, digits, '.', "
                "'_' and '-')"
            )
    sample = template.format(namespace="team", name="orders")
    reserved = reserved_topic(sample)
    return f"{template!r} {reserved}" if reserved else None


_naming = [TopicNames()]  # chosen once, at the start of a process (`use_topic_names`)


def use_topic_names(template: str) -> TopicNames:
    """Name every Log without `spec.topicName` by `template` from now on, in this process (the
    operator, or `distributary plan` and `validate`, at their start: like the topic backend, one
    choice per process, so every planner agrees on every topic). Raises ValueError."""
    problem = topic_names_problem(template)
    if problem is not None:
        raise ValueError(problem)
    _naming[0] = TopicNames(template)
    return _naming[0]


def topic_names() -> TopicNames:
    """The topic naming in force (`use_topic_names`)."""
    return _naming[0]


_progress = [PROGRESS_TOPIC]  # this installation's progress topic (`use_progress_topic`)


def use_progress_topic(topic: str) -> None:
    """Have every revision planned from now on, in this process, publish its progress to
    `topic` (the operator's `--progress-topic`, chosen at its start). Raises ValueError."""
    problem = internal_topic_problem(topic, PROGRESS_SUFFIX)
    if problem is not None:
        raise ValueError(problem)
    _progress[0] = topic


def progress_topic_in_force() -> str:
    """The progress topic revisions publish to (`use_progress_topic`)."""
    return _progress[0]


def shown(name: str) -> str:
    """A name as a message shows it: cut after 40 characters, with its length."""
    return repr(name) if len(name) <= 40 else f"{name[:40]!r}... ({len(name)} characters)"
