"""`distributary operator`: the operator itself, a command like the others.

The command lives with the controllers it starts (`controllers.main`); it is named here so that
every command of `distributary` has a module in this package.
"""

from __future__ import annotations

from distributary.controllers.main import operator

__all__ = ["operator"]
