"""What a settled chaos run must hold, read the way any Kafka user reads it.

Every topic is read by a reader of committed records only (`spark_pipelines.read_topic`). The
checks, each with a name, whether it holds and what was found:

- `input`: the input topic holds every page view appended, once (where each landed is what the
  expectations of `chaos_clicks` work from);
- `enriched-page-views`: its serving topic is the expected multiset of rows, and its serving
  revision's dead letters are the malformed records, each as often as the revision read it;
- `views-per-user`, `views-per-country`: the tables, row by row (per-country over the enriched
  stream, rewound records included);
- `cutover`: every edit took effect: each view's status has seen its last spec, every revision
  but the serving one is Retired (none catches up), its output Log names the serving revision's
  topic, and `views-per-country` reads the enriched view's serving topic; `views-per-user`, whose
  definition and input never changed, still serves revision 1, its only one (no kill, edit or
  rewind of another view made it reprocess);
- `applications`: the runner processes of the namespace are exactly one per view, its serving
  revision's;
- `groups`, `topics`: the namespace's consumer groups are exactly the serving revisions', and its
  topics exactly the input's, the serving revisions' and the views' dead-letter topics.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.integration.kube.chaos import (
    ENRICHED,
    PER_COUNTRY,
    PER_USER,
    VIEWS,
    Chaos,
    output_log,
)
from tests.integration.kube.chaos_clicks import (
    INPUT_TOPIC,
    PageView,
    canonical,
    difference,
    expected_outputs,
    input_positions,
    output_offsets,
    page_view,
    table_difference,
    views_per_country,
    views_per_user,
    writer_stops,
)
from tests.integration.spark_pipelines import Read, latest_table, read_topic

from distributary.plan.applications.runner_spec import consumer_group, dead_letter_topic
from distributary.plan.revisions.progress import PROGRESS_TOPIC

READ_TIMEOUT = 120.0
GROUP_GRACE = 30.0


@dataclass(frozen=True)
class Check:
    """One thing the run must hold."""

    name: str
    ok: bool
    detail: str

    def summary(self) -> dict[str, Any]:
        """The check as `bench/chaos` reports it."""
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass
class Settled:
    """The views as they settled: each one's status, serving revision and serving topic."""

    statuses: dict[str, dict[str, Any]]

    def serving(self, view: str) -> int:
        """The view's serving revision."""
        return int(self.statuses[view]["servingRevision"])

    def topic(self, view: str) -> str:
        """The view's serving revision's topic."""
        rows = self.statuses[view]["revisions"]
        return str(next(r["topic"] for r in rows if r["revision"] == self.serving(view)))


def final_checks(chaos: Chaos) -> list[Check]:
    """Every check of the module docstring, in order."""
    settled = Settled({v: chaos.view(v).get("status") or {} for v in VIEWS})
    records = [page_view(chaos.plan.seed, seq) for seq in range(chaos.clicks.appended)]
    positions, problems = _positions(chaos, records)
    checks = [Check("input", not problems, "; ".join(problems) or f"{len(records)} page views")]
    if problems:
        return checks
    rows, enriched_check = _enriched(chaos, settled, records, positions)
    checks.append(enriched_check)
    checks.append(_per_user(chaos, settled, records, positions))
    checks.append(_per_country(chaos, settled, rows))
    for name, check in (
        ("cutover", _cutover),
        ("applications", _applications),
        ("groups", _groups),
        ("topics", _topics),
    ):
        checks.append(_named(name, lambda check=check: check(chaos, settled)))
    return checks


def _named(name: str, found: Callable[[], list[str] | str]) -> Check:
    """A check from what differs (nothing: it holds), or a summary of what holds."""
    result = found()
    if isinstance(result, str):
        return Check(name, True, result)
    return Check(name, not result, "; ".join(result) or "as expected")


def _positions(
    chaos: Chaos, records: list[PageView]
) -> tuple[dict[int, tuple[int, int]], list[str]]:
    """Where each page view landed (seq -> partition, offset), and what is wrong with the
    input topic."""
    return input_positions(chaos.bootstrap, records, READ_TIMEOUT)


