"""A log as a person names it on the command line: the Log, its serving topic, the broker.

A person names a log, not a topic or a broker: the Log comes from the pipeline files (`--pipeline`,
else the files the running `distributary run` reads), and its serving topic and the broker from
the run-state file that run keeps (`<state dir>/run.json`), because a view's output is served from
a revision's topic only the run knows. `produce`, `tail` and `wait --state-dir` find them here, so
a log that is not there is refused with the same message whichever command named it.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator, Sequence
from pathlib import Path

import click

from distributary.api.log import Log
from distributary.cli.errors import UserError
from distributary.graph import Pipeline, Ref, load_pipeline
from distributary.kafka.cluster import cluster_ready
from distributary.kafka.connection import check_connection
from distributary.kafka.records import MissingTopicError
from distributary.local.broker import EmbeddedBroker
from distributary.local.state import RunState
from distributary.plan.access.kafka_connection import KafkaSecurity


def pipeline_for(paths: Sequence[Path], state: RunState | None) -> Pipeline:
    """The pipeline in `paths`, else in the files the run recorded in `state` reads."""
    if not paths and (state is None or not state.paths):
        raise UserError(
            "no pipeline to find the log in: pass --pipeline PATH (the pipeline's YAML files or "
            "folder), or start `distributary run PATH` (other commands read its run state)"
        )
    return load_pipeline(paths or (state.paths if state else ()))


def find_log(pipeline: Pipeline, given: str, state: RunState | None) -> tuple[Ref, Log]:
    """The Log named `given` (NAME or NAMESPACE/NAME), or a UserError naming the nearest one."""
    namespace, _, name = given.rpartition("/")
    found = [r for r in pipeline.logs if r.name == name and namespace in ("", r.namespace)]
    served = state.logs.get(name) if state else None
    if len(found) > 1 and served is not None:
        found = [r for r in found if r.namespace == served.namespace]
    if len(found) == 1:
        return found[0], pipeline.logs[found[0]]
    if found:
        spaces = ", ".join(sorted(r.namespace for r in found))
        raise UserError(f"Log {name!r} is in namespaces {spaces}: write NAMESPACE/{name}")
    names = sorted({r.name for r in pipeline.logs})
    near = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    problems = (
        f"; the pipeline has {len(pipeline.problems)} problem(s)" if pipeline.problems else ""
    )
    raise UserError(
        f"no Log {given!r} in the pipeline{hint}{problems}: its logs are "
        f"{', '.join(names) or '(none)'}"
    )


def serving_topic(ref: Ref, log: Log, state: RunState | None) -> str:
    """The topic the log is read from: the one the run recorded, else the Log's own."""
    recorded = state.serving_topic(ref.name, ref.namespace) if state else None
    return recorded or log.topic


def _no_broker(state: RunState | None, state_dir: Path) -> UserError:
    if state is None:
        return UserError(
            f"no Kafka broker to use: no `distributary run` has recorded one in {state_dir}; "
            "start `distributary run PATH`, or pass --bootstrap-servers HOST:PORT"
        )
    return UserError(
        f"the `distributary run` recorded in {state_dir} (pid {state.pid}) has stopped and its "
        f"broker at {state.bootstrap_servers} does not answer: start `distributary run` again, "
        "or pass --bootstrap-servers HOST:PORT"
    )


@contextlib.contextmanager
def run_broker(
    given: str | None,
    state: RunState | None,
    state_dir: Path,
    *,
    may_start: bool,
    security: KafkaSecurity | None = None,
) -> Iterator[str]:
    """The bootstrap servers to use; with `may_start`, the stopped run's embedded broker.
    With `security` (a secured Kafka), a refused password or certificate is said at once."""
    if given:
        if security is not None:
            check_connection(given, security)
        yield given
    elif state is not None and security is not None:
        check_connection(state.bootstrap_servers, security)
        yield state.bootstrap_servers
    elif state is not None and (state.alive() or cluster_ready(state.bootstrap_servers)):
        yield state.bootstrap_servers
    elif may_start and (state_dir / "kafka" / "data" / "meta.properties").exists():
        click.echo(
            f"no `distributary run` is running in {state_dir}: starting its embedded broker "
            f"({state_dir / 'kafka'}) to read, and stopping it after",
            err=True,
        )
        broker = EmbeddedBroker(state_dir / "kafka").start()
        try:
            yield broker.bootstrap_servers
        finally:
            broker.stop()
    else:
        raise _no_broker(state, state_dir)


def missing_topic(exc: MissingTopicError, name: str, derived: bool) -> UserError:
    """The error for a log whose topic does not exist yet, saying how it comes to exist."""
    fix = (
        "start `distributary run` so the view runs and the run state names its serving topic"
        if derived
        else "start `distributary run` for the pipeline (it creates the topics)"
    )
    return UserError(f"Log {name!r}: {exc}: {fix}")
