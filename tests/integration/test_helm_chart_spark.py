"""The chart, for what Spark drivers and the operator's environment need, checked by the real helm.

Two promises. Every environment variable the chart gives the operator is one the operator reads:
the names it reads are taken from the code (the `distributary operator` command's options and
what `OperatorSettings.from_environment` reads), so a value rendered into a variable nobody reads
fails here instead of being silently ignored. And the chart can make the Spark drivers' service
account in each pipeline namespace, with a Role that lets a driver run its executors in its own
namespace and nothing more.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from tests.integration.test_helm_chart import (
    FULLNAME,
    NAMESPACE,
    SPARK_ACCOUNT,
    Manifest,
    container,
    plain_env,
    render,
    rules_of,
)

from distributary.cli.operator import operator
from distributary.controllers import settings

DRIVER_RESOURCES = ("pods", "services", "configmaps", "persistentvolumeclaims")
DRIVER_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
# Values that turn on every variable the chart can render (extraEnv aside: the user's own).
EVERY_SETTING: Manifest = {
    "strimzi": {"namespace": "kafka"},
    "spark": {"driverServiceAccount": {"name": "spark"}},
    "checkpoints": {"allowNodeLocal": True},
    "allowSqlFunctions": ["reflect"],
    "kafka": {
        "securityProtocol": "SASL_SSL",
        "sasl": {
            "mechanism": "SCRAM-SHA-512",
            "username": "alice",
            "passwordSecret": {"name": "alice"},
        },
        "tls": {"caSecret": {"name": "ca"}, "clientSecret": {"name": "alice-tls"}},
    },
}


def read_by_the_operator() -> set[str]:
    """The environment variables the operator reads: its command's options' and the ones
    `OperatorSettings.from_environment` reads itself (found in its source)."""
    names = {param.envvar for param in operator.params if isinstance(param.envvar, str)}
    names |= set(settings.KAFKA_ENVIRONMENT)
    source = inspect.getsource(settings.OperatorSettings.from_environment)
    names |= set(re.findall(r'env\.get\("([A-Z_]+)"', source))
    return names


def env_names(objects: list[Manifest]) -> set[str]:
    return {item["name"] for item in container(objects)["env"]}


def test_the_operators_names_are_found_in_the_code() -> None:
    names = read_by_the_operator()
    # One of each source, so a change in how they are found cannot empty the list unseen.
    assert {
        "DISTRIBUTARY_RESTART_DELAY",
        "DISTRIBUTARY_KAFKA_SASL_PASSWORD",
        "DISTRIBUTARY_STRIMZI_NAMESPACE",
    } <= names


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({}, id="defaults"),
        pytest.param(EVERY_SETTING, id="every-setting"),
        pytest.param(
            {
                "topicBackend": "direct",
                "sparkRuntime": "local",
                "kafka": {"bootstrapServers": "b1:9092"},
                "watchNamespaces": ["team-a"],
            },
            id="direct+local+namespace",
        ),
    ],
)
def test_every_variable_the_chart_renders_is_read(
    helm: str, tmp_path: Path, values: Manifest
) -> None:
    unread = env_names(render(helm, tmp_path, values)) - read_by_the_operator()
    assert not unread, f"the chart renders variables the operator never reads: {sorted(unread)}"


def test_the_drivers_account_is_passed_to_the_operator(helm: str, tmp_path: Path) -> None:
    env = plain_env(render(helm, tmp_path, EVERY_SETTING))
    assert env["DISTRIBUTARY_SPARK_SERVICE_ACCOUNT"] == "spark"


def driver_objects(objects: list[Manifest], account: str) -> dict[str, dict[str, Manifest]]:
    """The drivers' ServiceAccounts, Roles and RoleBindings named `account`, by kind and
    namespace."""
    found: dict[str, dict[str, Manifest]] = {}
    for o in objects:
        if o["metadata"]["name"] == account and o["kind"] != "Deployment":
            found.setdefault(o["kind"], {})[o["metadata"]["namespace"]] = o
    return found


def assert_a_drivers_rights(found: dict[str, dict[str, Manifest]], account: str) -> None:
    for namespace, role in found["Role"].items():
        assert rules_of(role) == {
            ("", resource, verb) for resource in DRIVER_RESOURCES for verb in DRIVER_VERBS
        }
        binding = found["RoleBinding"][namespace]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": account,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": namespace}
        ]


def test_by_default_the_drivers_account_is_made_in_the_release_namespace(
    helm: str, tmp_path: Path
) -> None:
    found = driver_objects(render(helm, tmp_path), SPARK_ACCOUNT)
    assert {kind: set(by_namespace) for kind, by_namespace in found.items()} == {
        kind: {NAMESPACE} for kind in ("ServiceAccount", "Role", "RoleBinding")
    }
    assert_a_drivers_rights(found, SPARK_ACCOUNT)


def test_the_drivers_account_is_made_in_each_watched_namespace(helm: str, tmp_path: Path) -> None:
    values = {
        "watchNamespaces": ["team-a", "team-b"],
        "spark": {"driverServiceAccount": {"name": "spark"}},
    }
    found = driver_objects(render(helm, tmp_path, values), "spark")
    assert {kind: set(by_namespace) for kind, by_namespace in found.items()} == {
        kind: {"team-a", "team-b"} for kind in ("ServiceAccount", "Role", "RoleBinding")
    }
    assert_a_drivers_rights(found, "spark")
    # The operator's own rights are elsewhere: the drivers' Role is bound to the drivers only.
    assert FULLNAME not in {s["name"] for b in found["RoleBinding"].values() for s in b["subjects"]}


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"spark": {"driverServiceAccount": {"create": False}}}, id="not-asked"),
        pytest.param({"sparkRuntime": "local"}, id="local-runtime"),
    ],
)
def test_no_drivers_account_when_not_asked_or_no_drivers(
    helm: str, tmp_path: Path, values: Manifest
) -> None:
    assert not driver_objects(render(helm, tmp_path, values), SPARK_ACCOUNT)


def test_without_rbac_only_the_account_is_made(helm: str, tmp_path: Path) -> None:
    found = driver_objects(render(helm, tmp_path, {"rbac": {"create": False}}), SPARK_ACCOUNT)
    assert set(found) == {"ServiceAccount"}
