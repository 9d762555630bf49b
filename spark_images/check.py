"""The job image's build check, run as its user: Spark is the pinned pyspark, the Kafka connector,
Kubernetes' scheduler and Distributary's JVM operators are among its jars, and the runner
imports."""

import glob
import os
import sys

import pyspark

import distributary.runner.__main__  # noqa: F401

spark_version, scala_binary = sys.argv[1:3]
assert pyspark.__version__ == spark_version, pyspark.__version__
jars = os.path.join(os.environ["SPARK_HOME"], "jars")
connector = f"spark-sql-kafka-0-10_{scala_binary}-{spark_version}.jar"
assert os.path.exists(os.path.join(jars, connector)), connector
assert glob.glob(os.path.join(jars, f"spark-kubernetes_{scala_binary}-*.jar")), "no spark-kubernetes"
assert os.path.exists(os.path.join(jars, "distributary-operators.jar")), "no operators jar"
