"""`python -m distributary.sinks --spec FILE`: one Sink's process."""

import sys

from distributary.sinks.main import main

sys.exit(main())
