"""The clickstream example in pods: its Log and the two views of its chain as the example's files
say (only their pods made small for a two-core node, their cutover made quick;
`views-per-country` named with 100 characters; every view's pods given what a real cluster asks
of them: environment from a Secret, a Secret's volume, a node selector, a toleration, an image
pull secret), each revision a SparkApplication whose driver and executor run on the node; page
views arrive throughout, some malformed and some that the filters drop; `enriched-page-views` is
edited (its filter's threshold) while they arrive, and cuts over, and `views-per-country` (which
reads it) follows. The example's third view (`views-per-user`, another aggregate of the Log) is
left out: on two cores shared with the rest of the suite, its driver and executor slowed the
others' batches to half a minute and more; it runs in the local and operator tests.

Each revision's SparkApplication is submitted by the real Spark operator's controller; its driver
(the job image) is placed on the node by the scheduler and creates its executor pod with the
chart's drivers' account; both read from the broker's listener for pods and checkpoint on the
chart's claim (a volume of the node); each carries the view's pod settings, and every name derived
from the long one (pods' labels, the driver's Service) fits in 63 characters. When the page views
stop, every output is compared exactly
with what the records imply (`kube/chaos_clicks.py` computes it without I/O): the enriched
stream's serving topic holds each kept record once, as its new SQL shapes it, and its first
revision's topic each record its first SQL kept, once; the per-country table aggregates the
enriched stream.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from tests.integration.kube.chaos_clicks import (
    DEAD_LETTER,
    INPUT_TOPIC,
    KEPT,
    Clicks,
    canonical,
    difference,
    input_positions,
    output_offsets,
    page_view,
    table_difference,
    views_per_country,
)
from tests.integration.kube.operator_harness import Cluster, is_true, read_to_the_end, wait_for
from tests.integration.pods.pods import PIPELINES, SMALL_JVMS, pods
from tests.integration.spark_pipelines import latest_table, read_topic

from distributary.devtools.images import SPARK
from distributary.devtools.node import Node
from distributary.local.broker import EmbeddedBroker
from distributary.plan.applications.spark import application_name

APP_LABEL = "sparkoperator.k8s.io/app-name"

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "clickstream"
ENRICHED = "enriched-page-views"
# The example's views-per-country under a name of 100 characters, valid for Kubernetes objects:
# the names derived from it (application, driver pod, Services, labels) must fit their limits.
PER_COUNTRY = "views-per-country-" + "of-a-platform-team-whose-names-are-long" * 2 + "-abc"
VIEWS = (ENRICHED, PER_COUNTRY)
SEED, RATE, THRESHOLD = 28, 20, 2000
SMALL = {"memory": "512m", "cpuRequest": "100m"}  # two drivers and executors on two cores
SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "clicks-s3"},
          "stringData": {"key": "not-a-real-key"}}  # fmt: skip


def pod_settings(node: Node) -> dict[str, Any]:
    """What a real cluster asks of a view's pods (`spec.spark.pods`): environment from a Secret,
    a Secret's volume, a node selector, a toleration, an image pull secret."""
    return {
        "env": [
            {"name": "S3_REGION", "value": "eu-west-1"},
            {"name": "S3_KEY", "secretKeyRef": {"name": "clicks-s3", "key": "key"}},
            SMALL_JVMS,
        ],
        "envFrom": [{"secretRef": {"name": "clicks-s3"}}],
        "volumes": [
            {
                "name": "certs",
                "mountPath": "/etc/certs",
                "readOnly": True,
                "secret": {"secretName": "clicks-s3"},
            }
        ],
        "nodeSelector": {"kubernetes.io/hostname": node.name},
        "tolerations": [{"key": "dedicated", "value": "spark", "effect": "NoSchedule"}],
        "imagePullSecrets": ["clicks-registry"],
    }


def example(threshold: int, node: Node) -> list[dict[str, Any]]:
    """The example's Log and views, its enriched view filtering at `threshold`."""
    [log] = [d for d in yaml.safe_load_all((EXAMPLE / "logs.yaml").read_text()) if d]
    log["spec"]["topicName"] = INPUT_TOPIC
    text = (EXAMPLE / "views.yaml").read_text()
    assert KEPT in text, f"the example's enriched view no longer filters on {KEPT}"
    views = [v for v in yaml.safe_load_all(text.replace(KEPT, f"duration_ms >= {threshold}")) if v]
    views = [v for v in views if v["metadata"]["name"] != "views-per-user"]
    for view in views:
        if view["metadata"]["name"] == "views-per-country":
            view["metadata"]["name"] = PER_COUNTRY
        spark = view["spec"].setdefault("spark", {})
        # The example's own triggers (5 s, 10 s): each micro-batch costs the machine about 0.2
        # CPU-seconds, and five drivers share two cores with the rest of the suite.
        spark.update(driver=SMALL, executor={**SMALL, "instances": 1})
        spark["pods"] = pod_settings(node)
        view["spec"]["upgrade"] = {"cutoverWindow": "2s", "cutoverMaxLag": 100, "retireAfter": "2s"}
    assert sorted(v["metadata"]["name"] for v in views) == sorted(VIEWS)
    return [log, *views]


def status(kube: Cluster, view: str) -> dict[str, Any]:
    return dict((kube.get("dview", view) or {}).get("status") or {})


