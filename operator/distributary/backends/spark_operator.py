"""The `spark-operator` Spark runtime: each revision a Kubeflow `SparkApplication`.

The Spark operator makes the driver and executors; Distributary applies the SparkApplication
(owned by its view or job, so the garbage collector removes it with its owner), reads its state
from `status.applicationState`, and deletes it to stop a revision. Under the operator, an
application is read from what its watch saw last (`WatchedApplications`), and from the API
server only when the watch does not hold it. An observe round over many running views reads
each application once and writes nothing: starting one applies the manifest
only when the application last read lacks part of it. Of an application submitted whose driver
does not run, the driver pod is read too, to say why it cannot start
(`plan.applications.driver_pods`): the Spark operator reports only SUBMITTED meanwhile, and the
cluster, not the application, is to be fixed, so nothing is deleted or restarted for it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from distributary.api import owner_of
from distributary.api.job import StreamJob
from distributary.api.view import DerivedView
from distributary.backends.base import Owner, RevisionApp
from distributary.kube.resources import Kube
from distributary.plan.access.kafka_secrets import KafkaSecretMounts, with_kafka_secrets
from distributary.plan.applications.checkpoint_storage import CheckpointClaim
from distributary.plan.applications.children import holds
from distributary.plan.applications.driver_pods import driver_not_starting
from distributary.plan.applications.runner_spec import RunnerSpec
from distributary.plan.applications.spark import (
    DEFAULT_SERVICE_ACCOUNT,
    SPARK_APPLICATION_API_VERSION,
    Application,
    application_name,
    driver_pod_name,
    label_value,
    spark_application,
    with_checkpoint_claim,
    with_service_account,
)
from distributary.plan.applications.spark_state import (
    DRIVER_PENDING,
    AppState,
    spark_application_state,
)

KIND = "SparkApplication"
# Seconds an application applied afresh waits for the driver pod its deleted predecessor left
# (the garbage collector removes it): a pod of that name makes the Spark operator's submission
# fail, which would count as one more failure. After that, it is applied anyway.
DRIVER_GONE_WAIT = 15.0
DRIVER_GONE_POLL = 0.5
KEPT = ("apiVersion", "kind", "spec", "status")  # of an application the watch saw
KEPT_METADATA = ("name", "namespace", "labels", "annotations", "ownerReferences", "resourceVersion")


SUSPENDED_KEY = "sparkapplication.json"  # the manifest a suspended revision's ConfigMap keeps


def suspended_name(application: str) -> str:
    """The ConfigMap that keeps a suspended revision's SparkApplication manifest."""
    return f"{application}-suspended"


def _older(meta: Mapping[str, Any], than: Mapping[str, Any]) -> bool:
    """Whether the object version `meta` names came before `than`'s (versions the API server
    gives as numbers are compared as numbers; others are taken as they come)."""
    mine, theirs = str(meta.get("resourceVersion") or ""), str(than.get("resourceVersion") or "")
    return mine.isdigit() and theirs.isdigit() and int(mine) < int(theirs)


class WatchedApplications:
    """The SparkApplications as the operator's watch last saw them, by (namespace, name): what a
    reconcile reads instead of asking the API server again. Only what was seen is trusted: an
    application it does not hold (not seen yet, or deleted) is read from the API server, so a
    watch that lags can cost a read, never a wrong answer for long (every change of state is
    seen, and reconciles its owner again)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], dict[str, Any]] = {}

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The application as last seen, or None when it is not held."""
        return self._seen.get((namespace, name))

    def state(self, namespace: str, name: str) -> str | None:
        """The state of the application as last seen (None: not held)."""
        app = self._seen.get((namespace, name))
        return None if app is None else spark_application_state(app).state

    def saw(self, app: Mapping[str, Any]) -> str | None:
        """Hold `app` (as a watch event or a write's answer has it); the state it had before,
        or None when it was not held."""
        meta = app.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        before = self.state(*key)
        held = self._seen.get(key)
        if held is not None and _older(meta, held["metadata"]):
            return before  # an event from before a write whose answer is held already
        kept: dict[str, Any] = {k: app[k] for k in KEPT if k in app}
        kept["metadata"] = {k: meta[k] for k in KEPT_METADATA if k in meta}
        self._seen[key] = kept
        return before

    def gone(self, namespace: str, name: str) -> None:
        """The application was deleted."""
        self._seen.pop((namespace, name), None)


