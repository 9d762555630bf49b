"""A DerivedView's status from one reconcile: revisions, positions and lag, conditions.

Ready means the view's running application runs; `CaughtUp` says whether the serving revision keeps
up with its inputs: lag 0 (reason NoLag), or, while records arrive, behind by no more than what its
inputs receive in the cutover window (reason KeepingUp), the same test a revision catching up must
pass to serve. `status.lag` says how far behind it is. Each live revision's row also records how
fast its inputs grow (`inputRate`, measured over ten seconds or more), which the cutover of a
revision catching up goes by; `Reprocessing` says
whether a new revision is catching up beside the serving one, with its progress ("revision 2
reprocessing 43%: 1.2M of 2.8M records"). Each revision's row in `status.revisions` carries its
phase, topic, consumer group, inputs, lag and progress, and its dead letters as its runner counts
them (`status.deadLetters`: the serving revision's). Problems only the user can fix (bad SQL, a
missing input, an application that keeps failing, a driver pod the cluster cannot start, a refused
change) make the view Stalled; waiting for an input's topic, an application that is starting or
restarting makes it Reconciling. An application keeps failing when it failed several times within
a window and has not run stably since (`plan.applications.restarts`, which `status.sparkApplication`
keeps the history for). A query Spark refused at start (its runner reported QueryRefused for the
very runner spec it runs) is a problem of its own, not a failure: it is not restarted
(`query_refused`), and a revision serving beside it serves on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from distributary.api.common import Condition
from distributary.plan.applications.restarts import (
    APPLICATION_FAILING,
    RestartHistory,
    RestartPolicy,
    failing_message,
    restarting_message,
    stalled,
)
from distributary.plan.applications.runner_spec import RUNNER_SPEC_HASH, runner_spec_hash
from distributary.plan.applications.spark_state import (
    APP_SUSPENDED,
    CHECKPOINT_LOST,
    QUERY_REFUSED,
    AppState,
)
from distributary.plan.revisions.classify import Classification, change_status
from distributary.plan.revisions.lifecycle import (
    CATCHING_UP,
    LIVE,
    SERVING,
    keeping_up,
    keeping_up_seconds,
    progress_message,
    reprocess_progress,
    rows_json,
)
from distributary.plan.revisions.positions import Offsets, data_loss_risk, input_rate
from distributary.plan.revisions.progress import records_behind
from distributary.plan.status.conditions import (
    ExtraCondition,
    Observation,
    Problem,
    Work,
    conditions,
    rfc3339,
)
from distributary.plan.views.view_plan import ViewPlan


@dataclass(frozen=True)
class RunObservation:
    """What the controller saw of a view's (or job's) running revision: its application and
    its restart history (`plan.applications.restarts`, judged by `policy`), its consumer group's
    offsets (`committed`; for a view, every live revision's in `groups`), its inputs' end and start
    offsets, its last progress record (for a view, every revision's that has one in `reports`, by
    revision)."""

    application: str | None = None
    app: AppState | None = None
    history: RestartHistory = field(default_factory=RestartHistory)
    committed: Offsets | None = None
    ends: Offsets | None = None
    progress: Mapping[str, Any] | None = None
    groups: Mapping[int, Offsets] = field(default_factory=dict)
    starts: Offsets | None = None
    reports: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    policy: RestartPolicy = field(default_factory=RestartPolicy)


def application_findings(seen: RunObservation, now: datetime) -> tuple[list[Problem], list[Work]]:
    """What the application's state says: a problem while its driver cannot start (the
    cluster's to fix: `plan.applications.driver_pods`) or while it keeps failing (until it runs
    stably again), work while it starts or waits for a restart."""
    app = seen.app
    if app is None or app.state in (CHECKPOINT_LOST, QUERY_REFUSED, APP_SUSPENDED):
        return [], []
    if app.not_starting is not None:
        return [app.not_starting], []
    if stalled(seen.history, now, seen.policy):
        message = failing_message(seen.history, app, now, seen.policy)
        return [Problem(APPLICATION_FAILING, message)], []
    if app.running:
        return [], []
    if app.ended:
        return [], [Work("Restarting", restarting_message(seen.history, app))]
    return [], [Work("Starting", f"the Spark application is {app.state.lower()}")]


def driver_problems(seen: RunObservation) -> tuple[Problem, ...]:
    """Why the application's driver cannot start, as a problem to announce once (none when
    it can, or the runtime does not know)."""
    app = seen.app
    return (app.not_starting,) if app is not None and app.not_starting is not None else ()


def _observation(
    plan: ViewPlan,
    seen: RunObservation,
    generation: int,
    lag: int | None,
    catching_up: Mapping[str, Any] | None,
    now: datetime,
    rate: float | None = None,
    batch: float | None = None,
) -> Observation:
    problems, work = application_findings(seen, now)
    upgrade = plan.upgrade
    if upgrade is None:
        extras = list(caught_up(lag))
    else:
        window = keeping_up_seconds(upgrade, batch)
        extras = list(caught_up(lag, rate, window, upgrade.cutover_max_lag))
    if plan.lifecycle is not None:
        extras.append(
            ExtraCondition(
                "Reprocessing",
                "True",
                "CatchingUp",
                str(
                    catching_up.get("progressMessage")
                    or f"revision {catching_up['revision']} started"
                ),
            )
            if catching_up
            else ExtraCondition(
                "Reprocessing", "False", "Serving", f"revision {plan.revision} serves alone"
            )
        )
    return Observation(
        generation,
        problems=(*plan.problems, *problems),
        work=(*plan.waiting, *work),
        extras=tuple(extras),
        ready_reason="Serving",
        ready_message=f"Revision {plan.revision} serves"
        + (f"; lag {lag}" if lag is not None else ""),
        suspended=suspended_message(seen),
    )


def suspended_message(seen: RunObservation) -> str | None:
    """Why nothing runs, when the view or job is suspended (`spec.suspend`); None otherwise."""
    app = seen.app
    return app.message if app is not None and app.state == APP_SUSPENDED else None


def caught_up(
    lag: int | None, rate: float | None = None, seconds: float = 0.0, margin: int = 0
) -> tuple[ExtraCondition, ...]:
    """The `CaughtUp` condition for a consumer `lag` records behind (none while unknown): True
    when it keeps up, that is when it is behind by no more than `margin` plus what its inputs
    receive in `seconds` at `rate` records a second (the cutover's test; on idle inputs, a lag
    of at most `margin`). A reader of live inputs is never at lag 0, and need not be."""
    if lag is None:
        return ()
    behind = f"{lag} record(s) behind"
    if lag == 0:
        return (ExtraCondition("CaughtUp", "True", "NoLag", behind),)
    if keeping_up(lag, rate, seconds, margin):
        growing = f"; its inputs grow by {rate:.1f} records/s" if rate else ""
        return (ExtraCondition("CaughtUp", "True", "KeepingUp", behind + growing),)
    return (ExtraCondition("CaughtUp", "False", "Lag", behind),)


def input_positions(
    sources: Sequence[Mapping[str, Any]], committed: Offsets, ends: Offsets
) -> list[dict[str, Any]]:
    """Each input's (log, alias, topic) position and lag, as status lists them."""
    rows = []
    for source in sources:
        topic = str(source["topic"])
        position = committed.get(topic, {})
        end = ends.get(topic)
        rows.append(
            {
                **{k: source[k] for k in ("log", "alias") if source.get(k) is not None},
                "topic": topic,
                "position": {str(p): o for p, o in sorted(position.items())},
                # Unknown, not 0, while the topic's end offsets could not be read.
                "lag": records_behind({topic: position}, {topic: end}) if end else None,
            }
        )
    return rows


