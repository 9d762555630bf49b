"""What a call to the API server raises, apart from the client that makes the call: a module
that only catches `KubeError` (a reconcile run by `distributary run` too) does not load the
Kubernetes client."""

from __future__ import annotations

from distributary.errors import DistributaryError


class KubeError(DistributaryError, RuntimeError):
    """A call to the API server failed; the message names the object and what to do. `status`
    is the HTTP status when the server answered (None when it could not be reached)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
