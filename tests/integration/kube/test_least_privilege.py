"""The operator with exactly the rights the chart grants, and nothing more, on a real API server.

The operator here is the chart's ServiceAccount (`OPERATOR_RBAC = "chart-cluster"`: the
ClusterRole the chart renders when it watches every namespace, `chart_rbac`), on a control plane
that authorizes with RBAC, and it watches every namespace. It still does its whole job: Logs in
two namespaces become topics, a view becomes a SparkApplication whose driver runs as the drivers'
service account and its output Log, a refused Log gets its Warning event. Then the account is
asked, with its own token, for what the chart does not grant, and refused: Secrets, pods beyond
reading a driver's, deleting namespaces or Logs, editing CRDs, granting itself more. The rights
the chart renders for watching a list of namespaces (a Role in each) are held to the same test:
everything in a listed namespace, nothing in any other and nothing cluster-wide.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.kube.chart_rbac import ChartAccount, can_i, install_chart_rbac
from tests.integration.kube.operator_harness import Cluster, Operator, condition, is_true, waiting
from tests.integration.kube.spark_operator_bed import SPARK_CRDS

from distributary.local.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[3]
SPARK_CRD = SPARK_CRDS  # the release's CRDs, read from the Go module cache
SPARK_APPLICATION = "sparkapplications.sparkoperator.k8s.io"
NAMESPACE = "least-privilege"
OTHER = "least-privilege-other"  # a second pipeline namespace, watched because all are
EXTRA_CRDS = (SPARK_CRD,)
OPERATOR_FLAGS = ("--spark-runtime", "spark-operator", "--image", "registry.example/spark:test")
OPERATOR_RBAC = "chart-cluster"
API = "distributary.dev/v1alpha1"
VIEW = "lp-big"

# (verb, resource, where): what an operator account is never given, wherever it watches.
NEVER: list[tuple[str, str, tuple[str, ...]]] = [
    ("get", "secrets", ("-n", NAMESPACE)),
    ("list", "secrets", ("-n", "kube-system")),
    ("create", "pods", ("-n", NAMESPACE)),
    ("list", "pods", ("-n", NAMESPACE)),
    ("delete", "pods", ("-n", NAMESPACE)),
    ("create", "services", ("-n", NAMESPACE)),
    ("delete", "namespaces", ()),
    ("create", "namespaces", ()),
    ("update", "customresourcedefinitions.apiextensions.k8s.io", ()),
    ("delete", "customresourcedefinitions.apiextensions.k8s.io", ()),
    ("delete", "logs.distributary.dev", ("-n", NAMESPACE)),
    ("delete", "derivedviews.distributary.dev", ("-n", NAMESPACE)),
    ("update", "derivedviews.distributary.dev", ("-n", NAMESPACE)),
    ("create", "derivedviews.distributary.dev", ("-n", NAMESPACE)),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", ()),
    ("create", "rolebindings.rbac.authorization.k8s.io", ("-n", NAMESPACE)),
    ("escalate", "roles.rbac.authorization.k8s.io", ("-n", NAMESPACE)),
    ("impersonate", "serviceaccounts", ("-n", NAMESPACE)),
    ("create", "serviceaccounts/token", ("-n", NAMESPACE)),
    ("create", "leases.coordination.k8s.io", ("-n", NAMESPACE)),
]
# What the operator does in a namespace it watches (a sample of each kind of rule).
IN_A_WATCHED_NAMESPACE: list[tuple[str, str]] = [
    ("watch", "logs.distributary.dev"),
    ("create", "logs.distributary.dev"),
    ("patch", "derivedviews.distributary.dev/status"),
    ("update", "streamjobs.distributary.dev/finalizers"),
    ("create", "events"),
    ("create", "sparkapplications.sparkoperator.k8s.io"),
    ("get", "pods"),
    ("delete", "configmaps"),  # a suspended revision's manifest, once it resumes
]


def log(name: str, **spec: Any) -> dict[str, Any]:
    body = {"partitions": 1, "schema": "user STRING, amount INT", **spec}
    return {"apiVersion": API, "kind": "Log", "metadata": {"name": name}, "spec": body}


BIG = {
    "apiVersion": API,
    "kind": "DerivedView",
    "metadata": {"name": VIEW},
    "spec": {
        "inputs": [{"log": "lp-orders", "alias": "orders"}],
        "sql": "SELECT user, amount FROM orders WHERE amount >= 10",
        "output": {"mode": "append"},
    },
}


@pytest.fixture(scope="module")
def account(operator: Operator) -> ChartAccount:
    """The account the operator runs as: the chart's, with a token of its own."""
    assert operator.kubeconfig is not None
    assert operator.watch_all
    return ChartAccount(NAMESPACE, f"{NAMESPACE}-distributary", operator.kubeconfig, True)


