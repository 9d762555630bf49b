"""Killing the operator at random points and starting it again converges, with no duplicates.

A batch of Logs and DerivedViews (a view of a view among them) is applied, then the operator is
killed with SIGKILL ten times, each after a random delay that falls while creation, a resume or a
deletion is in flight; while it is down the test changes the pipeline (adds a Log and a view,
deletes a Log and views under both deletion policies, grows a Log, retunes a view, changes a
view's query so that a second revision reprocesses and takes over). A change's round first lets
the operator make what the change acts on. Finally every application is set running, as the
Spark operator would, and the namespace must be exactly what the resources say: each Log Ready
with its topic; each view Ready, with one SparkApplication (its serving revision's), one output
Log with one controller serving that revision, each revision once in status and no pending
action; what was deleted is gone with its children, and its topics as its deletion policy says.
Nothing else may be on the broker.

The delays and the order of the changes come from `random.Random(seed)`. The seed is random unless
$CRASH_SEED gives it, and every failure message names it, so `CRASH_SEED=<seed>` replays a run's
kill points (as closely as timing allows). The `spark-operator` runtime runs no Spark, so the test
takes about half a minute.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from tests.integration.kube.operator_harness import Cluster, Operator, is_true, wait_for
from tests.integration.kube.spark_operator_bed import SPARK_CRDS

from distributary.kube.resources import Kube
from distributary.local.broker import EmbeddedBroker
from distributary.plan.applications.runner_spec import dead_letter_topic
from distributary.plan.views.view_plan import SERVING_ANNOTATION, VIEW_LABEL

ROOT = Path(__file__).resolve().parents[3]
SPARK_CRD = SPARK_CRDS  # the release's CRDs, read from the Go module cache
NAMESPACE = "crash-test"
EXTRA_CRDS = (SPARK_CRD,)
OPERATOR_FLAGS = ("--spark-runtime", "spark-operator", "--image", "distributary-spark:test")
API, SPARK_API = "distributary.dev/v1alpha1", "sparkoperator.k8s.io/v1beta2"
SEED = int(os.environ.get("CRASH_SEED") or random.SystemRandom().randrange(2**32))
MAX_DELAY = 3.0  # seconds after a start (or the batch) before the kill


def log(name: str, schema: str, partitions: int = 2, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Log",
        "metadata": {"name": name},
        "spec": {"partitions": partitions, "schema": schema, **spec},
    }


def view(name: str, reads: str, sql: str, **output: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "DerivedView",
        "metadata": {"name": name},
        "spec": {
            "inputs": [{"log": reads, "alias": "src"}],
            "sql": sql,
            "output": {"mode": "append", **output},
        },
    }


CLICKS = log("oc-clicks", "user STRING, amount INT", key=["user"])
ORDERS = log("oc-orders", "id STRING, total INT", partitions=1)
SPARE = log("oc-spare", "id STRING", partitions=1, deletionPolicy="Delete")
LATE = log("oc-late", "id STRING, n INT", partitions=1)
BIG = view(
    "oc-big",
    "oc-clicks",
    "SELECT user, amount FROM src WHERE amount >= 10",
    deletionPolicy="Delete",
)
PER_USER = view(  # a view of a view
    "oc-per-user",
    "oc-big",
    "SELECT user, count(*) AS buys FROM src GROUP BY user",
    mode="upsert",
    key=["user"],
)
BIG_ORDERS = view(
    "oc-big-orders", "oc-orders", "SELECT id, total FROM src WHERE total > 100",
    deletionPolicy="Delete",
)  # fmt: skip
KEPT = view("oc-kept", "oc-clicks", "SELECT user FROM src")  # Retain, the default
LATE_VIEW = view("oc-late-view", "oc-late", "SELECT id, n FROM src WHERE n > 0")
# Reprocessed once: revision 2 catches up (its input is empty), serves, and revision 1 retires
# (its application stopped, its topic kept for an hour).
REQUERIED = view("oc-requeried", "oc-orders", "SELECT id FROM src WHERE total > 1")
REQUERIED["spec"]["upgrade"] = {"cutoverWindow": "1s", "retireAfter": "1h"}
BATCH = (CLICKS, ORDERS, SPARE, BIG, PER_USER, BIG_ORDERS, KEPT, REQUERIED)


class Pipeline:
    """What the namespace should hold: the Logs and views applied and not deleted since, and the
    topics that must be gone or kept."""

    def __init__(self, cluster: Cluster, broker: EmbeddedBroker) -> None:
        self.cluster = cluster
        self.broker = broker
        self.logs = {str(m["metadata"]["name"]): m for m in BATCH if m["kind"] == "Log"}
        self.views = {str(m["metadata"]["name"]): m for m in BATCH if m["kind"] == "DerivedView"}
        self.kept_topics: set[str] = set()  # of deleted views, under Retain
        self.serving = dict.fromkeys(self.views, 1)  # the revision each view ends up serving
        self.changes: list[str] = []

    def apply(self, *manifests: dict[str, Any]) -> None:
        self.cluster.apply(*manifests)
        for manifest in manifests:
            name = str(manifest["metadata"]["name"])
            if manifest["kind"] == "Log":
                self.logs[name] = manifest
            else:
                self.views[name] = manifest
                self.serving.setdefault(name, 1)

    def delete(self, kind: str, name: str) -> None:
        self.cluster.kubectl("delete", kind, name, "-n", NAMESPACE, "--wait=false")
        if kind == "dlog":
            del self.logs[name]
        else:
            removed = self.views.pop(name)
            if removed["spec"]["output"].get("deletionPolicy", "Retain") == "Retain":
                # Those made before the kill: the operator is down, so no more are made now.
                written = {f"{name}.r1", dead_letter_topic(NAMESPACE, name)}
                self.kept_topics |= written & broker_topics(self.broker)

    def topics(self) -> set[str]:
        """Every topic the namespace's resources should have on the broker."""
        topics = {log_topic(m) for m in self.logs.values()} | self.kept_topics
        for name in self.views:
            topics |= {f"{name}.r{r}" for r in range(1, self.serving[name] + 1)}
            topics.add(dead_letter_topic(NAMESPACE, name))
        return topics

    def applications(self) -> set[str]:
        """The SparkApplications that should exist: the serving revision's of each view."""
        return {f"{name}-r{self.serving[name]}" for name in self.views}

    # The changes made while the operator is down, one per round, in a random order.
    def add_a_log_and_its_view(self) -> None:
        self.apply(LATE, LATE_VIEW)

    def delete_an_unread_log_under_delete(self) -> None:
        self.delete("dlog", "oc-spare")

    def delete_a_view_under_delete(self) -> None:
        self.delete("dview", "oc-big-orders")

    def delete_a_view_under_retain(self) -> None:
        self.delete("dview", "oc-kept")

    def grow_a_log_read_by_views(self) -> None:
        self.apply({**CLICKS, "spec": {**CLICKS["spec"], "partitions": 3}})

    def retune_a_view(self) -> None:
        self.apply({**BIG, "spec": {**BIG["spec"], "spark": {"executor": {"instances": 2}}}})

    def requery_a_view(self) -> None:
        spec = {**REQUERIED["spec"], "sql": "SELECT id FROM src WHERE total > 2"}
        self.apply({**REQUERIED, "spec": spec})
        self.serving["oc-requeried"] = 2

    def change_nothing(self) -> None:
        pass


