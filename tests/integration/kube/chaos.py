"""A chaos run of `examples/clickstream` under the operator, for the chaos test and `bench/chaos`.

The example's Log and views are applied as a person would (kubectl), with what a short run needs:
`cutoverWindow: 2s` with `cutoverMaxLag: 100` (a runner on two busy cores takes a few seconds a
batch, so a revision that keeps up is rarely at lag 0), `retireAfter: 2s`, triggers of 2s,
outputs under `deletionPolicy: Delete` (so retired topics go), and topics of their own
(`chaos.page-views`, `chaos-<view>.r<N>`: the session's broker holds other modules' topics of
the example's names). A thread appends page views continuously (`chaos_clicks.page_view`:
seeded, with records each view filters out and a few malformed ones), and at seeded random
moments the driver

- SIGKILLs a runner process, with its JVM (its process group), found by the pid file the local
  runtime keeps for each revision;
- SIGKILLs the operator and starts it again after a few seconds;
- edits `enriched-page-views`' SQL (the threshold of its `duration_ms` filter), which makes it
  reprocess and cut over, and `views-per-country`, which reads it, reprocess after it;
- rewinds `enriched-page-views` (`spec.rewind`, a new request id) to a moment 10 to 30 seconds
  back (a move forward for a revision further behind than that: it skips the records between,
  as asked), or to the earliest record while a revision reprocesses; each rewind is waited for
  until done, and its status record (where the group stood, where it went) states exactly what
  the output must then hold (`chaos_clicks`).

Then the producer stops, every view must settle (the serving revision runs the spec's
definition: CaughtUp, Ready, lag 0, not Reprocessing, every other revision Retired with its topic
deleted), and
`chaos_checks` compares every output with what the input implies and looks for what should be
gone. Every action is logged with its time; the seed replays the run's input, its plan and its
choices (the moments as closely as timing allows).

This is test machinery on the test harness (kubectl, the operator process, committed readers), so
it lives with the tests; `bench/chaos` imports it from a checkout.
"""

from __future__ import annotations

import math
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from tests.integration.kube.chaos_clicks import INPUT_TOPIC, KEPT, THRESHOLDS, Clicks, Rewound
from tests.integration.kube.operator_harness import Cluster, Operator, is_true

from distributary.backends.local_spark import LocalRuntime
from distributary.kafka.admin import KafkaAdmin, KafkaAdminError
from distributary.kube.resources import Kube
from distributary.plan.applications.runner_spec import consumer_group

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "clickstream"
API = "distributary.dev/v1alpha1"
INPUT_LOG = "page-views"
ENRICHED, PER_USER, PER_COUNTRY = "enriched-page-views", "views-per-user", "views-per-country"
VIEWS = (ENRICHED, PER_USER, PER_COUNTRY)
KINDS = ("kill_runner", "kill_operator", "edit_sql", "rewind")
# What a short run needs: restarts after 1 s doubling to 4 s (the default starts at 10 s), and
# failures forgiven after 20 s of running, so a view killed often is not Stalled at the end.
OPERATOR_FLAGS = (
    "--spark-runtime", "local", "--restart-delay", "1", "--max-restart-delay", "4",
    "--stable-after", "20",
)  # fmt: skip


def current_revision(status: dict[str, Any]) -> int:
    """The revision that runs the spec's definition: the one catching up, else the serving one
    (an edit back to the serving revision's definition retires a catch-up and starts nothing,
    so the highest revision is not always it)."""
    rows = status.get("revisions") or []
    catching = [int(r["revision"]) for r in rows if r.get("phase") == "CatchingUp"]
    return max(catching) if catching else int(status.get("servingRevision") or 0)


def output_log(view: str) -> str:
    """The child Log a view of the run writes (its topics are `<log>.r<N>`)."""
    return f"chaos-{view}"


