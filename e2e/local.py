#!/usr/bin/env python3
"""`make e2e-local`: the clickstream example through the operator on a real API server.

Everything is real and local: a control plane (etcd, kube-apiserver, its garbage collector and
namespace controller), the embedded Kafka broker, and `distributary operator` with the `direct`
topic backend and the `local` Spark runtime. The example is applied with kubectl as a person would,
its demo data is appended, and the script waits until every Log and view is Ready and every view has
caught up, then prints `kubectl get dlog,dview,sjob` and, as its last line, a one-line JSON summary.
It tears everything down on the way out, also on failure or Ctrl-C. Exit status 0 means the pipeline
converged.

With `--secured` the broker serves clients only over SASL_SSL (SCRAM-SHA-512), with certificates
made for the run, and the operator gets its credentials from its environment as the chart gives
them (DISTRIBUTARY_KAFKA_*): its clients, its runners and the appended data all go through TLS.
`--views` applies only the example's views named (and every Log).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from distributary.backends.local_spark import LocalRuntime
from distributary.devtools.certificates import make_certificates
from distributary.devtools.controlplane import ControlPlane
from distributary.kafka.admin import KafkaAdmin
from distributary.kafka.connection import client_settings
from distributary.local.broker import BrokerSecurity, EmbeddedBroker
from distributary.plan.access.kafka_connection import security_from_environment
from distributary.processes import free_port

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "clickstream"
DATA = EXAMPLE / "data" / "page-views.jsonl"
USERS = EXAMPLE / "data" / "users.jsonl"
NAMESPACE = "clickstream"
KAFKA_USER = "distributary"


def say(message: str) -> None:
    print(f"[e2e-local] {message}", file=sys.stderr, flush=True)


def kubectl(kubeconfig: Path, *args: str) -> str:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def resources(kubeconfig: Path, kind: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        kubectl(kubeconfig, "get", kind, "-n", NAMESPACE, "-o", "json")
    )["items"]
    return items


def is_true(resource: dict[str, Any], type_: str) -> bool:
    generation = resource["metadata"].get("generation")
    for item in (resource.get("status") or {}).get("conditions") or []:
        if item["type"] == type_:
            return bool(item["status"] == "True" and item.get("observedGeneration") == generation)
    return False


def wait_for(what: str, probe: Callable[[], str | None], timeout: float) -> None:
    """Wait until `probe` returns None (done); it returns what is still awaited."""
    deadline, waiting, shown = time.monotonic() + timeout, "", 0.0
    while time.monotonic() < deadline:
        waiting = probe() or ""
        if not waiting:
            return
        if time.monotonic() - shown > 10:
            say(f"waiting for {what}: {waiting}")
            shown = time.monotonic()
        time.sleep(1)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}: {waiting}")


def not_settled(kubeconfig: Path, admin: KafkaAdmin) -> str | None:
    """What is not settled yet (None: everything is). A view is settled when Ready, CaughtUp and
    at lag 0, and its position in each input is that input's end now, asked of the broker after
    the status was read: a status written before the data arrived shows lag 0 too."""
    pending = [
        f"Log {log['metadata']['name']}"
        for log in resources(kubeconfig, "dlog")
        if not is_true(log, "Ready")
    ]
    views = resources(kubeconfig, "dview")
    for view in views:
        status = view.get("status") or {}
        name = f"DerivedView {view['metadata']['name']}"
        # CaughtUp is True while a view keeps up; everything read is lag 0.
        if not (is_true(view, "Ready") and is_true(view, "CaughtUp") and status.get("lag") == 0):
            pending.append(f"{name} (lag {status.get('lag')})")
            continue
        for found in status.get("inputs") or []:
            topic = found.get("topic")
            ends = admin.end_offsets([topic]).get(topic, {}) if topic else {}
            position = {int(p): o for p, o in (found.get("position") or {}).items()}
            if not topic or any(position.get(p, 0) < end for p, end in ends.items()):
                pending.append(f"{name} (its status is behind {topic})")
                break
    return ", ".join(pending) or (None if views else "no views yet")


def summary(kubeconfig: Path) -> dict[str, Any]:
    logs = {
        log["metadata"]["name"]: {
            "topic": (log.get("status") or {}).get("topicName"),
            "records": (log.get("status") or {}).get("records"),
        }
        for log in resources(kubeconfig, "dlog")
    }
    views = {
        view["metadata"]["name"]: {
            "revision": (view.get("status") or {}).get("servingRevision"),
            "outputTopic": (view.get("status") or {}).get("outputTopic"),
            "lag": (view.get("status") or {}).get("lag"),
            "ready": is_true(view, "Ready"),
        }
        for view in resources(kubeconfig, "dview")
    }
    return {"namespace": NAMESPACE, "logs": logs, "views": views}


def secured_kafka(state: Path) -> tuple[EmbeddedBroker, dict[str, str], list[str]]:
    """A broker with a SASL_SSL listener only for clients; the operator's environment and
    the command line's options that reach it."""
    made = make_certificates(state / "tls")
    password = secrets.token_urlsafe(18)
    security = BrokerSecurity(made.ca, made.broker, made.broker_key, {KAFKA_USER: password})
    broker = EmbeddedBroker(state / "kafka", security=security)
    environment = {
        "DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "DISTRIBUTARY_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "DISTRIBUTARY_KAFKA_SASL_USERNAME": KAFKA_USER,
        "DISTRIBUTARY_KAFKA_SASL_PASSWORD": password,
        "DISTRIBUTARY_KAFKA_SSL_CA_LOCATION": str(made.ca),
    }
    properties = state / "client.properties"
    properties.touch(mode=0o600)
    properties.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{KAFKA_USER}" password="{password}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={made.ca}\n"
    )
    return broker, environment, ["--kafka-config", str(properties)]