def _dead_letters(chaos: Chaos, view: str, revision: int) -> Counter[tuple[int, int]]:
    """(source partition, offset) of each dead letter the view's `revision` wrote."""
    found: Counter[tuple[int, int]] = Counter()
    for read in read_topic(chaos.bootstrap, dead_letter_topic(chaos.namespace, view), READ_TIMEOUT):
        headers = read.headers
        if headers.get("distributary.revision") == str(revision) and headers.get(
            "distributary.view", ""
        ).endswith(view):
            partition = int(headers["distributary.source.partition"])
            found[(partition, int(headers["distributary.source.offset"]))] += 1
    return found


def _rows(reads: list[Read]) -> Counter[str]:
    return Counter(canonical(r.json()) for r in reads if r.value is not None)


def _enriched(
    chaos: Chaos,
    settled: Settled,
    records: list[PageView],
    positions: dict[int, tuple[int, int]],
) -> tuple[Counter[str], Check]:
    """The enriched stream's expected rows, and the check of its serving topic and dead
    letters against them. A rewind of the serving revision made it read again (or skip) the
    records between its target and where the group stood when it moved, which `lastRewind`
    records."""
    serving = settled.serving(ENRICHED)
    topic = settled.topic(ENRICHED)
    found = _rows(read_topic(chaos.bootstrap, topic, READ_TIMEOUT))
    letters = _dead_letters(chaos, ENRICHED, serving)
    rewinds = [r for r in chaos.rewinds if r.revision == serving]
    outputs = output_offsets(records, positions, chaos.threshold)
    rows, expected_letters = expected_outputs(outputs, rewinds)
    problems = [difference(rows, found, topic) or ""]
    if expected_letters != letters:
        missing, extra = expected_letters - letters, letters - expected_letters
        problems.append(
            f"dead letters of revision {serving}: missing {sorted(missing)[:3]}, "
            f"too many {sorted(extra)[:3]}"
        )
    if len(rewinds) == 1 and (rows != found or expected_letters != letters):
        # Where would the writer have to have stood for the output to be right?
        stops, unexplained = writer_stops(outputs, found, letters, rewinds[0])
        problems += unexplained or [f"the output fits the writer standing at {stops}"]
    problems = [p for p in problems if p]
    moved = "; ".join(f"rewind {r.request_id} (from, to): {r.moves}" for r in rewinds)
    detail = (
        f"{sum(rows.values())} rows and {sum(letters.values())} dead letters in revision "
        f"{serving} (filter duration_ms >= {chaos.threshold}{'; ' + moved if moved else ''})"
    )
    return rows, Check(ENRICHED, not problems, "; ".join(problems) or detail)


def _per_user(
    chaos: Chaos,
    settled: Settled,
    records: list[PageView],
    positions: dict[int, tuple[int, int]],
) -> Check:
    reads = read_topic(chaos.bootstrap, settled.topic(PER_USER), READ_TIMEOUT)
    found = {json.loads(k)["user_id"]: canonical(v) for k, v in latest_table(reads).items()}
    expected = views_per_user(records)
    problems = [table_difference(expected, found, settled.topic(PER_USER)) or ""]
    letters = _dead_letters(chaos, PER_USER, settled.serving(PER_USER))
    malformed = Counter(positions[r.seq] for r in records if r.fields is None)
    if letters != malformed:
        problems.append(
            f"dead letters: {sum(letters.values())}, expected each of the {len(malformed)} "
            "malformed records once"
        )
    problems = [p for p in problems if p]
    detail = f"{len(expected)} users; {len(malformed)} dead letters"
    return Check(PER_USER, not problems, "; ".join(problems) or detail)


def _per_country(chaos: Chaos, settled: Settled, rows: Counter[str]) -> Check:
    reads = read_topic(chaos.bootstrap, settled.topic(PER_COUNTRY), READ_TIMEOUT)
    found = {json.loads(k)["country"]: canonical(v) for k, v in latest_table(reads).items()}
    expected = views_per_country(rows)
    problem = table_difference(expected, found, settled.topic(PER_COUNTRY))
    return Check(PER_COUNTRY, problem is None, problem or json.dumps(found, sort_keys=True))


