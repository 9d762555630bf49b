"""The Spark planner: the Spark application that runs a view's or job's revision.

The runner spec (`plan.applications.runner_spec`) drives both runtimes:
`spark_application` wraps it in a Kubeflow `SparkApplication` (as JSON in the arguments) and
`local_submit` in a spark-submit command line (as a file). A user's `StreamJob` runs its own
code instead, and gets the same facts (topics, checkpoint, consumer group) as environment variables.

Names derived from a view or job (consumer group, checkpoint, dead-letter topic, application name)
are functions of the namespace, the name and the revision only, so every component computes them
alike and a restarted operator finds what it started.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from distributary.api.common import PodVolume, SparkPod, SparkPods, SparkSettings
from distributary.api.job import StreamJob
from distributary.api.log import Log
from distributary.api.names import label_value as label_value
from distributary.api.names import name_digest
from distributary.plan.access.kafka_connection import SECURITY_VARIABLE, KafkaSecurity
from distributary.plan.applications.checkpoint_storage import CheckpointClaim
from distributary.plan.applications.runner_spec import (
    SPEC_FILE_ARG,
    SPEC_JSON_ARG,
    RunnerOutput,
    RunnerSpec,
    checkpoint_location,
    consumer_group,
    dead_letter_topic,
    log_partitions,
    merged_conf,
    reading_topic,
    runner_input,
    starting_position,
)

RUNNER_FILE = "local:///opt/distributary/runner.py"  # provided by the job image
SPARK_VERSION = "4.1.1"
SPARK_APPLICATION_API_VERSION = "sparkoperator.k8s.io/v1beta2"
MANAGED_BY = {"app.kubernetes.io/managed-by": "distributary"}
# The operator names a Service `<app>-ui-svc` and a pod `<app>-driver`, and puts the name in
# labels; all must fit in 63 characters, so an application name is at most 63 - 7.
MAX_APPLICATION_NAME = 56
CHECKPOINT_VOLUME = "distributary-checkpoints"
SPARK_GROUP = 185  # the job image's spark user (and group)
# The service account drivers run as when the operator is told none (the chart makes it).
DEFAULT_SERVICE_ACCOUNT = "distributary-spark"


@dataclass(frozen=True)
class LocalCommand:
    """A command for the local runtime: argv, and the variables to add to the environment."""

    argv: tuple[str, ...]
    env: Mapping[str, str]


def driver_pod_name(application: str) -> str:
    """The driver pod the Spark operator makes for SparkApplication `application` (its default
    name: the manifests set no `spec.driver.podName`)."""
    return f"{application}-driver"


def application_name(
    name: str, revision: int, kind: Literal["DerivedView", "StreamJob"] = "DerivedView"
) -> str:
    """The SparkApplication's name, `<name>-r<revision>` for a view and `<name>-job-r<revision>`
    for a job (a view and a job may share a name), or when that is too long or not a DNS label
    (a name with dots or a leading digit), a shortened form with a hash of the name."""
    suffix = f"-job-r{revision}" if kind == "StreamJob" else f"-r{revision}"
    if re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and (
        len(name) + len(suffix) <= MAX_APPLICATION_NAME
    ):
        return name + suffix
    head = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not head[:1].isalpha():
        head = f"app-{head}".rstrip("-")
    digest = name_digest(name)
    head = head[: MAX_APPLICATION_NAME - len(suffix) - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}{suffix}"


def owner_reference(owner: Mapping[str, str]) -> dict[str, Any]:
    """The controlling ownerReference to `owner` (apiVersion, kind, name, uid): garbage
    collection deletes the child with it."""
    missing = [key for key in ("apiVersion", "kind", "name", "uid") if not owner.get(key)]
    if missing:
        raise ValueError(
            f"owner is missing {', '.join(missing)}: an ownerReference needs "
            "apiVersion, kind, name and uid"
        )
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["name"],
        "uid": owner["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


@dataclass(frozen=True)
class Application:
    """What a Spark application runs, whichever runtime runs it."""

    kind: Literal["DerivedView", "StreamJob"]
    namespace: str
    name: str
    revision: int
    spec_hash: str
    image: str
    main_file: str
    arguments: Sequence[str]
    spark_conf: Mapping[str, str]
    env: Mapping[str, str]


def spark_application_of(
    app: Application,
    settings: SparkSettings,
    service_account: str,
    owner: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The Kubeflow SparkApplication that runs `app`, controlled by `owner` when given."""
    label_key = "distributary.dev/view" if app.kind == "DerivedView" else "distributary.dev/job"
    labels = {
        **MANAGED_BY,
        label_key: label_value(app.name),
        "distributary.dev/revision": str(app.revision),
    }
    env = dict(sorted(app.env.items()))
    driver: dict[str, Any] = {
        "cores": settings.driver.cores,
        "memory": settings.driver.memory,
        # Only the driver talks to the API server (to create executors).
        "serviceAccount": service_account,
        "labels": labels,
    }
    executor: dict[str, Any] = {
        "cores": settings.executor.cores,
        "memory": settings.executor.memory,
        "instances": settings.executor.instances,
        "labels": labels,
    }
    pods = settings.pods
    env.update({e.name: e.value for e in pods.env if e.value is not None})
    if env:
        # envVars, not env: the Spark operator's controller hands envVars to spark-submit
        # itself, while env reaches the pods only through its webhook, which may not run.
        driver["envVars"] = dict(sorted(env.items()))
        executor["envVars"] = dict(sorted(env.items()))
    for role, resources in ((driver, settings.driver), (executor, settings.executor)):
        role.update(_pod_resources(resources))
        role.update(_pod_settings(pods))
    metadata: dict[str, Any] = {
        "name": application_name(app.name, app.revision, app.kind),
        "namespace": app.namespace,
        "labels": labels,
        "annotations": {"distributary.dev/spec-hash": app.spec_hash},
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner_reference(owner)]
    cluster: dict[str, Any] = {}
    if pods.node_selector:
        cluster["nodeSelector"] = dict(sorted(pods.node_selector.items()))
    if pods.image_pull_secrets:
        cluster["imagePullSecrets"] = list(pods.image_pull_secrets)
    if pods.volumes:
        cluster["volumes"] = [_volume(v) for v in pods.volumes]
    return {
        "apiVersion": SPARK_APPLICATION_API_VERSION,
        "kind": "SparkApplication",
        "metadata": metadata,
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "sparkVersion": SPARK_VERSION,
            "image": app.image,
            "mainApplicationFile": app.main_file,
            "arguments": list(app.arguments),
            "sparkConf": dict(app.spark_conf),
            # Never: the operator owns retries, with back-off, and records each attempt in the
            # view's or job's status; a second retry loop inside the Spark operator would hide them.
            "restartPolicy": {"type": "Never"},
            "driver": driver,
            "executor": executor,
            **cluster,
        },
    }


