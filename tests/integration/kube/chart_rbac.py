"""The operator with the chart's rights and no others, for the tests.

Every module's operator runs as the chart's ServiceAccount, not as cluster admin: the chart's
`rbac.yaml` and `serviceaccount.yaml` are rendered by the real helm (`tools/helm.sh`) for the
module's namespace, with the values that match its operator flags (Spark runtime, topic
backend), applied, and the operator given a kubeconfig holding a token of that account
(TokenRequest, `kubectl create token`). The control plane authorizes with RBAC, so whatever the
chart forgot to grant fails the module as it would fail in a cluster.

A module's `OPERATOR_RBAC` says which rights: `"chart"` (the default) the chart's for watching a
list of namespaces (the module's: a Role and RoleBinding there); `"chart-cluster"` the chart's
for watching every namespace (a ClusterRole), and the operator then watches every namespace;
`"admin"` none of the chart's, the cluster admin's kubeconfig.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml
from tests.integration.kube.operator_harness import ROOT, Cluster

CHART = ROOT / "charts" / "distributary"
HELM_SCRIPT = ROOT / "tools" / "helm.sh"
RBAC_TEMPLATES = ("templates/serviceaccount.yaml", "templates/rbac.yaml")
TOKEN_LIFETIME = "4h"  # longer than any module runs
RBAC_MODES = ("chart", "chart-cluster", "admin")


@dataclass(frozen=True)
class ChartAccount:
    """The operator's ServiceAccount as the chart made it, and a kubeconfig that acts as it."""

    namespace: str
    name: str
    kubeconfig: Path
    watch_all: bool

    @property
    def user(self) -> str:
        """The account's user name, as the API server's RBAC sees it."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"


def helm_binary() -> str:
    """The cached helm binary (built on first use, progress on stderr)."""
    result = subprocess.run(
        [str(HELM_SCRIPT)], capture_output=True, text=True, check=False, timeout=1800
    )
    assert result.returncode == 0, f"tools/helm.sh failed:\n{result.stderr[-3000:]}"
    return result.stdout.strip().splitlines()[-1]


def chart_values(
    flags: Sequence[str], bootstrap_servers: str, watch: Sequence[str]
) -> dict[str, Any]:
    """The chart values that give an operator started with `flags` its rights."""
    given = dict(pairwise(flags))
    return {
        "watchNamespaces": list(watch),
        "sparkRuntime": given.get("--spark-runtime", "spark-operator"),
        "topicBackend": given.get("--topic-backend", "direct"),
        "kafka": {"bootstrapServers": bootstrap_servers},
        "connect": {
            "url": given.get("--connect-url", ""),
            "cluster": given.get("--connect-cluster", ""),
            "namespace": given.get("--connect-namespace", ""),
            "secrets": given.get("--connect-secrets", "kubernetes"),
        },
    }


def render_rbac(
    release: str, namespace: str, values: dict[str, Any], folder: Path
) -> list[dict[str, Any]]:
    """The chart's ServiceAccount, roles and bindings for `values`, as `helm template` renders
    them into `namespace`."""
    values_file = folder / f"{release}-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    only = [arg for template in RBAC_TEMPLATES for arg in ("--show-only", template)]
    command = [helm_binary(), "template", release, str(CHART), "--namespace", namespace]
    result = subprocess.run(
        [*command, "-f", str(values_file), *only],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def account_kubeconfig(cluster: Cluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig at `path` for the control plane, authenticating as the ServiceAccount with a
    fresh token from the TokenRequest API."""
    token = cluster.kubectl(
        "create", "token", account, "-n", namespace, f"--duration={TOKEN_LIFETIME}"
    ).strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": server}],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [{"name": account, "context": {"cluster": "test", "user": account}}],
                "current-context": account,
            }
        )
    )
    return path


def install_chart_rbac(
    cluster: Cluster,
    folder: Path,
    *,
    release: str,
    flags: Sequence[str],
    bootstrap_servers: str,
    watch_all: bool,
) -> ChartAccount:
    """Apply the chart's RBAC for an operator in the cluster's namespace that watches every
    namespace (`watch_all`) or only its own; the account that now has exactly those rights."""
    watch = () if watch_all else (cluster.namespace,)
    values = chart_values(flags, bootstrap_servers, watch)
    objects = render_rbac(release, cluster.namespace, values, folder)
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    (account,) = [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"]
    kubeconfig = account_kubeconfig(
        cluster, cluster.namespace, account, folder / f"{release}.kubeconfig"
    )
    return ChartAccount(cluster.namespace, account, kubeconfig, watch_all)


def can_i(account: ChartAccount, verb: str, resource: str, *where: str) -> bool:
    """Whether the API server lets `account` do `verb` on `resource` (`kind.group`, or
    `kind.group/subresource`) `where` (`-n NS`, `--all-namespaces` or nothing), asked with the
    account's own token (`kubectl auth can-i`)."""
    kind, _, subresource = resource.partition("/")
    asked = [verb, kind, *([f"--subresource={subresource}"] if subresource else []), *where]
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(account.kubeconfig), "auth", "can-i", *asked],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl auth can-i: {result.stdout}{result.stderr}"
    return answer == "yes"
