"""`python -m distributary.cli`: the `distributary` command without its console script."""

from __future__ import annotations

import sys

from distributary.cli import main

sys.exit(main())