def runner_inputs(plan: ViewPlan) -> list[dict[str, Any]]:
    """The running revision's inputs as its status row records them."""
    if plan.runner is None:
        return []
    return [{"log": s.log, "alias": s.alias, "topic": s.topic} for s in plan.runner.inputs]


def total_lag(rows: Sequence[Mapping[str, Any]], committed: Offsets | None) -> int | None:
    """The lag over every input; None when the group or any input's end is unknown."""
    if not rows or committed is None or any(row["lag"] is None for row in rows):
        return None
    return sum(int(row["lag"]) for row in rows)


def _observed_row(
    row: dict[str, Any], group: Offsets | None, seen: RunObservation, now: datetime
) -> tuple[dict[str, Any], list[dict[str, Any]], int | None]:
    """A live revision's row with its lag (and progress, while it catches up), its input
    positions and its lag, from its consumer group's offsets `group`."""
    sources = row.get("inputs") or []
    positions = input_positions(sources, group or {}, seen.ends or {}) if seen.ends else []
    lag = total_lag(positions, group)
    if lag is not None:
        row["lag"] = lag
    if seen.ends:
        topics = {str(s["topic"]) for s in sources}
        records = sum(sum(seen.ends.get(t, {}).values()) for t in topics)
        mark, rate = input_rate(row.get("inputMark"), row.get("inputRate"), records, now)
        row["inputMark"] = mark
        if rate is not None:
            row["inputRate"] = rate
    if row["phase"] == SERVING and lag == 0 and not row.get("caughtUpAt"):
        row["caughtUpAt"] = rfc3339(now)
    if row["phase"] == CATCHING_UP and seen.ends and seen.starts is not None and group is not None:
        topics = {str(s["topic"]) for s in sources}
        done, total = reprocess_progress(
            {t: o for t, o in seen.starts.items() if t in topics},
            group,
            {t: o for t, o in seen.ends.items() if t in topics},
        )
        row.update(
            recordsRead=done,
            recordsTotal=total,
            progressPercent=round(100.0 * done / total, 1) if total else 100.0,
            progressMessage=progress_message(int(row["revision"]), done, total),
        )
    return row, positions, lag


