"""Resources on the API server: the one place besides kopf that calls it.

The surface is a handful of verbs on plain dicts (`apply`, `get`, `delete`, `patch_status`,
`served_version`), so backends and tests never meet the client library's models, and what reaches
the server is exactly the manifest a planner rendered.

Children are written with server-side apply under one field manager. The server merges, records
which fields are Distributary's, and drops a field the next apply no longer sends, so a config
key the spec stops naming is unset with no bookkeeping here; `force=True` takes fields back from a
hand edit, as a controller must. Status is written with a JSON merge patch on the status
subresource, which replaces `conditions` whole, as a status writer wants.

Which version of a kind the server serves is asked of discovery, never assumed (Strimzi serves
`KafkaTopic` at v1 from 0.49, at v1beta2 only before, at v1 only from 1.0). A version found is
cached; one that disappears (an upgrade removed it) is forgotten at its first 404, and a kind not
served yet is asked again on the next call, so installing a CRD needs no restart. Discovery is
kept in memory: the client's default file cache is shared by every process on the machine and
can describe CRDs that have since changed.

Calls block, each bounded by a timeout; code on the event loop wraps them in asyncio.to_thread.
Every failure is a `KubeError` whose message names the object and what to do.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import uuid
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.discovery import LazyDiscoverer
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from distributary.kube.errors import KubeError

REQUEST_TIMEOUT = 30.0  # seconds for any one call to the API server
FIELD_MANAGER = "distributary"
CONNECTIONS = 32  # kept open to the API server, at most
LIST_PAGE = 500  # objects per list request


class _MemoryDiscoverer(LazyDiscoverer):
    """Discovery that never writes the shared cache file (see the module docstring)."""

    def _write_cache(self) -> None:
        pass


def _plain(_: Any, data: Any) -> Any:
    """A response as the server sent it: dicts and lists, not the client's wrappers."""
    return data


def _api_version(group: str, candidate: str) -> str:
    if "/" not in candidate:
        return f"{group}/{candidate}" if group else candidate
    if candidate.split("/", 1)[0] != group:
        raise ValueError(f"apiVersion {candidate!r} is not in API group {group!r}")
    return candidate


def _discovery_path(api_version: str) -> str:
    return f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"