@pytest.fixture(scope="module")
def other(cluster: Cluster) -> Iterator[Cluster]:
    """A second namespace, which only an operator that watches every namespace reconciles."""
    second = Cluster(cluster.kubeconfig, OTHER)
    second.kubectl("create", "namespace", OTHER)
    yield second
    second.kubectl("delete", "namespace", OTHER, "--wait=false")


@pytest.fixture(scope="module")
def list_account(cluster: Cluster, broker: EmbeddedBroker, tmp_path_factory: Any) -> ChartAccount:
    """A second release's account, with the rights the chart renders for watching a list of
    namespaces (only this module's)."""
    return install_chart_rbac(
        cluster,
        tmp_path_factory.mktemp("list-rbac"),
        release=f"{NAMESPACE}-list",
        flags=OPERATOR_FLAGS,
        bootstrap_servers=broker.bootstrap_servers,
        watch_all=False,
    )


def ready(cluster: Cluster, kind: str, name: str) -> bool:
    return is_true(cluster.get(kind, name), "Ready")


def test_logs_in_every_namespace_become_ready(
    cluster: Cluster, other: Cluster, operator: Operator
) -> None:
    cluster.apply(log("lp-orders"))
    other.apply(log("lp-elsewhere"))
    waiting(operator, "Log lp-orders Ready", lambda: ready(cluster, "dlog", "lp-orders"), 90)
    waiting(operator, "Log lp-elsewhere Ready", lambda: ready(other, "dlog", "lp-elsewhere"), 90)


def test_a_view_runs_its_driver_as_the_drivers_account(
    cluster: Cluster, operator: Operator
) -> None:
    cluster.apply(BIG)
    app = waiting(
        operator, "the SparkApplication", lambda: cluster.get(SPARK_APPLICATION, f"{VIEW}-r1")
    )
    assert app["spec"]["driver"]["serviceAccount"] == "distributary-spark"
    child = waiting(operator, "the view's output Log", lambda: cluster.get("dlog", VIEW))
    assert child["metadata"]["ownerReferences"][0]["name"] == VIEW


def test_a_suspended_view_keeps_its_application_beside_it_and_resumes_it(
    cluster: Cluster, operator: Operator
) -> None:
    """The manifest of a suspended revision's SparkApplication waits in a ConfigMap the view
    owns (the chart grants that much), and the application comes back from it on resume."""
    name = f"{VIEW}-r1"
    cluster.apply({**BIG, "spec": {**BIG["spec"], "suspend": True}})
    kept = waiting(
        operator, "the kept manifest", lambda: cluster.get("configmap", f"{name}-suspended")
    )
    assert kept["metadata"]["ownerReferences"][0]["name"] == VIEW
    waiting(operator, "no application", lambda: cluster.get(SPARK_APPLICATION, name) is None)
    said = waiting(
        operator,
        "the view Suspended",
        lambda: (condition(cluster.get("dview", VIEW), "Ready") or {}).get("reason") == "Suspended",
    )
    assert said
    cluster.apply(BIG)
    back = waiting(operator, "the application back", lambda: cluster.get(SPARK_APPLICATION, name))
    assert back["spec"]["driver"]["serviceAccount"] == "distributary-spark"
    waiting(
        operator,
        "the kept manifest gone",
        lambda: cluster.get("configmap", f"{name}-suspended") is None,
    )