def _report_of(
    row: Mapping[str, Any], seen: RunObservation, running: int | None
) -> Mapping[str, Any] | None:
    """Revision `row`'s last progress record, if its runner published one."""
    revision = int(row["revision"])
    record = seen.reports.get(revision)
    return seen.progress if record is None and revision == running else record


def dead_letters_of(
    row: Mapping[str, Any], seen: RunObservation, running: int | None
) -> int | None:
    """Revision `row`'s dead letters as its runner last reported them (a count over the
    revision's whole run, which the runner reads back from Kafka when it starts); what the row
    says already while its runner reports nothing."""
    record = _report_of(row, seen, running)
    count = (record or {}).get("deadLetters")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return count
    known = row.get("deadLetters")
    return int(known) if isinstance(known, int) else None


def batch_seconds_of(
    row: Mapping[str, Any], seen: RunObservation, running: int | None
) -> float | None:
    """How long revision `row`'s last micro-batch took, in seconds, as its runner last reported
    it, if that batch read everything its inputs held when it was planned (the pace of a reader
    that keeps up); None otherwise: a batch that left records behind (a backlog read in capped
    batches) says how long the backlog takes, not how far behind a reader that keeps up is."""
    record = _report_of(row, seen, running) or {}
    millis = record.get("batchDurationMs")
    if record.get("lag") != 0 or not isinstance(millis, int) or isinstance(millis, bool):
        return None
    return round(millis / 1000.0, 3) if millis >= 0 else None