def _cutover(chaos: Chaos, settled: Settled) -> list[str] | str:
    """What shows that an edit did not take effect, or who serves."""
    problems = []
    for view in VIEWS:
        status = settled.statuses[view]
        # Nothing catches up and status has seen the last edit: the serving revision runs it.
        generation = (chaos.view(view).get("metadata") or {}).get("generation")
        if status.get("observedGeneration") != generation:
            problems.append(
                f"{view}: status is of generation {status.get('observedGeneration')}, "
                f"the spec's is {generation}"
            )
        for row in status["revisions"]:
            if row["revision"] != settled.serving(view) and row["phase"] != "Retired":
                problems.append(f"{view} revision {row['revision']} is {row['phase']}")
        log = chaos.kube.get("distributary.dev/v1alpha1", "Log", chaos.namespace, output_log(view))
        topic = ((log or {}).get("status") or {}).get("topicName")
        if topic != settled.topic(view):
            problems.append(f"Log {output_log(view)} names {topic}, not {settled.topic(view)}")
    untouched = [row["revision"] for row in settled.statuses[PER_USER]["revisions"]]
    if untouched != [1]:
        problems.append(f"{PER_USER}, never edited, has revisions {untouched}, not [1]")
    reading = [i.get("topic") for i in settled.statuses[PER_COUNTRY].get("inputs") or []]
    if reading != [settled.topic(ENRICHED)]:
        problems.append(f"{PER_COUNTRY} reads {reading}, not {settled.topic(ENRICHED)}")
    if problems:
        return problems
    return ", ".join(
        f"{v} serves r{settled.serving(v)} of {len(settled.statuses[v]['revisions'])}"
        for v in VIEWS
    )


def _applications(chaos: Chaos, settled: Settled) -> list[str]:
    """Runner processes of the namespace that should not run, or should and do not: exactly one
    process per view, its serving revision's, and the one its pid file names."""
    tracked = {(view, revision): pid for view, revision, pid in chaos.runners()}
    processes = chaos.runner_processes()
    running = {(view, revision) for view, revision, _ in processes}
    expected = {(view, f"r{settled.serving(view)}") for view in VIEWS}
    problems = [f"{v} {r} runs, and should not" for v, r in sorted(running - expected)]
    problems += [f"{v} {r} does not run" for v, r in sorted(expected - running)]
    problems += [
        f"{v} {r}: process {pid} runs untracked (its pid file names {tracked.get((v, r))})"
        for v, r, pid in processes
        if tracked.get((v, r)) != pid
    ]
    return problems


def _groups(chaos: Chaos, settled: Settled) -> list[str]:
    """The namespace's groups against the serving revisions'. A retired revision's group goes
    on a reconcile after its topic (once its application is seen gone): given GROUP_GRACE."""
    prefix = f"distributary.{chaos.namespace}."
    expected = {consumer_group(chaos.namespace, v, settled.serving(v)) for v in VIEWS}
    deadline = time.monotonic() + GROUP_GRACE
    while True:
        groups = {g for g in chaos.admin.group_names() if g.startswith(prefix)}
        if groups == expected or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    return [f"orphaned group {g}" for g in sorted(groups - expected)] + [
        f"group {g} missing" for g in sorted(expected - groups)
    ]


def _topics(chaos: Chaos, settled: Settled) -> list[str]:
    """Topics of the run that should be gone, or should be there and are not."""
    names = chaos.admin.topic_names()
    ours = {
        t for t in names if t.startswith(("chaos-", "chaos.", f"distributary.{chaos.namespace}."))
    }
    expected = {INPUT_TOPIC} | {settled.topic(v) for v in VIEWS}
    expected |= {dead_letter_topic(chaos.namespace, v) for v in VIEWS}
    expected.add(f"distributary.{chaos.namespace}.claims")  # the test operator's claims topic
    problems = [f"orphaned topic {t}" for t in sorted(ours - expected)]
    problems += [f"topic {t} missing" for t in sorted(expected - ours)]
    if PROGRESS_TOPIC not in names:
        problems.append(f"the progress topic {PROGRESS_TOPIC} is missing")
    return problems