CHANGES: tuple[Callable[[Pipeline], None], ...] = (
    Pipeline.add_a_log_and_its_view,
    Pipeline.delete_an_unread_log_under_delete,
    Pipeline.delete_a_view_under_delete,
    Pipeline.delete_a_view_under_retain,
    Pipeline.grow_a_log_read_by_views,
    Pipeline.retune_a_view,
    Pipeline.requery_a_view,
    *(Pipeline.change_nothing,) * 3,  # more kill points in resumes and in-flight changes
)


# Before a change's round the operator is given time to make what the change acts on (what a
# deletion must then delete or keep): the kill still comes at a random point after that.
MADE_BEFORE: dict[str, tuple[str, ...]] = {
    "delete_an_unread_log_under_delete": ("oc-spare",),
    "delete_a_view_under_delete": (
        "oc-big-orders.r1",
        dead_letter_topic(NAMESPACE, "oc-big-orders"),
    ),
    "delete_a_view_under_retain": ("oc-kept.r1", dead_letter_topic(NAMESPACE, "oc-kept")),
    "requery_a_view": ("oc-requeried.r1",),  # made after revision 1 is recorded in status
}


def log_topic(manifest: dict[str, Any]) -> str:
    return str(manifest["spec"].get("topicName") or manifest["metadata"]["name"])


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> Iterator[Kube]:
    client = Kube(cluster.kubeconfig)
    yield client
    client.close()