def as_applied(app: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The manifest that made the SparkApplication `app` as read (its spec, names, labels and
    owner; not what the API server and the Spark operator added), to apply it again."""
    if app is None:
        return None
    meta = app["metadata"]
    kept = ("name", "namespace", "labels", "annotations", "ownerReferences")
    return {
        "apiVersion": app["apiVersion"],
        "kind": app["kind"],
        "metadata": {k: meta[k] for k in kept if k in meta},
        "spec": app["spec"],
    }


class SparkOperatorRuntime:
    """Runs revisions as SparkApplications through `kube`; views' default job image `image`;
    `claim`, when given, mounted into every driver and executor (where checkpoints go); every
    driver runs as `service_account` of its namespace."""

    def __init__(
        self,
        kube: Kube,
        image: str,
        claim: CheckpointClaim | None = None,
        service_account: str = DEFAULT_SERVICE_ACCOUNT,
        kafka_secrets: KafkaSecretMounts | None = None,
        watched: WatchedApplications | None = None,
    ) -> None:
        self.kube = kube
        self.watched = watched  # the operator's watch of the applications, when it has one
        self.image = image
        self.claim = claim
        self.service_account = service_account
        self.kafka_secrets = kafka_secrets  # Secrets the drivers' Kafka credentials come from

    def view_app(self, view: DerivedView, runner: RunnerSpec) -> RevisionApp:
        """The view revision's SparkApplication, with the job image unless the spec names one."""
        name = application_name(view.metadata.name, runner.revision)
        manifest = spark_application(
            runner, view.spec.spark, image=self.image, owner=owner_of(view)
        )
        return self._app(view.metadata.namespace, name, runner.revision, lambda: manifest)

    def job_app(
        self,
        job: StreamJob,
        revision: int,
        launch: Application | None,
        manifest: dict[str, Any] | None,
    ) -> RevisionApp:
        """The job revision's SparkApplication, `manifest` (None: left as it is)."""
        name = application_name(job.metadata.name, revision, "StreamJob")
        return self._app(job.metadata.namespace, name, revision, lambda: manifest)

    def _driver(self, namespace: str, name: str, revision: int, app: AppState) -> AppState:
        """`app`, with why its driver pod cannot start when it was submitted and does not run
        (the pod read only then: one read per reconcile of a starting application)."""
        if app.state not in DRIVER_PENDING:
            return app
        pod = self.kube.get("v1", "Pod", namespace, driver_pod_name(name))
        return replace(app, not_starting=driver_not_starting(pod, revision))

    def _app(
        self,
        namespace: str,
        name: str,
        revision: int,
        manifest: Callable[[], dict[str, Any] | None],
    ) -> RevisionApp:
        read: dict[str, Any] = {}

        def state() -> AppState:
            held = self.watched.get(namespace, name) if self.watched is not None else None
            if held is None:
                held = self.kube.get(SPARK_APPLICATION_API_VERSION, KIND, namespace, name)
            read["app"] = held
            seen = self._driver(namespace, name, revision, spark_application_state(read["app"]))
            read["state"] = seen
            return seen

        def start() -> AppState:
            # None: a refused edit; an application that ended runs on as it was applied.
            wanted = manifest() or as_applied(read.get("removed"))
            if wanted is None:
                return state()
            wanted = with_service_account(wanted, self.service_account)
            if self.claim is not None:
                wanted = with_checkpoint_claim(wanted, self.claim)
            if self.kafka_secrets is not None:
                wanted = with_kafka_secrets(wanted, self.kafka_secrets)
            current = read.pop("app", None)
            if current is not None and holds(current, wanted):
                seen: AppState = read.pop("state", None) or spark_application_state(current)
                return seen
            if current is None:
                self._await_driver_gone(namespace, name)
            # The applied object carries the Spark operator's status: no second read needed.
            answer = self.kube.apply(wanted)
            if self.watched is not None:  # the watch sees it next: no news to act on then
                self.watched.saw(answer)
            return self._driver(namespace, name, revision, spark_application_state(answer))

        def remove() -> None:
            removed = read.pop("app", None)
            read.pop("state", None)
            if removed is not None:
                read["removed"] = removed
            self._delete(namespace, name)

        return RevisionApp(namespace, name, state, start, remove)

    def _await_driver_gone(self, namespace: str, name: str) -> None:
        """Wait, `DRIVER_GONE_WAIT` at most, until no driver pod of application `name` is left
        (one of a deleted application of the same name, as a restart leaves it)."""
        deadline = time.monotonic() + DRIVER_GONE_WAIT
        while self.kube.get("v1", "Pod", namespace, driver_pod_name(name)) is not None:
            if time.monotonic() >= deadline:
                return
            time.sleep(DRIVER_GONE_POLL)

    def keep(self, owner: Owner, revisions: Sequence[int]) -> None:
        """Nothing for a SparkApplication, which runs on until it is deleted; one `suspend`
        deleted is applied again from the manifest it kept."""
        for revision in revisions:
            name = application_name(owner.name, revision, owner.kind)
            if self.watched is not None and self.watched.get(owner.namespace, name) is not None:
                continue  # it runs (the watch holds it): nothing was suspended
            kept = self.kube.get("v1", "ConfigMap", owner.namespace, suspended_name(name))
            if kept is None:
                continue
            # Never over an application that runs (one a resume made already, as its view's
            # spec says): the kept manifest is then only left over.
            if self.kube.get(SPARK_APPLICATION_API_VERSION, KIND, owner.namespace, name) is None:
                answer = self.kube.apply(json.loads(kept["data"][SUSPENDED_KEY]))
                if self.watched is not None:
                    self.watched.saw(answer)
            self.kube.delete("v1", "ConfigMap", owner.namespace, suspended_name(name))

    def suspend(self, owner: Owner, revisions: Sequence[int]) -> list[int]:
        """Delete the revisions' SparkApplications, each one's manifest kept first in a
        ConfigMap beside it (owned by the view or job, so it goes with it) for `keep`."""
        for revision in revisions:
            name = application_name(owner.name, revision, owner.kind)
            held = self.watched.get(owner.namespace, name) if self.watched is not None else None
            app = held or self.kube.get(SPARK_APPLICATION_API_VERSION, KIND, owner.namespace, name)
            manifest = as_applied(app)
            if manifest is None:
                continue
            meta = manifest["metadata"]
            self.kube.apply(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": suspended_name(name),
                        "namespace": owner.namespace,
                        "labels": meta.get("labels") or {},
                        "ownerReferences": meta.get("ownerReferences") or [],
                    },
                    "data": {SUSPENDED_KEY: json.dumps(manifest, sort_keys=True)},
                }
            )
        return self.stop(owner, revisions)

    def stop(self, owner: Owner, revisions: Sequence[int]) -> list[int]:
        """Delete the revisions' SparkApplications; those that existed."""
        return [
            revision
            for revision in revisions
            if self._delete(owner.namespace, application_name(owner.name, revision, owner.kind))
        ]

    def _delete(self, namespace: str, name: str) -> bool:
        """Delete the SparkApplication; whether it existed."""
        if self.watched is not None:
            self.watched.gone(namespace, name)
        return bool(self.kube.delete(SPARK_APPLICATION_API_VERSION, KIND, namespace, name))

    def stopped(self, owner: Owner, revision: int) -> bool:
        """The SparkApplication is gone and so is its driver pod (deleted with the application
        by the Spark operator, after the pod's grace period): no driver can commit any more."""
        name = application_name(owner.name, revision, owner.kind)
        app = self.kube.get(SPARK_APPLICATION_API_VERSION, KIND, owner.namespace, name)
        if app is not None:
            return False
        return self.kube.get("v1", "Pod", owner.namespace, driver_pod_name(name)) is None

    def retire_others(self, owner: Owner, keep: int) -> list[str]:
        """Delete the job's SparkApplications of every revision but `keep`, found by label."""
        selector = f"distributary.dev/job={label_value(owner.name)}"
        stopped = []
        for item in self.kube.list(SPARK_APPLICATION_API_VERSION, KIND, owner.namespace, selector):
            meta = item["metadata"]
            if (meta.get("labels") or {}).get("distributary.dev/revision") != str(keep):
                self._delete(owner.namespace, meta["name"])
                stopped.append(str(meta["name"]))
        return stopped

    def orphans(self, namespace: str | None, alive: set[tuple[str, str, str]]) -> list[str]:
        """Nothing: an application is owned by its view or job, and goes with it."""
        return []

    def watches_applications(self) -> bool:
        """SparkApplications are API objects: their state changes are watched."""
        return True
