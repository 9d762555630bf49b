"""The arguments and options several commands share, declared once so they read the same in
every command's --help.

An option one command alone takes stays with that command; only what two or more commands take
is here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from distributary.api.names import DEFAULT_TOPIC_NAMES, use_topic_names
from distributary.kafka.connection import read_properties_file
from distributary.local.state import DEFAULT_STATE_DIR
from distributary.plan.access.kafka_connection import KafkaSecurity
from distributary.plan.applications.restarts import (
    FAILURE_WINDOW,
    FAILURES_BEFORE_STALLED,
    FIRST_DELAY,
    MAX_DELAY,
    STABLE_AFTER,
    RestartPolicy,
)

F = TypeVar("F", bound=Callable[..., Any])

PIPELINE_PATHS = click.argument(
    "paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path)
)
"""The pipeline's YAML files or folders (validate, plan, graph, run)."""


def _use_topic_names(_context: click.Context, _param: click.Parameter, template: str) -> str:
    try:
        use_topic_names(template)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return template


TOPIC_NAMES = click.option(
    "--topic-names",
    default=DEFAULT_TOPIC_NAMES,
    show_default=True,
    envvar="DISTRIBUTARY_TOPIC_NAMES",
    expose_value=False,
    callback=_use_topic_names,
    help="How Logs without spec.topicName name their topics, as the operator's --topic-names "
    "does: {name}, or e.g. '{namespace}.{name}' on a Kafka cluster shared by teams.",
)
"""The operator's topic naming, for previews that agree with it (plan, validate)."""


KAFKA_CONFIG = click.option(
    "--kafka-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="A Kafka client properties file, as kafka-console-producer --command-config takes: "
    "security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.* and ssl.keystore.* "
    "(PEM). Its bootstrap.servers is used unless --bootstrap-servers is given.",
)
"""How to reach a secured Kafka (run, produce, tail, wait)."""


def kafka_connection(
    kafka_config: Path | None, bootstrap_servers: str | None
) -> tuple[str | None, KafkaSecurity | None]:
    """The bootstrap servers (given, else the properties file's) and the connection model of
    --kafka-config (None without one: plaintext)."""
    if kafka_config is None:
        return bootstrap_servers, None
    security, named = read_properties_file(kafka_config)
    return bootstrap_servers or named, security


def run_state_options(func: F) -> F:
    """--state-dir, --bootstrap-servers, --kafka-config and --pipeline: where a command that
    reads or writes a log finds the log, its serving topic and the broker (produce, tail)."""
    options = [
        click.option(
            "--state-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=DEFAULT_STATE_DIR,
            show_default=True,
            help="The state folder of `distributary run` (its run.json and embedded broker).",
        ),
        click.option(
            "--bootstrap-servers",
            default=None,
            metavar="HOST:PORT",
            help="The Kafka cluster; default: the one the running `distributary run` uses.",
        ),
        KAFKA_CONFIG,
        click.option(
            "--pipeline",
            "pipeline_paths",
            multiple=True,
            type=click.Path(exists=True, path_type=Path),
            help="Pipeline files or folders; default: those the running `distributary run` read.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


_RESTART_OPTIONS = (
    click.option(
        "--restart-delay",
        type=click.FloatRange(min=0.1),
        default=FIRST_DELAY,
        show_default=True,
        envvar="DISTRIBUTARY_RESTART_DELAY",
        help="Seconds before what ended in failure (a Spark application, a Source's connector, "
        "a Sink's process) is started again after a first failure; doubled for each failure "
        "in a row, up to --max-restart-delay.",
    ),
    click.option(
        "--max-restart-delay",
        type=click.FloatRange(min=0.1),
        default=MAX_DELAY,
        show_default=True,
        envvar="DISTRIBUTARY_MAX_RESTART_DELAY",
        help="The longest wait before a restart; every retry waits this long once Stalled.",
    ),
    click.option(
        "--stable-after",
        type=click.FloatRange(min=0),
        default=STABLE_AFTER,
        show_default=True,
        envvar="DISTRIBUTARY_STABLE_AFTER",
        help="Seconds a restarted part runs before its earlier failures are forgiven (the "
        "back-off starts over, Stalled clears).",
    ),
    click.option(
        "--failure-window",
        type=click.FloatRange(min=1),
        default=FAILURE_WINDOW,
        show_default=True,
        envvar="DISTRIBUTARY_FAILURE_WINDOW",
        help="Seconds in which --failures-before-stalled failures make a resource Stalled.",
    ),
    click.option(
        "--failures-before-stalled",
        type=click.IntRange(min=1),
        default=FAILURES_BEFORE_STALLED,
        show_default=True,
        envvar="DISTRIBUTARY_FAILURES_BEFORE_STALLED",
        help="Failures within --failure-window that make a resource Stalled (ApplicationFailing).",
    ),
)


def RESTART_POLICY(command: F) -> F:  # noqa: N802 (a decorator, named as the other options)
    """The restart policy's five options, given to the command as one `restart_policy`
    (operator, run)."""

    @functools.wraps(command)
    def with_policy(**given: Any) -> Any:
        first = given.pop("restart_delay")
        policy = RestartPolicy(
            first_delay=first,
            max_delay=max(given.pop("max_restart_delay"), first),
            stable_after=given.pop("stable_after"),
            window=given.pop("failure_window"),
            failures_before_stalled=given.pop("failures_before_stalled"),
        )
        return command(**given, restart_policy=policy)

    decorated: Any = with_policy
    for option in reversed(_RESTART_OPTIONS):
        decorated = option(decorated)
    return cast(F, decorated)