class Kube:
    """A connection to one API server, from a kubeconfig file or, without one, the in-cluster
    service account. Cheap to create: nothing is asked of the server until the first call."""

    def __init__(
        self, kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None
    ) -> None:
        configuration = client.Configuration()
        try:
            if kubeconfig is None:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            else:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=os.fspath(kubeconfig),
                    context=context,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except (config.ConfigException, OSError) as exc:
            where = f"kubeconfig {os.fspath(kubeconfig)}" if kubeconfig else "in-cluster config"
            raise KubeError(
                f"cannot load the {where}: {exc}; pass --kubeconfig, or run in a Pod with a "
                "service account"
            ) from exc
        # As many kept connections as threads that call at once (the operator's worker
        # threads): beyond the pool, each call would open and drop a TLS connection.
        configuration.connection_pool_maxsize = CONNECTIONS
        self._api = client.ApiClient(configuration)
        self.server: str = self._api.configuration.host
        self._lock = threading.Lock()
        # The dynamic client is untyped: kept as Any, and only this class touches it.
        self._dynamic: Any = None
        self._served: dict[tuple[str, str, tuple[str, ...]], str] = {}

    def __enter__(self) -> Kube:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._api.close()  # type: ignore[no-untyped-call]

    def apply(
        self, manifest: Mapping[str, Any], field_manager: str = FIELD_MANAGER, force: bool = True
    ) -> dict[str, Any]:
        """Server-side apply `manifest` (it names its apiVersion, kind, name and namespace) and
        return the object as stored. `force` takes over fields another manager set."""
        api_version, kind = manifest["apiVersion"], manifest["kind"]
        meta = manifest["metadata"]
        name, namespace = meta["name"], meta.get("namespace")
        what = _describe(kind, namespace, name)
        resource = self._resource(api_version, kind)
        try:
            applied: dict[str, Any] = self._client().server_side_apply(
                resource,
                body=dict(manifest),
                name=name,
                namespace=namespace,
                field_manager=field_manager,
                force_conflicts=True if force else None,
                _request_timeout=REQUEST_TIMEOUT,
                serializer=_plain,
            )
        except ApiException as exc:
            if exc.status == 404 and _missing_kind(exc) != "namespaces":
                self._forget(api_version)
            raise self._failure(exc, "applying", what, api_version) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(exc) from exc
        return applied

    def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create `manifest` (it names its apiVersion, kind, name and namespace); the object as
        stored."""
        api_version, kind = manifest["apiVersion"], manifest["kind"]
        meta = manifest["metadata"]
        what = _describe(kind, meta.get("namespace"), meta["name"])
        resource = self._resource(api_version, kind)
        try:
            created: dict[str, Any] = self._client().create(
                resource,
                body=dict(manifest),
                namespace=meta.get("namespace"),
                _request_timeout=REQUEST_TIMEOUT,
                serializer=_plain,
            )
        except ApiException as exc:
            raise self._failure(exc, "creating", what, api_version) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(exc) from exc
        return created

    def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """The object, or None when there is none."""
        resource = self._resource(api_version, kind)
        try:
            found: dict[str, Any] = self._client().get(
                resource,
                name=name,
                namespace=namespace,
                _request_timeout=REQUEST_TIMEOUT,
                serializer=_plain,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise self._failure(
                exc, "reading", _describe(kind, namespace, name), api_version
            ) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(exc) from exc
        return found

    def list(
        self, api_version: str, kind: str, namespace: str | None, labels: str | None = None
    ) -> list[dict[str, Any]]:
        """Every object of a kind in a namespace (None: in every namespace), those matching the
        label selector `labels` when given; without their managedFields, which nothing here
        reads. Read in pages, so that a namespace of thousands of objects is never held twice."""
        resource = self._resource(api_version, kind)
        items: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            try:
                found: dict[str, Any] = self._client().get(
                    resource,
                    namespace=namespace,
                    label_selector=labels,
                    limit=LIST_PAGE,
                    _continue=after,
                    _request_timeout=REQUEST_TIMEOUT,
                    serializer=_plain,
                )
            except ApiException as exc:
                where = f"{kind} in {namespace or 'every namespace'}"
                raise self._failure(exc, "listing", where, api_version) from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise self._unreachable(exc) from exc
            for item in found.get("items") or []:
                item.setdefault("apiVersion", api_version)  # a list's items carry neither
                item.setdefault("kind", kind)
                (item.get("metadata") or {}).pop("managedFields", None)
                items.append(item)
            after = (found.get("metadata") or {}).get("continue")
            if not after:
                return items

    def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        propagation_policy: str = "Background",
    ) -> bool:
        """Delete the object; True if it existed. Its dependents go as `propagation_policy` says."""
        resource = self._resource(api_version, kind)
        try:
            self._client().delete(
                resource,
                name=name,
                namespace=namespace,
                propagation_policy=propagation_policy,
                _request_timeout=REQUEST_TIMEOUT,
                serializer=_plain,
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise self._failure(
                exc, "deleting", _describe(kind, namespace, name), api_version
            ) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(exc) from exc
        return True

    def patch_status(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Merge `status` into the object's status through the status subresource (lists such
        as `conditions` are replaced whole) and return the object. With `resource_version`, only
        if the object is still at that version (else a KubeError with status 409): a status
        computed from an older read never overwrites a newer one."""
        resource = self._resource(api_version, kind)
        what = f"the status of {_describe(kind, namespace, name)}"
        path = f"{resource.path(name=name, namespace=namespace)}/status"
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            patched: dict[str, Any] = self._client().request(
                "patch",
                path,
                body=body,
                content_type="application/merge-patch+json",
                _request_timeout=REQUEST_TIMEOUT,
                serializer=_plain,
            )
        except ApiException as exc:
            raise self._failure(exc, "patching", what, api_version) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(exc) from exc
        return patched

    def served_version(self, group: str, kind: str, candidates: Sequence[str]) -> str | None:
        """The first of `candidates` (apiVersions such as `kafka.strimzi.io/v1`, or bare versions
        of `group`) at which the server serves `kind`, or None when it serves none of them."""
        wanted = tuple(_api_version(group, candidate) for candidate in candidates)
        key = (group, kind, wanted)
        with self._lock:
            if key in self._served:
                return self._served[key]
        for api_version in wanted:
            if self._serves(api_version, kind):
                with self._lock:
                    self._served[key] = api_version
                return api_version
        return None

    def _serves(self, api_version: str, kind: str) -> bool:
        try:
            listing = self._client().request(
                "get",
                _discovery_path(api_version),
                _request_timeout=REQUEST_TIMEOUT,
                serializer=_plain,
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise self._failure(exc, "discovering", f"API {api_version}", api_version) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(exc) from exc
        resources = (listing.get("resources") or []) if isinstance(listing, dict) else []
        return any(r.get("kind") == kind and "/" not in r.get("name", "") for r in resources)

    def _client(self) -> Any:
        with self._lock:
            if self._dynamic is None:
                # A path never written (see _MemoryDiscoverer): discovery starts fresh.
                nowhere = os.path.join(tempfile.gettempdir(), f"distributary-{uuid.uuid4().hex}")
                try:
                    self._dynamic = DynamicClient(  # type: ignore[no-untyped-call]
                        self._api, cache_file=nowhere, discoverer=_MemoryDiscoverer
                    )
                except ApiException as exc:
                    raise self._failure(exc, "discovering", "the API", "") from exc
                except (urllib3.exceptions.HTTPError, OSError) as exc:
                    raise self._unreachable(exc) from exc
            return self._dynamic

    def _resource(self, api_version: str, kind: str) -> Any:
        dynamic = self._client()
        try:
            with self._lock:
                return dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError as exc:
            raise KubeError(
                f"the API server at {self.server} does not serve {kind} at {api_version}: install "
                f"the CustomResourceDefinition that defines it, or check the apiVersion",
                status=404,
            ) from exc
        except ApiException as exc:
            raise self._failure(
                exc, "discovering", f"{kind} at {api_version}", api_version
            ) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(exc) from exc

    def _forget(self, api_version: str) -> None:
        """Drop what discovery said about `api_version`: the server no longer serves it."""
        with self._lock:
            for key in [k for k, v in self._served.items() if v == api_version]:
                del self._served[key]
            self._dynamic = None

    def _unreachable(self, exc: BaseException) -> KubeError:
        return KubeError(
            f"the API server at {self.server} cannot be reached ({exc}): check that it is up "
            "and that the kubeconfig points at it"
        )

    def _failure(self, exc: ApiException, verb: str, what: str, api_version: str) -> KubeError:
        said = _server_message(exc)
        status = exc.status
        if status == 401:
            text = f"the API server at {self.server} rejects our credentials ({said}): renew them"
        elif status == 403:
            text = (
                f"{verb} {what} is forbidden ({said}): grant the operator's service account that "
                "permission (the chart's ClusterRole lists what it needs)"
            )
        elif status == 404 and _missing_kind(exc) == "namespaces":
            text = f"{verb} {what} failed: {said}; create the namespace first"
        elif status == 404:
            text = (
                f"{verb} {what} failed: the server no longer serves {api_version} ({said}); "
                "check which versions its CustomResourceDefinition serves"
            )
        elif status in (400, 422):
            text = f"the API server rejects {what} ({said}): fix the resource or its schema"
        elif status == 409:
            text = f"{verb} {what} conflicts with another writer ({said}): retry"
        else:
            text = f"{verb} {what} failed with HTTP {status} ({said}): retry, or check the server"
        return KubeError(text, status=status)


def _describe(kind: str, namespace: str | None, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _status_body(exc: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _server_message(exc: ApiException) -> str:
    body = _status_body(exc)
    return str(body.get("message") or exc.reason or f"HTTP {exc.status}")


def _missing_kind(exc: ApiException) -> str | None:
    """The `details.kind` of a 404 Status: `namespaces` when the namespace is missing."""
    details = _status_body(exc).get("details") or {}
    kind = details.get("kind")
    return str(kind) if kind else None