def _pod_resources(resources: SparkPod) -> dict[str, str]:
    """The optional resources of one role, in the SparkApplication's field names."""
    fields = {
        "coreRequest": resources.cpu_request,
        "coreLimit": resources.cpu_limit,
        "memoryOverhead": resources.memory_overhead,
    }
    return {name: value for name, value in fields.items() if value is not None}


def _pod_settings(pods: SparkPods) -> dict[str, Any]:
    """What `spec.spark.pods` asks of one role (driver or executor) of a SparkApplication.

    Variables from a Secret's key go as `envSecretKeyRefs`, which the controller hands to
    spark-submit (Spark's `secretKeyRef` settings); Secrets' every key (`envFrom`), volume
    mounts and tolerations reach the pods through the Spark operator's webhook, as the checkpoint
    claim does. The node selector and the image pull secrets are the application's own fields,
    which the controller hands to spark-submit."""
    role: dict[str, Any] = {}
    refs = {e.name: e.secret_key_ref for e in pods.env if e.secret_key_ref is not None}
    if refs:
        role["envSecretKeyRefs"] = {
            name: {"name": ref.name, "key": ref.key} for name, ref in sorted(refs.items())
        }
    if pods.env_from:
        role["envFrom"] = [{"secretRef": {"name": e.secret_ref.name}} for e in pods.env_from]
    if pods.volumes:
        role["volumeMounts"] = [
            {
                "name": v.name,
                "mountPath": v.mount_path,
                **({"readOnly": True} if v.read_only else {}),
            }
            for v in pods.volumes
        ]
    if pods.tolerations:
        role["tolerations"] = [
            t.model_dump(by_alias=True, exclude_none=True) for t in pods.tolerations
        ]
    return role


def _volume(volume: PodVolume) -> dict[str, Any]:
    """The pod volume `volume` names (its one source, as Kubernetes spells it)."""
    source = volume.model_dump(
        by_alias=True,
        exclude_none=True,
        include={"secret", "config_map", "persistent_volume_claim", "empty_dir"},
    )
    return {"name": volume.name, **source}