def example_files(state: Path, views: list[str] | None) -> Path:
    """The example's folder, or a file of its Logs and the views named."""
    if views is None:
        return EXAMPLE
    documents = []
    for path in sorted(EXAMPLE.glob("*.yaml")):
        documents += [d for d in yaml.safe_load_all(path.read_text()) if d]
    kept = [d for d in documents if d["kind"] != "DerivedView" or d["metadata"]["name"] in views]
    missing = set(views) - {d["metadata"]["name"] for d in kept}
    if missing:
        raise RuntimeError(f"--views: the example has no view {', '.join(sorted(missing))}")
    chosen = state / "example.yaml"
    chosen.write_text(yaml.safe_dump_all(kept, sort_keys=False))
    return chosen


def run(
    state: Path, timeout: float, secured: bool = False, views: list[str] | None = None
) -> dict[str, Any]:
    plane = ControlPlane(state / "kube")
    broker, kafka_env, kafka_options = (
        secured_kafka(state) if secured else (EmbeddedBroker(state / "kafka"), {}, [])
    )
    operator: subprocess.Popen[bytes] | None = None
    local = state / "local"
    try:
        plane.start()
        say("starting the embedded Kafka broker ...")
        broker.start()
        kubeconfig = Path(plane.kubeconfig)
        kubectl(kubeconfig, "apply", "--server-side", "-f", str(ROOT / "crds"))
        kubectl(kubeconfig, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        kubectl(kubeconfig, "create", "namespace", NAMESPACE)
        say(f"starting the operator (direct topics, local Spark); log: {state / 'operator.log'}")
        argv = [
            sys.executable, "-m", "distributary.cli", "operator",
            "--bootstrap-servers", broker.bootstrap_servers,
            "--spark-runtime", "local",
            "--namespace", NAMESPACE,
            "--observe-interval", "3",
            "--state-dir", str(local),
            "--checkpoint-root", (state / "checkpoints").as_uri(),
            "--health-port", str(free_port()),
            "--metrics-port", str(free_port()),
        ]  # fmt: skip
        with open(state / "operator.log", "wb") as out:
            env = {**os.environ, "KUBECONFIG": str(kubeconfig), **kafka_env}
            operator = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        files = example_files(state, views)
        say(f"kubectl apply -f {files.relative_to(ROOT) if files == EXAMPLE else files}")
        kubectl(kubeconfig, "apply", "-n", NAMESPACE, "-f", str(files))
        wait_for(
            "Logs users and page-views",
            lambda: (
                None
                if sum(is_true(log, "Ready") for log in resources(kubeconfig, "dlog")) >= 2
                else "not Ready"
            ),
            120,
        )
        # The users table first, then the page views that are joined with it.
        for log, data in (("users", USERS), ("page-views", DATA)):
            say(f"appending {data.relative_to(ROOT)} to {log}")
            subprocess.run(
                [
                    sys.executable, "-m", "distributary.cli", "produce", log,
                    "--file", str(data), "--pipeline", str(EXAMPLE),
                    "--bootstrap-servers", broker.bootstrap_servers, *kafka_options,
                ],
                check=True,
            )  # fmt: skip
        security = security_from_environment(kafka_env) if kafka_env else None
        admin = KafkaAdmin(broker.bootstrap_servers, client=client_settings(security, kafka_env))
        wait_for(
            "every resource Ready and caught up", lambda: not_settled(kubeconfig, admin), timeout
        )
        print(kubectl(kubeconfig, "get", "dlog,dview,sjob", "-n", NAMESPACE), flush=True)
        return {**summary(kubeconfig), "kafka": "SASL_SSL" if secured else "PLAINTEXT"}
    finally:
        say("tearing down ...")
        if operator is not None:
            operator.terminate()
            operator.wait(30)
        runtime = LocalRuntime(local)
        for _, _, app in runtime.running():
            runtime.stop(app)
        broker.stop()
        plane.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="e2e/local.py", description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, help="keep everything here (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to converge")
    parser.add_argument(
        "--secured", action="store_true", help="Kafka with a SASL_SSL listener only (SCRAM, TLS)"
    )
    parser.add_argument(
        "--views", help="apply only these views of the example (comma-separated), and its Logs"
    )
    args = parser.parse_args(argv)
    state = args.state_dir or Path(tempfile.mkdtemp(prefix="distributary-e2e-"))
    state.mkdir(parents=True, exist_ok=True)
    try:
        views = args.views.split(",") if args.views else None
        result = run(state.resolve(), args.timeout, args.secured, views)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        say(f"failed: {exc}; logs are in {state}")
        return 1
    print(json.dumps(result, separators=(",", ":")), flush=True)
    if args.state_dir is None:
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