@dataclass(frozen=True)
class ChaosPlan:
    """How much chaos, how fast the records come, and how the views deliver."""

    seed: int
    runner_kills: int = 5
    operator_kills: int = 2
    edits: int = 1
    rewinds: int = 1
    gap: tuple[float, float] = (4.0, 12.0)  # seconds between two actions
    rate: float = 10.0  # page views a second
    delivery: str = "ExactlyOnce"

    @classmethod
    def for_minutes(cls, seed: int, minutes: float, **settings: Any) -> ChaosPlan:
        """About `minutes` of chaos: an action every 8 seconds on average, eight in eleven a
        runner's SIGKILL, the others an operator kill, an edit or a rewind (one of each at
        least)."""
        actions = max(int(minutes * 60 / 8), 4)
        rng = random.Random(seed)
        counts = dict.fromkeys(KINDS, 1)
        for _ in range(actions - len(KINDS)):
            counts[rng.choices(KINDS, weights=(8, 1, 1, 1))[0]] += 1
        return cls(
            seed,
            runner_kills=counts["kill_runner"],
            operator_kills=counts["kill_operator"],
            edits=counts["edit_sql"],
            rewinds=counts["rewind"],
            **settings,
        )

    def schedule(self, rng: random.Random) -> list[str]:
        """The actions in a seeded order."""
        kinds = (
            ["kill_runner"] * self.runner_kills
            + ["kill_operator"] * self.operator_kills
            + ["edit_sql"] * self.edits
            + ["rewind"] * self.rewinds
        )
        rng.shuffle(kinds)
        return kinds


