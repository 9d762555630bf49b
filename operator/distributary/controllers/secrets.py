"""Secrets as Sources read them under the operator: a key's value from the API server
(`backends.secrets`), or a message that names the field and the fix."""

from __future__ import annotations

from distributary.api.source import SecretKey
from distributary.backends.base import SecretMissingError
from distributary.backends.secrets import api_secret
from distributary.controllers.services import OperatorServices

__all__ = ["SecretMissingError", "secret_value"]


def secret_value(services: OperatorServices, namespace: str, secret: SecretKey, field: str) -> str:
    """The value of a Secret's key, read from the API server; SecretMissingError naming the field
    and the fix when the Secret or the key is missing."""
    return api_secret(services.kube, namespace, secret, field)
