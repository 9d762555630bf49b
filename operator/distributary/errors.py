"""The one base of Distributary's errors, so a command can tell a person's mistake from a bug.

Every module that can fail because of what a person gave it (a file, a spec, a flag, a state
folder, a cluster it cannot reach) raises a subclass of `DistributaryError` whose message already
says what is wrong and what to do. The command line reports those as one line and exit status 1;
anything else escaping a command is a bug in Distributary and keeps its traceback. Each subclass
keeps a second, built-in base (ValueError, RuntimeError) so `except` clauses written against
those still catch it. This module imports nothing, so every layer may use it.
"""

from __future__ import annotations


class DistributaryError(Exception):
    """The base of every error a user can cause or fix; its message is one line naming what is
    wrong and what to do."""
