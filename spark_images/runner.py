"""The job image's entry point: `python -m distributary.runner` under spark-submit."""

import runpy

runpy.run_module("distributary.runner", run_name="__main__", alter_sys=True)
