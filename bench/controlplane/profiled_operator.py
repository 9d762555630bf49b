"""`distributary operator` under cProfile, for `bench/controlplane --profile FILE`.

`python -m cProfile` writes its statistics only when the program ends by itself, and an operator
under load may not finish its handlers within the grace period of a SIGTERM. So the profiler is
started here, and SIGUSR1 stops it and writes the statistics to FILE, while the operator runs on.
cProfile sees the main thread only: the event loop, where kopf's handlers and the planners run;
blocking calls handed to threads (Kafka, the Kubernetes client) show as time waited there.

Usage: python profiled_operator.py FILE operator --bootstrap-servers ... (the CLI's arguments).
"""

from __future__ import annotations

import cProfile
import os
import runpy
import signal
import sys
from types import FrameType


def main() -> None:
    """Profile the CLI until SIGUSR1."""
    target, arguments = sys.argv[1], sys.argv[2:]
    profiler = cProfile.Profile()

    def write(signum: int, frame: FrameType | None) -> None:
        profiler.disable()
        profiler.dump_stats(f"{target}.part")
        os.replace(f"{target}.part", target)  # whole or absent: the benchmark waits for it

    signal.signal(signal.SIGUSR1, write)
    sys.argv = ["distributary", *arguments]
    profiler.enable()
    runpy.run_module("distributary.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
