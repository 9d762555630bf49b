"""Secrets as Sources and Sinks read them: a key's value from the API server, or a message that
names the field and the fix."""

from __future__ import annotations

import base64
import binascii

from distributary.api.source import SecretKey
from distributary.controllers.services import OperatorServices


class SecretMissingError(Exception):
    """A Secret (or its key) the resource names is not there; the message says which and how."""


def secret_value(services: OperatorServices, namespace: str, secret: SecretKey, field: str) -> str:
    """The value of a Secret's key, read from the API server; SecretMissingError naming the field
    and the fix when the Secret or the key is missing."""
    found = services.kube.get("v1", "Secret", namespace, secret.name)
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
