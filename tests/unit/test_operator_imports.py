"""The operator's process loads no database driver until a Source needs one: the drivers of
PostgreSQL and Redis (15 MB) had brought the operator's peak over 200 MB in `bench/controlplane`.
Loaded in a process of its own, as `distributary operator` loads it."""

from __future__ import annotations

import subprocess
import sys


def test_the_operator_loads_no_database_driver() -> None:
    code = (
        "import sys, distributary.cli, distributary.controllers.main; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'psycopg', 'redis'}))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert found.stdout.strip() == "[]"