def _lost_work(lost: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> Work:
    """What happens to revisions whose state is gone: rebuilt beside, never resumed empty."""
    gone = ", ".join(str(r["revision"]) for r in lost)
    rebuilding = [r for r in rows if r["phase"] == CATCHING_UP and not r.get("checkpointLost")]
    after = (
        f"revision {rebuilding[-1]['revision']} rebuilds it from the start of the inputs and "
        "serves once caught up; until then readers see the output as it was"
        if rebuilding
        else "it is rebuilt from the start of the inputs as a new revision"
    )
    return Work(
        CHECKPOINT_LOST,
        f"revision {gone} keeps state and its checkpoint is gone, so it does not resume on "
        f"empty state: {after}",
    )


def lost_checkpoint(plan: ViewPlan, seen: RunObservation) -> bool:
    """Whether the running revision's runner reported that it keeps state and its checkpoint
    is gone (a report about this very checkpoint: not an old one's, before a rewind or a
    deletion)."""
    record = seen.progress or {}
    return (
        plan.runner is not None
        and record.get("state") == CHECKPOINT_LOST
        and record.get("checkpoint") == plan.runner.checkpoint_location
    )


def query_refused(plan: ViewPlan, record: Mapping[str, Any] | None) -> Problem | None:
    """The problem (reason QueryRefused) when the running revision's runner reported that Spark
    refused its query at start, a report about this very spec of the revision (the hash of its
    runner spec, `runner_spec_hash`, which covers its checkpoint); None otherwise. Such a
    revision is not restarted: Spark would refuse the same query again. An edit that keeps the
    revision but changes what runs (its SQL in place, an input's schema, a setting) is tried
    again, and so is a report that names no spec."""
    record = record or {}
    runner = plan.runner
    if (
        runner is None
        or record.get("state") != QUERY_REFUSED
        or record.get(RUNNER_SPEC_HASH) != runner_spec_hash(runner)
        or record.get("revision") not in (None, runner.revision)
    ):
        return None
    said = str(record.get("error") or "spec.sql: Spark refuses the query")
    if runner.revision != plan.revision:
        after = (
            f"revision {plan.revision} serves on unchanged; fix spec.sql and a new revision "
            "starts beside it"
        )
    else:
        after = "nothing runs it until spec.sql is fixed"
    return Problem(
        QUERY_REFUSED,
        f"revision {runner.revision} does not start and is not restarted: {said}; {after}",
    )


def _risks(row: Mapping[str, Any], group: Offsets | None, seen: RunObservation) -> list[str]:
    """Where revision `row`'s position is at risk of losing records to retention."""
    if group is None or seen.starts is None or seen.ends is None:
        return []
    found = []
    for source in row.get("inputs") or []:
        topic = str(source["topic"])
        risk = data_loss_risk(
            group.get(topic, {}), seen.starts.get(topic, {}), seen.ends.get(topic, {})
        )
        if risk:
            found.append(f"revision {row['revision']} reading {source['log']} ({topic}) {risk}")
    return found


def data_loss_condition(risks: Sequence[str]) -> ExtraCondition:
    """`DataLossRisk`: True with where, when a consumer is near (or past) its inputs' retention."""
    if risks:
        return ExtraCondition("DataLossRisk", "True", "NearRetention", "; ".join(risks))
    return ExtraCondition("DataLossRisk", "False", "WithinRetention", "no consumer is near it")


def view_status(
    plan: ViewPlan,
    seen: RunObservation,
    previous: Mapping[str, Any] | None,
    generation: int,
    now: datetime,
) -> dict[str, Any]:
    """The status to write for a view (camelCase, as the API stores it)."""
    before = dict(previous or {})
    rows = rows_json(plan.lifecycle.rows) if plan.lifecycle else []
    running = plan.runner.revision if plan.runner is not None else None
    groups = dict(seen.groups)
    if running is not None and seen.committed is not None:
        groups.setdefault(running, seen.committed)
    inputs: list[dict[str, Any]] = []
    lag: int | None = None
    catching_up: dict[str, Any] | None = None
    rate: float | None = None
    batch: float | None = None
    risks: list[str] = []
    for index, row in enumerate(rows):
        if row["revision"] == running:
            row["inputs"] = runner_inputs(plan)
            if lost_checkpoint(plan, seen) and not row.get("checkpointLost"):
                row["checkpointLost"] = rfc3339(now)
        letters = dead_letters_of(row, seen, running)
        if letters is not None:
            row["deadLetters"] = letters
        batch = batch_seconds_of(row, seen, running)
        if batch is not None:
            row["batchSeconds"] = batch
        if row["phase"] not in LIVE:
            continue
        group = groups.get(int(row["revision"]))
        rows[index], positions, row_lag = _observed_row(row, group, seen, now)
        if row["revision"] == running and query_refused(plan, seen.progress) is not None:
            # It reads nothing: never caught up, so it never serves (`plan.revisions.lifecycle`).
            rows[index] = {**rows[index], "lag": None, "caughtUpSince": None}
        risks += _risks(row, group, seen)
        if row["phase"] == SERVING:
            inputs, lag, rate = positions, row_lag, rows[index].get("inputRate")
            batch = rows[index].get("batchSeconds")
        else:
            catching_up = rows[index]
    observation = _observation(plan, seen, generation, lag, catching_up, now, rate, batch)
    lost = [r for r in rows if r["phase"] in LIVE and r.get("checkpointLost")]
    if lost:
        observation = replace(observation, work=(*observation.work, _lost_work(lost, rows)))
    if seen.starts is not None:
        observation = replace(observation, extras=(*observation.extras, data_loss_condition(risks)))
    status = status_of(observation, before, now)
    if rows:
        status["servingRevision"] = plan.revision
        status["revisions"] = rows
        serving = next(r for r in rows if r["revision"] == plan.revision)
        status["outputTopic"] = serving.get("topic")
        if serving.get("deadLetters") is not None:
            status["deadLetters"] = serving["deadLetters"]
    if inputs:
        status["inputs"] = inputs
        status["lag"] = lag
    change = plan.lifecycle.change if plan.lifecycle is not None else None
    status.update(running_fields(seen, change, generation))
    return status


def status_of(observation: Observation, before: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The part of a view's or job's status every reconcile writes: the generation observed,
    the conditions (kept where unchanged), no pending action."""
    old: Sequence[Condition] = [Condition.model_validate(c) for c in before.get("conditions") or []]
    return {
        "observedGeneration": observation.generation,
        "conditions": [
            c.model_dump(by_alias=True, exclude_none=True)
            for c in conditions(observation, old, now)
        ],
        "pendingAction": None,
    }


def running_fields(
    seen: RunObservation, change: Classification | None, generation: int
) -> dict[str, Any]:
    """What a view's or job's status says of its running application, its last batch and how
    the last edit was classified (only what is known)."""
    fields: dict[str, Any] = {}
    if seen.application is not None:
        fields["sparkApplication"] = {
            "name": seen.application,
            "state": seen.app.state if seen.app else None,
            **seen.history.status_fields(),
        }
    if seen.progress:
        fields["lastProgress"] = progress_status(seen.progress)
    if change is not None:
        record = change_status(change, generation)
        fields["lastChange"] = record.model_dump(by_alias=True, exclude_none=True)
    return fields


def progress_status(record: Mapping[str, Any]) -> dict[str, Any]:
    """`status.lastProgress` from a runner's progress record."""
    return {
        k: v
        for k, v in {
            "batchId": record.get("batchId"),
            "recordsPerSecond": record.get("processedRowsPerSecond"),
            "batchDurationMs": record.get("batchDurationMs"),
            "timestamp": record.get("timestamp"),
        }.items()
        if v is not None
    }
