"""The operator image's build check: the command the chart runs and the controllers it loads
import, and pyspark is not in the image."""

import importlib.util
import sys

import distributary.cli
import distributary.controllers.logs
import distributary.controllers.views  # noqa: F401

loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("pyspark", "py4j"))
assert not loaded, f"the operator imports {loaded}"
assert importlib.util.find_spec("pyspark") is None, "pyspark is in the operator image"