def broker_topics(broker: EmbeddedBroker) -> set[str]:
    """This test's topics on the broker: `oc-*` and the namespace's dead-letter topics."""
    listed = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10)
    prefix = dead_letter_topic(NAMESPACE, "oc-")[: -len(".dlq")]
    return {t for t in listed.topics if t.startswith("oc-") or t.startswith(prefix)}


def set_running(kube: Kube, application: dict[str, Any]) -> None:
    """Write a SparkApplication's status as the Spark operator does once the driver runs."""
    name = application["metadata"]["name"]
    state = ((application.get("status") or {}).get("applicationState") or {}).get("state")
    if state == "RUNNING":
        return
    kube.patch_status(
        SPARK_API,
        "SparkApplication",
        NAMESPACE,
        name,
        {
            "applicationState": {"state": "RUNNING"},
            "driverInfo": {"podName": f"{name}-driver", "webUIPort": 4040},
            "sparkApplicationId": f"spark-{name}",
            "submissionAttempts": 1,
            "executionAttempts": 1,
            "lastSubmissionAttemptTime": "2026-11-22T12:00:00Z",
        },
    )


def controllers(resource: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (o["kind"], o["name"], o["uid"])
        for o in resource["metadata"].get("ownerReferences") or []
        if o.get("controller")
    ]


def differences(pipeline: Pipeline, kube: Kube, broker: EmbeddedBroker) -> list[str]:
    """Everything in which the namespace is not (yet) what `pipeline` says; empty: converged.
    Sets every SparkApplication running on the way."""
    found: list[str] = []
    logs = {m["metadata"]["name"]: m for m in kube.list(API, "Log", NAMESPACE)}
    views = {m["metadata"]["name"]: m for m in kube.list(API, "DerivedView", NAMESPACE)}
    apps = {m["metadata"]["name"]: m for m in kube.list(SPARK_API, "SparkApplication", NAMESPACE)}
    for app in apps.values():
        set_running(kube, app)
    children = {name for name, m in logs.items() if VIEW_LABEL in m["metadata"].get("labels", {})}
    if set(logs) != set(pipeline.logs) | set(pipeline.views):
        found.append(f"Logs {sorted(logs)}, expected {sorted({*pipeline.logs, *pipeline.views})}")
    if children != set(pipeline.views):
        found.append(f"output Logs {sorted(children)}, expected {sorted(pipeline.views)}")
    if set(views) != set(pipeline.views):
        found.append(f"views {sorted(views)}, expected {sorted(pipeline.views)}")
    if set(apps) != pipeline.applications():
        expected = sorted(pipeline.applications())
        found.append(f"SparkApplications {sorted(apps)}, expected {expected}")
    for name, manifest in pipeline.logs.items():
        found += log_differences(
            logs.get(name), manifest["spec"]["partitions"], log_topic(manifest)
        )
    for name, manifest in pipeline.views.items():
        serving = pipeline.serving[name]
        app = apps.get(f"{name}-r{serving}")
        found += view_differences(views.get(name), logs.get(name), app, serving)
        executors = manifest["spec"].get("spark", {}).get("executor", {}).get("instances", 1)
        if app is not None and app["spec"]["executor"].get("instances") != executors:
            found.append(f"SparkApplication of {name} has executors {app['spec']['executor']}")
    topics = broker_topics(broker)
    if topics != pipeline.topics():
        missing, extra = pipeline.topics() - topics, topics - pipeline.topics()
        found.append(f"broker topics: missing {sorted(missing)}, extra {sorted(extra)}")
    return found


