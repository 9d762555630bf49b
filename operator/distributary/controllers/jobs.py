"""The StreamJob controller: kopf's handlers of jobs, around the one reconcile.

What a job's reconcile does is `reconcile.job`'s, shared with `distributary run`; the operator
drives it as `handling.py` says.
"""

from __future__ import annotations

from typing import Any

import kopf

from distributary.controllers.handling import handle
from distributary.controllers.indexes import GROUP, VERSION


@kopf.on.resume(GROUP, VERSION, "streamjobs")
@kopf.on.create(GROUP, VERSION, "streamjobs")
@kopf.on.update(GROUP, VERSION, "streamjobs", field="spec")
async def reconcile(body: kopf.Body, memo: kopf.Memo, old: Any = None, **found: Any) -> None:
    """Reconcile a job on every change."""
    await handle("StreamJob", body, memo, old, found)
