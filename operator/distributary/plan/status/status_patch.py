"""Status as the API server keeps it: a JSON merge patch applied, and whether one changes it.

The operator writes status as merge patches onto the status subresource; `distributary run`
writes the same patches into its state folder. Both need to know the status a patch leaves
behind (to write only what changes something), and it must be the API server's rule, so the
two front ends agree (JSON merge patch, RFC 7386): None deletes a field, mappings merge (a
mapping where there was none is merged into an empty one, so its None fields are left out too),
anything else replaces.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merged(status: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """`status` after the merge patch `update`."""
    result = dict(status)
    for key, value in update.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, Mapping):
            before = result.get(key)
            result[key] = merged(before if isinstance(before, Mapping) else {}, value)
        else:
            result[key] = value
    return result


def changes(before: Mapping[str, Any], update: Mapping[str, Any]) -> bool:
    """Whether the merge patch `update` would change `before`."""
    return merged(before, update) != dict(before)
