"""A pipeline's resources as a cluster holds them, for `distributary plan --against-cluster`.

A person runs this with their own kubeconfig, not the operator's service account, so its errors
speak to them: a server that cannot be reached is named with the one reason that matters (not
urllib3's retry chain), and a refused listing says which permission to ask for. The namespace of
the kubeconfig's context is read here too, because `kubectl apply` gives it to the resources of
files that name none, and the files must be compared with the namespace they would land in.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import yaml
from kubernetes import config

from distributary.kube.errors import KubeError
from distributary.kube.resources import Kube
from distributary.plan.edits.cluster_changes import NamespaceResources

API = "distributary.dev/v1alpha1"
KINDS = ("Log", "DerivedView", "StreamJob")


def read_namespaces(kube: Kube, namespaces: Iterable[str]) -> dict[str, NamespaceResources]:
    """Every Log (views' children included), DerivedView and StreamJob of each namespace. A
    namespace that does not exist holds none. Raises `KubeError` with a message for people."""
    found: dict[str, NamespaceResources] = {}
    for namespace in namespaces:
        listed = {kind: tuple(_list(kube, kind, namespace)) for kind in KINDS}
        found[namespace] = NamespaceResources(
            logs=listed["Log"], views=listed["DerivedView"], jobs=listed["StreamJob"]
        )
    return found


def _list(kube: Kube, kind: str, namespace: str) -> list[dict[str, object]]:
    try:
        return kube.list(API, kind, namespace)
    except KubeError as exc:
        if exc.status == 403:
            raise KubeError(
                f"the API server at {kube.server} does not let this kubeconfig's user list "
                f"{kind} in namespace {namespace}: ask for get and list on logs, derivedviews "
                "and streamjobs of the distributary.dev API group",
                status=403,
            ) from exc
        if exc.status is None and exc.__cause__ is not None:
            raise KubeError(
                f"cannot reach the API server at {kube.server} ({_reason(exc.__cause__)}): "
                "check that the cluster is up and that the kubeconfig and context point at it "
                "(--kubeconfig, --context)"
            ) from exc
        raise


def _reason(exc: BaseException) -> str:
    """The last link of a connection failure: `[Errno 111] Connection refused`."""
    reason = getattr(exc, "reason", None) or exc  # urllib3's MaxRetryError wraps the cause
    text = " ".join(str(reason).split())
    # urllib3 prefixes the connection: "HTTPSConnection(...): Failed to establish a new
    # connection: [Errno 111] Connection refused".
    text = text.rpartition("Failed to establish a new connection: ")[2]
    return text or type(exc).__name__


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def context_namespace(kubeconfig: str | os.PathLike[str] | None, context: str | None) -> str | None:
    """The namespace the kubeconfig's context (`context`, else its current one) names, if any;
    without a kubeconfig, in a Pod, the Pod's own namespace. A KubeError when the kubeconfig
    cannot be read or has no context named `context`."""
    if kubeconfig is None:
        try:
            return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or None
        except OSError:
            return None
    try:
        contexts, current = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=os.fspath(kubeconfig)
        )
    except (config.ConfigException, yaml.YAMLError, OSError, ValueError, LookupError,
            TypeError, AttributeError) as exc:  # fmt: skip  # the client trips on odd files
        what = " ".join(str(exc).split())
        raise KubeError(
            f"cannot load the kubeconfig {os.fspath(kubeconfig)} ({what}): fix it, or pass "
            "another with --kubeconfig"
        ) from exc
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    if context and chosen is None:
        names = ", ".join(sorted(str(c.get("name")) for c in contexts)) or "none"
        raise KubeError(
            f"--context {context}: the kubeconfig {os.fspath(kubeconfig)} has no such context "
            f"(it has {names}); pass one of them"
        )
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return str(namespace) if namespace else None