def spark_application(
    spec: RunnerSpec,
    settings: SparkSettings,
    *,
    image: str,
    service_account: str = DEFAULT_SERVICE_ACCOUNT,
    owner: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Kubeflow SparkApplication that runs the runner on `spec`. `image` is the operator's
    default job image; `settings.image` wins when set. `owner` (apiVersion, kind, name, uid)
    becomes the controlling ownerReference, so deleting the view deletes the application."""
    app = Application(
        kind=spec.kind,
        namespace=spec.namespace,
        name=spec.name,
        revision=spec.revision,
        spec_hash=spec.spec_hash,
        image=settings.image or image,
        main_file=RUNNER_FILE,
        arguments=(SPEC_JSON_ARG, spec.model_dump_json()),
        spark_conf=spec.spark_conf,
        env={},
    )
    return spark_application_of(app, settings, service_account, owner)


def with_service_account(manifest: Mapping[str, Any], account: str) -> dict[str, Any]:
    """The SparkApplication `manifest` with its driver running as `account`, the service
    account of the cluster's drivers in the application's namespace."""
    spec = dict(manifest["spec"])
    spec["driver"] = {**spec["driver"], "serviceAccount": account}
    return {**manifest, "spec": spec}


def with_checkpoint_claim(manifest: Mapping[str, Any], claim: CheckpointClaim) -> dict[str, Any]:
    """The SparkApplication `manifest` with `claim` mounted at its mount path in the driver and
    the executors (the Spark operator's webhook adds the volume to their pods), so checkpoints
    written there outlive every pod. The pods' fsGroup is the Spark user's group, which makes
    the volume writable by it on storage that honours fsGroup."""
    spec = dict(manifest["spec"])
    volume = {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": claim.name}}
    mount = {"name": CHECKPOINT_VOLUME, "mountPath": claim.mount_path}
    spec["volumes"] = [
        *(v for v in spec.get("volumes") or [] if v.get("name") != CHECKPOINT_VOLUME),
        volume,
    ]
    for role in ("driver", "executor"):
        pod = dict(spec[role])
        pod["volumeMounts"] = [
            *(m for m in pod.get("volumeMounts") or [] if m.get("name") != CHECKPOINT_VOLUME),
            mount,
        ]
        pod["podSecurityContext"] = {
            **(pod.get("podSecurityContext") or {}),
            "fsGroup": SPARK_GROUP,
        }
        spec[role] = pod
    return {**manifest, "spec": spec}


def env_name(direction: Literal["INPUT", "OUTPUT"], log: str) -> str:
    """`DISTRIBUTARY_<direction>_<LOG>_TOPIC`, the log name upper-cased with '-' and '.' as '_'."""
    return f"DISTRIBUTARY_{direction}_{re.sub(r'[-.]', '_', log.upper())}_TOPIC"


def _job_logs(
    job: StreamJob, logs: Mapping[str, Log], names: Sequence[str], field: str
) -> list[Log]:
    found = []
    for name in names:
        log = logs.get(name)
        if log is None:
            raise ValueError(
                f"StreamJob/{job.metadata.namespace}/{job.metadata.name}: "
                f"spec.{field}: no Log given for {name!r}; create the Log or fix "
                "the name"
            )
        found.append(log)
    return found


def job_environment(
    job: StreamJob,
    inputs: Mapping[str, Log],
    outputs: Mapping[str, Log],
    *,
    revision: int,
    checkpoint_root: str,
    bootstrap_servers: str | None = None,
    kafka_security: KafkaSecurity | None = None,
    progress_topic: str | None = None,
) -> dict[str, str]:
    """The variables a job's driver and executors get: Distributary's (topics, checkpoint,
    consumer group, dead-letter topic, inputs and outputs as JSON) and the user's `spec.env`.
    Logs are by name."""
    meta = job.metadata
    sources = [
        runner_input(None, log, starting_position(item.starting_position))
        for item, log in zip(
            job.spec.inputs,
            _job_logs(job, inputs, [i.log for i in job.spec.inputs], "inputs"),
            strict=True,
        )
    ]
    sinks = [
        RunnerOutput(
            log=log.metadata.name,
            topic=reading_topic(log),
            mode="upsert" if log.spec.compaction else "append",
            key=tuple(log.spec.key) if log.spec.key else None,
            partitions=log_partitions(log),
        )
        for log in _job_logs(job, outputs, [o.log for o in job.spec.outputs], "outputs")
    ]
    env = dict(job.spec.env)
    topics = [(env_name("INPUT", s.log), s.log, s.topic) for s in sources]
    topics += [(env_name("OUTPUT", s.log), s.log, s.topic) for s in sinks]
    for name, log, topic in topics:
        if name in env:
            raise ValueError(
                f"StreamJob/{meta.namespace}/{meta.name}: log {log!r} and another "
                f"log both map to {name}; rename one of the Logs"
            )
        env[name] = topic
    env["DISTRIBUTARY_INPUTS"] = json.dumps([s.model_dump(mode="json") for s in sources])
    env["DISTRIBUTARY_OUTPUTS"] = json.dumps([s.model_dump(mode="json") for s in sinks])
    env["DISTRIBUTARY_CHECKPOINT_LOCATION"] = checkpoint_location(
        checkpoint_root, meta.namespace, meta.name, revision
    )
    env["DISTRIBUTARY_CONSUMER_GROUP"] = consumer_group(meta.namespace, meta.name, revision)
    env["DISTRIBUTARY_DEAD_LETTER_TOPIC"] = dead_letter_topic(meta.namespace, meta.name)
    env["DISTRIBUTARY_REVISION"] = str(revision)
    env["DISTRIBUTARY_NAMESPACE"] = meta.namespace
    env["DISTRIBUTARY_NAME"] = meta.name
    if bootstrap_servers:
        env["DISTRIBUTARY_BOOTSTRAP_SERVERS"] = bootstrap_servers
    if kafka_security is not None and kafka_security.protocol != "PLAINTEXT":
        # References to the secrets only: the job resolves them where it runs.
        env[SECURITY_VARIABLE] = kafka_security.model_dump_json(exclude_defaults=True)
    if progress_topic:
        env["DISTRIBUTARY_PROGRESS_TOPIC"] = progress_topic
    return dict(sorted(env.items()))


def job_launch(
    job: StreamJob,
    inputs: Mapping[str, Log],
    outputs: Mapping[str, Log],
    *,
    revision: int,
    spec_hash: str,
    checkpoint_root: str,
    bootstrap_servers: str | None = None,
    kafka_security: KafkaSecurity | None = None,
    progress_topic: str | None = None,
) -> Application:
    """What runs a StreamJob's revision: its own main file and arguments, with
    `job_environment` set on the driver and executors. Logs are by name."""
    env = job_environment(
        job,
        inputs,
        outputs,
        revision=revision,
        checkpoint_root=checkpoint_root,
        bootstrap_servers=bootstrap_servers,
        kafka_security=kafka_security,
        progress_topic=progress_topic,
    )
    partitions = [log_partitions(inputs[i.log]) for i in job.spec.inputs]
    partitions += [log_partitions(outputs[o.log]) for o in job.spec.outputs]
    return Application(
        kind="StreamJob",
        namespace=job.metadata.namespace,
        name=job.metadata.name,
        revision=revision,
        spec_hash=spec_hash,
        image=job.spec.spark.image or job.spec.image,
        main_file=job.spec.main_application_file,
        arguments=tuple(job.spec.arguments),
        spark_conf=merged_conf(max(partitions, default=1), job.spec.spark),
        env=env,
    )


def job_application(
    job: StreamJob,
    inputs: Mapping[str, Log],
    outputs: Mapping[str, Log],
    *,
    revision: int,
    spec_hash: str,
    checkpoint_root: str,
    bootstrap_servers: str | None = None,
    kafka_security: KafkaSecurity | None = None,
    progress_topic: str | None = None,
    service_account: str = DEFAULT_SERVICE_ACCOUNT,
    owner: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The SparkApplication that runs a StreamJob's revision (see `job_launch`)."""
    app = job_launch(
        job,
        inputs,
        outputs,
        revision=revision,
        spec_hash=spec_hash,
        checkpoint_root=checkpoint_root,
        bootstrap_servers=bootstrap_servers,
        kafka_security=kafka_security,
        progress_topic=progress_topic,
    )
    return spark_application_of(app, job.spec.spark, service_account, owner)


def local_submit(
    spec: RunnerSpec,
    settings: SparkSettings,
    *,
    spec_path: str,
    runner_file: str,
    python: str = "python3",
    spark_submit: str = "spark-submit",
    jars: Sequence[str] = (),
    max_cores: int = 4,
) -> LocalCommand:
    """The spark-submit command that runs the runner on `spec` (written to `spec_path`) on this
    machine: `local[N]` with N the executors' cores, at most `max_cores`, since several views
    share one machine; `jars` are the Kafka connector's."""
    threads = max(1, min(settings.executor.cores * settings.executor.instances, max_cores))
    argv = [
        spark_submit,
        "--master",
        f"local[{threads}]",
        "--name",
        application_name(spec.name, spec.revision),
        "--driver-memory",
        settings.driver.memory,
    ]
    for key, value in spec.spark_conf.items():
        argv += ["--conf", f"{key}={value}"]
    if jars:
        argv += ["--jars", ",".join(jars)]
    argv += [runner_file, SPEC_FILE_ARG, spec_path]
    return LocalCommand(
        argv=tuple(argv), env={"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
    )