def test_a_refused_log_gets_its_condition_and_warning_event(
    cluster: Cluster, operator: Operator
) -> None:
    cluster.apply(log("lp-replicas", replicas=3))  # one broker
    waiting(
        operator,
        "Log lp-replicas Stalled",
        lambda: (
            (condition(cluster.get("dlog", "lp-replicas"), "Stalled") or {}).get("status") == "True"
        ),
        90,
    )
    events = cluster.kubectl(
        "get", "events", "-n", NAMESPACE,
        "--field-selector", "involvedObject.name=lp-replicas,type=Warning", "-o", "name",
    )  # fmt: skip
    assert events.strip(), "no Warning event on Log lp-replicas"


def test_the_operator_log_has_no_refusal(operator: Operator) -> None:
    text = operator.logs(tail=None)  # every start, whole
    assert "Forbidden" not in text, text[-3000:]
    assert " 403" not in text, text[-3000:]


@pytest.mark.parametrize(("verb", "resource", "where"), NEVER, ids=lambda v: str(v))
def test_what_the_chart_does_not_grant_is_refused(
    account: ChartAccount, verb: str, resource: str, where: tuple[str, ...]
) -> None:
    assert not can_i(account, verb, resource, *where)


def test_a_refused_request_is_forbidden_by_the_api_server(account: ChartAccount) -> None:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(account.kubeconfig), "get", "secrets", "-n", "kube-system"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode != 0
    assert "Forbidden" in result.stderr, result.stderr
    assert account.user in result.stderr, result.stderr


@pytest.mark.parametrize(("verb", "resource"), IN_A_WATCHED_NAMESPACE)
def test_watching_all_grants_its_rules_in_every_namespace(
    account: ChartAccount, verb: str, resource: str
) -> None:
    for namespace in (NAMESPACE, OTHER, "default"):
        assert can_i(account, verb, resource, "-n", namespace), namespace
    assert can_i(account, verb, resource, "--all-namespaces")


@pytest.mark.parametrize(("verb", "resource"), IN_A_WATCHED_NAMESPACE)
def test_watching_a_list_grants_its_rules_only_there(
    list_account: ChartAccount, verb: str, resource: str
) -> None:
    assert can_i(list_account, verb, resource, "-n", NAMESPACE)
    assert not can_i(list_account, verb, resource, "-n", OTHER)
    assert not can_i(list_account, verb, resource, "--all-namespaces")


def test_watching_a_list_lists_namespaces_and_nothing_more_cluster_wide(
    list_account: ChartAccount,
) -> None:
    assert can_i(list_account, "watch", "namespaces")
    assert can_i(list_account, "list", "customresourcedefinitions.apiextensions.k8s.io")
    assert not can_i(list_account, "get", "namespaces")  # kopf lists and watches, no more


def test_of_namespaces_only_kube_system_can_be_read_its_uid_naming_the_cluster_in_claims(
    account: ChartAccount, list_account: ChartAccount
) -> None:
    def can_get(holder: ChartAccount, namespace: str) -> bool:
        asked = ["auth", "can-i", "get", f"namespace/{namespace}"]
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(holder.kubeconfig), *asked],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        return result.stdout.strip() == "yes"

    for holder in (account, list_account):
        assert can_get(holder, "kube-system")
        assert not can_get(holder, "default")
        assert not can_get(holder, NAMESPACE)


@pytest.mark.parametrize(("verb", "resource", "where"), NEVER, ids=lambda v: str(v))
def test_watching_a_list_is_refused_the_same(
    list_account: ChartAccount, verb: str, resource: str, where: tuple[str, ...]
) -> None:
    assert not can_i(list_account, verb, resource, *where)