def log_differences(found: dict[str, Any] | None, partitions: int, topic: str) -> list[str]:
    if found is None:
        return []  # reported with the list of Logs
    name, status = found["metadata"]["name"], found.get("status") or {}
    problems = []
    if not is_true(found, "Ready"):
        problems.append(f"Log {name} not Ready: {status.get('conditions')}")
    if (status.get("topicName"), status.get("partitions")) != (topic, partitions):
        problems.append(
            f"Log {name} status names {status.get('topicName')}/{status.get('partitions')}"
        )
    return problems


def view_differences(
    found: dict[str, Any] | None,
    child: dict[str, Any] | None,
    app: dict[str, Any] | None,
    serving: int,
) -> list[str]:
    if found is None or child is None or app is None:
        return []  # reported with the lists
    name, status = found["metadata"]["name"], found.get("status") or {}
    owner = [("DerivedView", name, found["metadata"]["uid"])]
    problems = []
    if not is_true(found, "Ready"):
        problems.append(f"view {name} not Ready: {status.get('conditions')}")
    if not is_true(child, "Ready"):
        problems.append(
            f"output Log {name} not Ready: {(child.get('status') or {}).get('conditions')}"
        )
    revisions = [(r.get("revision"), r.get("phase")) for r in status.get("revisions") or []]
    expected = [(r, "Retiring") for r in range(1, serving)] + [(serving, "Serving")]
    if revisions != expected or status.get("servingRevision") != serving:
        problems.append(
            f"view {name}: revisions {revisions}, serving {status.get('servingRevision')}"
        )
    if status.get("pendingAction"):
        problems.append(f"view {name}: pendingAction {status['pendingAction']}")
    if (status.get("sparkApplication") or {}).get("name") != f"{name}-r{serving}":
        problems.append(f"view {name}: sparkApplication {status.get('sparkApplication')}")
    topic = (child.get("status") or {}).get("topicName")
    annotation = child["metadata"].get("annotations", {}).get(SERVING_ANNOTATION)
    if (topic, annotation) != (f"{name}.r{serving}", str(serving)):
        problems.append(f"output Log {name} serves {topic} (annotation {annotation})")
    for what, resource in (("output Log", child), ("SparkApplication", app)):
        if controllers(resource) != owner or len(resource["metadata"]["ownerReferences"]) != 1:
            refs = resource["metadata"].get("ownerReferences")
            problems.append(f"{what} of view {name} is owned by {refs}")
    if child["metadata"].get("labels", {}).get(VIEW_LABEL) != name:
        problems.append(f"output Log {name} labelled {child['metadata'].get('labels')}")
    return problems


def test_killing_the_operator_at_random_points_converges(
    cluster: Cluster, operator: Operator, kube: Kube, broker: EmbeddedBroker
) -> None:
    rng = random.Random(SEED)
    changes = list(CHANGES)
    rng.shuffle(changes)
    pipeline = Pipeline(cluster, broker)

    def waiting(what: str, probe: Callable[[], Any], timeout: float) -> None:
        try:
            wait_for(what, probe, timeout)
        except AssertionError as exc:
            left = "\n  ".join(differences(pipeline, kube, broker))
            raise AssertionError(
                f"CRASH_SEED={SEED}: {exc}\nRounds: {'; '.join(pipeline.changes)}\n"
                f"Differences:\n  {left}\n--- operator logs ---\n{operator.logs()}"
            ) from None

    pipeline.apply(*BATCH)
    for change in changes:
        made = MADE_BEFORE.get(change.__name__, ())
        waiting(
            f"{', '.join(made)} made before {change.__name__}",
            lambda made=made: set(made) <= broker_topics(broker),
            timeout=45,
        )
        delay = rng.uniform(0, MAX_DELAY)
        time.sleep(delay)
        operator.kill()
        change(pipeline)
        pipeline.changes.append(f"killed after {delay:.2f}s, then {change.__name__}")
        operator.start()
    waiting("the namespace to converge", lambda: not differences(pipeline, kube, broker), 60)
