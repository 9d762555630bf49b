"""Secrets as the operator reads them for Sources and Sinks: a key's value from the API server,
or a `SecretMissingError` that names the field and the fix. `distributary run` reads them from
its secrets folder instead (`local.sources.secret_file`)."""

from __future__ import annotations

import base64
import binascii

from distributary.api.source import SecretKey
from distributary.backends.base import SecretMissingError
from distributary.kube.resources import Kube


def api_secret(kube: Kube, namespace: str, secret: SecretKey, field: str) -> str:
    """The value of a Secret's key, read from the API server; SecretMissingError naming the field
    and the fix when the Secret or the key is missing."""
    found = kube.get("v1", "Secret", namespace, secret.name)
    data = (found or {}).get("data") or {}
    if found is None or secret.key not in data:
        what = f"Secret {secret.name!r}" + ("" if found is None else f" has no key {secret.key!r}")
        raise SecretMissingError(
            f"{field}: {what} in namespace {namespace}: create it with the password (kubectl "
            f"create secret generic {secret.name} -n {namespace} --from-literal={secret.key}=...)"
        )
    try:
        return base64.b64decode(data[secret.key]).decode("utf-8").rstrip("\n")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise SecretMissingError(
            f"{field}: Secret {secret.name!r} key {secret.key!r}: {exc}"
        ) from None
