"""Status conditions from an observation, in the conventions kstatus and Flux define.

kstatus (sigs.k8s.io/cli-utils/pkg/kstatus) reads two "abnormal-true" conditions: `Reconciling`
(the controller is working on the latest changes) and `Stalled` (it hit an error or made too
little progress). They are present only while True, so their absence means all is well; Flux's
health checks read them the same way, and Argo CD reads a custom kind through a Lua health check
over the same conditions, as it ships for Flux's kinds. `Ready` is kept beside them, always
present, because `kubectl wait --for=condition=Ready`, printer columns and dashboards read it.

Ready while reconciling is Unknown, as Flux's controllers set it ("Reconciliation in progress"):
the outcome is not known yet. Argo CD's health check for Flux's kinds reports Progressing only for
Ready=Unknown together with Reconciling=True, and Degraded for Ready=False, so Ready=False would
flash red on every edit. Ready while stalled is False: the resource needs its user. Stalled wins
over work under way, and Reconciling is then removed, because kstatus reports a resource with
Reconciling=True as in progress before it looks at Stalled. Ready of a view or job suspended on
purpose (`spec.suspend`) is False with reason Suspended, with neither Reconciling nor Stalled: the
controller has done what was asked (kstatus reads Current), and the reason tells it from a failure.

Every condition carries the generation it was computed from, and `lastTransitionTime` moves only
when a condition's status changes, as metav1.Condition defines it. The function is pure: the
caller passes the previous conditions and the time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from distributary.api.common import Condition, ConditionStatus

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
_STANDARD = (READY, RECONCILING, STALLED)
SUSPENDED = "Suspended"  # Ready's reason while `spec.suspend` holds a view's or job's application
_MAX_MESSAGE = 32768


@dataclass(frozen=True)
class Problem:
    """Something only the user can fix (a refused change, a missing input): makes Stalled True."""

    reason: str
    message: str


@dataclass(frozen=True)
class Work:
    """Work under way (a topic to create, a revision catching up): makes Reconciling True."""

    reason: str
    message: str


@dataclass(frozen=True)
class ExtraCondition:
    """A condition beside the standard three, e.g. Reprocessing, CaughtUp or DataLossRisk."""

    type: str
    status: ConditionStatus
    reason: str
    message: str


@dataclass(frozen=True)
class Observation:
    """What a controller learnt about one resource, as the conditions need it.

    `first_sight`: the resource has never been reconciled (no status yet). `problems` and `work`
    in order of importance: the first one gives the reason. `ready_reason`/`ready_message` say
    what Ready=True means for this resource (e.g. "Serving", "Serving revision 2.").
    """

    generation: int
    first_sight: bool = False
    problems: tuple[Problem, ...] = ()
    work: tuple[Work, ...] = ()
    extras: tuple[ExtraCondition, ...] = ()
    ready_reason: str = "Reconciled"
    ready_message: str = "Everything the spec asks for is in place."
    suspended: str | None = None  # why nothing runs on purpose (`spec.suspend`): Ready False


def rfc3339(moment: datetime) -> str:
    """`moment` as metav1.Time writes it: UTC, to the second (a naive time is taken as UTC)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    """A status timestamp (RFC 3339, as `rfc3339` writes it) as a datetime."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _summary(reason: str, messages: Sequence[str]) -> tuple[str, str]:
    message = " ".join(m.strip() for m in messages if m.strip())
    return reason, message[:_MAX_MESSAGE]


def _wanted(observation: Observation) -> list[tuple[str, ConditionStatus, str, str]]:
    """The standard conditions to show, as (type, status, reason, message)."""
    if observation.problems:
        reason, message = _summary(
            observation.problems[0].reason, [p.message for p in observation.problems]
        )
        return [(READY, "False", reason, message), (STALLED, "True", reason, message)]
    if observation.suspended is not None:  # asked for: nothing to wait for, nothing to fix
        return [(READY, "False", SUSPENDED, observation.suspended[:_MAX_MESSAGE])]
    if observation.work or observation.first_sight:
        reason, message = (
            _summary(observation.work[0].reason, [w.message for w in observation.work])
            if observation.work
            else ("Progressing", "Reconciliation has started.")
        )
        return [(READY, "Unknown", reason, message), (RECONCILING, "True", reason, message)]
    return [(READY, "True", observation.ready_reason, observation.ready_message)]


def conditions(
    observation: Observation, previous: Sequence[Condition], now: datetime
) -> list[Condition]:
    """The complete list of conditions for `observation`: Ready, Reconciling, Stalled, extras.

    Reconciling and Stalled appear only when True; extras appear as given, sorted by type, and a
    condition not produced here is dropped. A condition whose status is unchanged keeps its
    previous lastTransitionTime. Raises `ValueError` for an extra of a standard type or given twice.
    """
    extras = sorted(observation.extras, key=lambda extra: extra.type)
    types = [extra.type for extra in extras]
    clash = sorted({t for t in types if t in _STANDARD or types.count(t) > 1})
    if clash:
        raise ValueError(f"extra condition {clash[0]!r} is a standard type or is given twice")
    wanted = _wanted(observation) + [(e.type, e.status, e.reason, e.message) for e in extras]
    before = {condition.type: condition for condition in previous}
    stamp = rfc3339(now)
    result = []
    for type_, status, reason, message in wanted:
        old = before.get(type_)
        result.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                observed_generation=observation.generation,
                last_transition_time=(
                    old.last_transition_time if old is not None and old.status == status else stamp
                ),
            )
        )
    return result


def condition_of(conditions: Sequence[Condition], type: str) -> Condition | None:
    """The condition of the given type, or None."""
    return next((condition for condition in conditions if condition.type == type), None)


def is_ready(conditions: Sequence[Condition], generation: int) -> bool:
    """True when Ready is True and was computed from `generation` (the spec now in force)."""
    ready = condition_of(conditions, READY)
    return ready is not None and ready.status == "True" and ready.observed_generation == generation


def is_stalled(conditions: Sequence[Condition]) -> bool:
    """True when Stalled is True: the resource needs its user."""
    stalled = condition_of(conditions, STALLED)
    return stalled is not None and stalled.status == "True"


def suspension(status: Mapping[str, Any]) -> str | None:
    """The message of a status (as stored) whose Ready says the view or job is suspended
    (`spec.suspend`, reason Suspended); None when it is not."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == READY and condition.get("reason") == SUSPENDED:
            return str(condition.get("message") or "")
    return None