@dataclass
class Chaos:
    """One chaos run: the pipeline applied, the producer, the actions and what they did."""

    plan: ChaosPlan
    cluster: Cluster
    operator: Operator
    bootstrap: str
    say: Callable[[str], None] = lambda _line: None
    threshold: int = 0  # enriched-page-views' filter: duration_ms >= threshold
    rewind_spec: dict[str, Any] | None = None  # the last rewind asked for, kept in the spec
    rewinds: list[Rewound] = field(default_factory=list)  # done, as status recorded them
    actions: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.plan.seed)
        self.kube = Kube(self.cluster.kubeconfig)
        self.admin = KafkaAdmin(self.bootstrap)
        self.clicks = Clicks(self.bootstrap, self.plan.seed, self.plan.rate)
        self.started = time.monotonic()
        self.pending: str | None = None  # a rewind asked for and not done yet

    @property
    def namespace(self) -> str:
        return self.cluster.namespace

    @property
    def state_dir(self) -> Path:
        """Where the operator's local runtime keeps each revision's pid, spec and log."""
        return self.operator.folder / "local"

    def log(self, action: str, **detail: Any) -> None:
        """Record an action with its time since the start (and on the wall clock)."""
        entry = {
            "at": round(time.monotonic() - self.started, 1),
            "wall": datetime.now(UTC).strftime("%H:%M:%S"),
            "action": action,
            **detail,
        }
        self.actions.append(entry)
        self.say(f"[chaos seed={self.plan.seed}] {entry['at']:7.1f}s {action} {detail or ''}")

    def close(self) -> None:
        """Stop the producer (if it runs) and let go of the API client."""
        self.clicks.halt()
        self.kube.close()

    # The pipeline

    def input_log(self) -> dict[str, Any]:
        (log,) = [d for d in yaml.safe_load_all((EXAMPLE / "logs.yaml").read_text()) if d]
        log["spec"]["topicName"] = INPUT_TOPIC
        return dict(log)

    def views(self) -> list[dict[str, Any]]:
        """The example's views as this run applies them (see the module docstring)."""
        text = (EXAMPLE / "views.yaml").read_text()
        assert KEPT in text, f"the example's enriched view no longer filters on {KEPT}"
        text = text.replace(KEPT, f"duration_ms >= {self.threshold}")
        views = [v for v in yaml.safe_load_all(text) if v]
        for view in views:
            spec = view["spec"]
            spec["upgrade"] = {"cutoverWindow": "2s", "cutoverMaxLag": 100, "retireAfter": "2s"}
            spec.setdefault("spark", {})["trigger"] = "2s"
            spec["output"].update(
                log=output_log(view["metadata"]["name"]),
                deletionPolicy="Delete",
                delivery=self.plan.delivery,
            )
            for source in spec["inputs"]:
                if source["log"] == ENRICHED:
                    source["log"] = output_log(ENRICHED)
            if view["metadata"]["name"] == ENRICHED and self.rewind_spec is not None:
                spec["rewind"] = self.rewind_spec
        return views

    def view(self, name: str) -> dict[str, Any]:
        """A view as stored (empty while it does not exist)."""
        return self.kube.get(API, "DerivedView", self.namespace, name) or {}

    def setup(self, timeout: float = 300) -> None:
        """The Log, records arriving, the views applied and each caught up once."""
        self.cluster.apply(self.input_log())
        self.wait("page-views Ready", lambda: self._log_ready(INPUT_LOG), 60)
        self.clicks.start()
        self.cluster.apply(*self.views())
        self.log("applied", views=list(VIEWS), rate=self.plan.rate, delivery=self.plan.delivery)
        self.wait(
            "every view caught up at revision 1, its runner reporting",
            lambda: all(self._reporting(v) for v in VIEWS),
            timeout,
            show=lambda: "; ".join(self.unsettled()),
        )
        self.log("caught up", appended=self.clicks.appended)

    def _reporting(self, name: str) -> bool:
        """The view keeps up, and its runner has reported a batch."""
        view = self.view(name)
        progress = (view.get("status") or {}).get("lastProgress") or {}
        return is_true(view, "CaughtUp") and progress.get("batchId") is not None

    def _log_ready(self, name: str) -> bool:
        return is_true(self.kube.get(API, "Log", self.namespace, name), "Ready")

    # The actions

    def run(self) -> None:
        """The plan's actions in a seeded order, a seeded gap before each."""
        actions = {
            "kill_runner": self.kill_runner,
            "kill_operator": self.kill_operator,
            "edit_sql": self.edit_sql,
            "rewind": self.rewind,
        }
        for kind in self.plan.schedule(self.rng):
            self.pause(self.rng.uniform(*self.plan.gap))
            actions[kind]()

    def pause(self, seconds: float) -> None:
        """Wait, noting a rewind that got done meanwhile."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.note_rewind()
            time.sleep(min(left, 1.0))

    def runners(self) -> list[tuple[str, str, int]]:
        """(view, revision folder, pid) of every runner process of the run's namespace."""
        found = []
        for namespace, name, app in LocalRuntime(self.state_dir).running():
            pid = app.pid()
            if namespace == self.namespace and pid is not None:
                found.append((name, app.folder.name, pid))
        return sorted(found)

    def runner_processes(self) -> list[tuple[str, str, int]]:
        """(view, revision folder, pid) of every live runner process of the namespace, found in
        /proc by the spec file it runs, whether or not a pid file names it: a process the
        runtime lost track of shows here and not in `runners`."""
        root = f"{self.state_dir / self.namespace}/"
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            specs = [a for a in argv if a.startswith(root) and a.endswith("runner-spec.json")]
            # `python -m distributary.runner`, not its keeper (whose argv ends with that)
            if argv[1:3] == ["-m", "distributary.runner"] and specs:
                view, revision = Path(specs[0]).parts[-3:-1]
                found.append((view, revision, int(entry.name)))
        return sorted(found)

    def kill_runner(self) -> None:
        """SIGKILL one runner, its JVM and its Python workers (its own process group)."""
        running = self.runners()
        if not running:
            self.log("kill_runner skipped", why="no runner running")
            return
        view, revision, pid = self.rng.choice(running)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            self.log("kill_runner missed", view=view, revision=revision, pid=pid)
            return
        self.log("kill_runner", view=view, revision=revision, pid=pid)

    def kill_operator(self) -> None:
        """SIGKILL the operator; start it again a few seconds later."""
        down = round(self.rng.uniform(0.5, 5.0), 1)
        self.operator.kill()
        self.log("kill_operator", down_s=down)
        time.sleep(down)
        self.operator.start()
        self.log("operator started")

    def edit_sql(self) -> None:
        """Change the enriched view's filter: it reprocesses beside its serving revision."""
        before = self.threshold
        self.threshold = self.rng.choice([t for t in THRESHOLDS if t != before])
        self.cluster.apply(*[v for v in self.views() if v["metadata"]["name"] == ENRICHED])
        self.log("edit_sql", view=ENRICHED, filter=f"duration_ms >= {self.threshold}", was=before)

    def rewind(self) -> None:
        """Ask for a rewind of the enriched view: while it serves alone, to a moment 10 to 30
        seconds back; while a revision reprocesses (and may not have read that far yet, so a
        rewind to a time would move it forward, skipping records), to the earliest record."""
        back = self.rng.uniform(10.0, 30.0)
        if self.pending is not None:
            self.wait("the last rewind done", lambda: self.note_rewind() is None, 120)
        # A rewind of a revision that has read nothing yet would move nothing back.
        self.wait(f"{ENRICHED}'s current revision reading", lambda: self._read() > 0, 180)
        view = self.view(ENRICHED)
        status = view.get("status") or {}
        current = current_revision(status)
        moment = datetime.fromtimestamp(math.floor(time.time() - back), UTC)
        request = f"chaos-{self.plan.seed}-{len(self.actions)}"
        to: dict[str, str] = {"from": "Timestamp", "timestamp": moment.isoformat()[:19] + "Z"}
        if is_true(view, "Reprocessing") or status.get("servingRevision") != current:
            to = {"from": "Earliest"}
        self.rewind_spec = {"requestId": request, "to": to}
        self.pending = request
        self.cluster.apply(*[v for v in self.views() if v["metadata"]["name"] == ENRICHED])
        self.log("rewind", view=ENRICHED, requestId=request, to=to, revision=current)

    def _read(self) -> int:
        """How many records the enriched view's current revision has read (its group's
        offsets)."""
        current = current_revision(self.view(ENRICHED).get("status") or {})
        try:
            offsets = self.admin.committed(consumer_group(self.namespace, ENRICHED, current))
        except KafkaAdminError:
            return 0
        return sum(sum(partitions.values()) for partitions in offsets.values())

    def note_rewind(self) -> str | None:
        """Record the pending rewind once status says it is done; the one still pending."""
        if self.pending is None:
            return None
        last = (self.view(ENRICHED).get("status") or {}).get("lastRewind") or {}
        if last.get("requestId") != self.pending or last.get("phase") != "Done":
            return self.pending
        if last.get("verified") == "Undone":  # an edit replaced its revision first: no move
            self.log("rewind undone", requestId=self.pending, record=last)
            self.pending = None
            return None
        moves = {
            int(o["partition"]): (int(o.get("fromOffset") or 0), int(o["toOffset"]))
            for o in last.get("offsets") or []
            if o.get("topic") == INPUT_TOPIC
        }
        self.rewinds.append(Rewound(self.pending, int(last["revision"]), moves))
        self.log("rewind done", requestId=self.pending, revision=last["revision"], moves=moves)
        self.pending = None
        return None

    # The end

    def settle(self, timeout: float) -> None:
        """Stop the producer, then wait until every view has settled (`unsettled`)."""
        appended = self.clicks.stop()
        self.log("producer stopped", appended=appended)
        self.wait(
            "every view settled",
            lambda: self.note_rewind() is None and not self.unsettled(),
            timeout,
            show=lambda: "; ".join(self.unsettled()),
        )
        self.log("settled")

    def unsettled(self) -> list[str]:
        """Why each view that has not settled has not (empty: all have)."""
        why = []
        for name in VIEWS:
            view = self.view(name)
            status = view.get("status") or {}
            rows = status.get("revisions") or []
            serving = status.get("servingRevision")
            not_yet = [
                "" if serving else "no serving revision",
                "" if is_true(view, "CaughtUp") else "not CaughtUp",
                "" if is_true(view, "Ready") else "not Ready",
                "Reprocessing" if is_true(view, "Reprocessing") else "",
                f"lag {status.get('lag')}" if status.get("lag") != 0 else "",
                "a pending action" if status.get("pendingAction") else "",
            ]
            app = status.get("sparkApplication") or {}
            if app.get("state") != "RUNNING":
                not_yet.append(f"application {app.get('name')} {app.get('state')}")
            for row in rows:
                if row["revision"] == serving:
                    continue
                if row["phase"] == "CatchingUp":
                    not_yet.append(f"r{row['revision']} CatchingUp, lag {row.get('lag')}")
                elif row["phase"] != "Retired":
                    not_yet.append(f"r{row['revision']} {row['phase']}")
                elif not row.get("topicDeleted"):
                    not_yet.append(f"r{row['revision']} Retired, its topic not deleted yet")
            said = ", ".join(n for n in not_yet if n)
            if said:
                why.append(f"{name}: {said}")
        return why

    def wait(
        self,
        what: str,
        probe: Callable[[], Any],
        timeout: float,
        show: Callable[[], str] = lambda: "",
    ) -> None:
        """Poll `probe` until it holds (noting rewinds meanwhile), or fail saying what and the
        seed."""
        deadline = time.monotonic() + timeout
        while not probe():
            if time.monotonic() > deadline:
                raise ChaosError(
                    self, f"timed out after {timeout:.0f}s waiting for {what}: {show()}"
                )
            time.sleep(1.0)


class ChaosError(AssertionError):
    """The run did not get where it had to; the message names the seed, the actions so far and
    the end of the operator's log."""

    def __init__(self, chaos: Chaos, message: str) -> None:
        super().__init__(
            f"{message}\n{replay(chaos)}\n--- operator log ---\n{chaos.operator.logs()[-6000:]}"
        )


def replay(chaos: Chaos) -> str:
    """How to replay the run, and what it did."""
    lines = [f"  {a}" for a in chaos.actions]
    return (
        f"seed {chaos.plan.seed} (DISTRIBUTARY_TEST_SEED={chaos.plan.seed} replays it; "
        f"bench/chaos --seed {chaos.plan.seed}); actions:\n" + "\n".join(lines)
    )
