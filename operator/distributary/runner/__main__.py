"""Entry point: `python -m distributary.runner --spec FILE [--spec FILE ...] | --spec-json JSON`."""

from __future__ import annotations

import sys

from distributary.runner.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