def in_containers_on_the_node(node: Node, application: str) -> None:
    """The revision's driver and executor run on the node, in the job image (the executor comes
    some seconds after its driver)."""

    def running() -> list[dict[str, Any]]:
        selector = f"{APP_LABEL}={application}"
        found = pods(node, PIPELINES, selector)
        roles = sorted(pod["metadata"]["labels"]["spark-role"] for pod in found)
        phases = {pod["status"].get("phase") for pod in found}
        return found if roles == ["driver", "executor"] and phases == {"Running"} else []

    for pod in wait_for(f"the driver and executor of {application} running", running, 180):
        assert pod["spec"]["nodeName"] == node.name
        [container] = pod["status"]["containerStatuses"]
        assert container["image"].endswith(SPARK.tag), container["image"]
        carries_the_pod_settings(pod, node)
    services = node.api("GET", f"/api/v1/namespaces/{PIPELINES}/services")["items"]
    ours = [s["metadata"]["name"] for s in services
            if (s["metadata"].get("labels") or {}).get(APP_LABEL) == application]  # fmt: skip
    assert ours, f"no Service of {application}"
    assert all(len(name) <= 63 for name in ours), ours


def carries_the_pod_settings(pod: dict[str, Any], node: Node) -> None:
    """The view's pod settings as the running pod has them: it started, so the kubelet found
    the Secret's key for its environment and mounted the Secret's volume."""
    spec, name = pod["spec"], pod["metadata"]["name"]
    [container] = [c for c in spec["containers"] if c["name"] in ("spark-kubernetes-driver",
                   "spark-kubernetes-executor")]  # fmt: skip
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}
    assert env["S3_REGION"] == "eu-west-1", name
    assert env["S3_KEY"] == {"secretKeyRef": {"name": "clicks-s3", "key": "key"}}, name
    assert {"secretRef": {"name": "clicks-s3"}} in container.get("envFrom", []), name
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert (mounts["certs"]["mountPath"], mounts["certs"].get("readOnly")) == ("/etc/certs", True)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["certs"]["secret"]["secretName"] == "clicks-s3", name
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": node.name}, name
    wanted = {"key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule"}
    assert wanted in spec["tolerations"], name
    assert {"name": "clicks-registry"} in spec["imagePullSecrets"], name
    assert all(len(value) <= 63 for value in pod["metadata"]["labels"].values()), name


def test_the_clickstream_example_runs_in_pods_with_an_edit_and_its_cutover(
    installed: Cluster, pods_broker: EmbeddedBroker, node: Node, checkpoint_volume: Path
) -> None:
    bootstrap = pods_broker.bootstrap_servers
    [log, *views] = example(0, node)
    assert len(PER_COUNTRY) == 100
    installed.apply(SECRET, log)
    wait_for("Log page-views Ready", lambda: is_true(installed.get("dlog", "page-views"), "Ready"))
    clicks = Clicks(bootstrap, SEED, RATE)
    clicks.start()
    try:
        installed.apply(*views)

        def all_reading() -> bool:
            return all(
                is_true(installed.get("dview", v), "Ready")
                and status(installed, v).get("servingRevision") == 1
                for v in VIEWS
            )

        wait_for("the two views serving revision 1", all_reading, timeout=900)
        for view in VIEWS:
            in_containers_on_the_node(node, application_name(view, 1))
        first_topic = status(installed, ENRICHED)["outputTopic"]
        installed.apply(*example(THRESHOLD, node)[1:])  # only the enriched view's SQL changed

        def cut_over() -> bool:
            return (
                status(installed, ENRICHED).get("servingRevision") == 2
                and is_true(installed.get("dview", PER_COUNTRY), "Ready")
                and (status(installed, PER_COUNTRY).get("servingRevision") or 0) >= 2
            )

        wait_for("the edit cut over, and its reader following", cut_over, timeout=900)
        in_containers_on_the_node(node, application_name(ENRICHED, 2))
    finally:
        appended = clicks.stop()
    for view in VIEWS:
        wait_for(
            f"{view} caught up",
            lambda view=view: read_to_the_end(installed.get("dview", view), bootstrap),
            timeout=300,
        )

    records = [page_view(SEED, seq) for seq in range(appended)]
    positions, problems = input_positions(bootstrap, records)
    assert not problems, problems
    outputs = output_offsets(records, positions, THRESHOLD)
    expected_rows = Counter(out for out in outputs.values() if out != DEAD_LETTER)
    enriched_topic = status(installed, ENRICHED)["outputTopic"]
    found_rows = Counter(
        canonical(r.json()) for r in read_topic(bootstrap, enriched_topic) if r.value is not None
    )
    enriched = difference(expected_rows, found_rows, enriched_topic)
    assert enriched is None, enriched
    # Revision 1 wrote what its SQL kept (every parsed view), each once, until it was retired.
    first = Counter(canonical(r.json()) for r in read_topic(bootstrap, first_topic) if r.value)
    assert first, "revision 1 wrote nothing"
    assert [row for row, n in first.items() if n > 1] == []
    kept_by_1 = Counter(out for out in output_offsets(records, positions, 0).values())
    assert not first - kept_by_1, sorted(first - kept_by_1)[:5]

    def table(view: str, key: str) -> dict[str, str]:
        reads = read_topic(bootstrap, status(installed, view)["outputTopic"])
        return {json.loads(k)[key]: canonical(v) for k, v in latest_table(reads).items()}

    countries = views_per_country(expected_rows)
    per_country = table_difference(countries, table(PER_COUNTRY, "country"), PER_COUNTRY)
    assert per_country is None, per_country
    # Every revision's driver checkpointed on the volume the chart's claim is bound to: the
    # offsets and commits of its batches.
    offsets = {path.parent for path in checkpoint_volume.rglob("offsets") if path.is_dir()}
    assert len(offsets) >= 4, sorted(checkpoint_volume.rglob("*"))[:20]  # 2 views, both edited
    for folder in offsets:
        assert any((folder / "commits").iterdir()), f"no batch committed in {folder}"
    for view in VIEWS:  # their pods leave the node
        installed.kubectl("delete", "dview", view, "-n", PIPELINES)
