"""The DerivedView controller: kopf's handlers of views.

A view's reconcile is `reconcile.view`, driven as `handling.py` says.
"""

from __future__ import annotations

from typing import Any

import kopf

from distributary.controllers.handling import handle
from distributary.controllers.indexes import GROUP, VERSION


@kopf.on.resume(GROUP, VERSION, "derivedviews")
@kopf.on.create(GROUP, VERSION, "derivedviews")
@kopf.on.update(GROUP, VERSION, "derivedviews", field="spec")
async def reconcile(body: kopf.Body, memo: kopf.Memo, old: Any = None, **found: Any) -> None:
    """Reconcile a view on every change (an update's previous spec classifies the edit)."""
    await handle("DerivedView", body, memo, old, found)
