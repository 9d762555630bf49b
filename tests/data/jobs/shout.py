"""A StreamJob's own PySpark code, as a user writes it: read a log, transform, write a log.

It upper-cases each click's URL and appends `--suffix`; `distributary.streamjob` reads and writes
the Logs the job names and reports the job's position after every micro-batch.
"""

import argparse

from pyspark.sql import functions as fn

from distributary.streamjob import StreamJobContext

parser = argparse.ArgumentParser()
parser.add_argument("--suffix", default="")
args = parser.parse_args()

job = StreamJobContext.from_environment()
spark = job.session()
clicks = job.read_json(spark, "lj-clicks")
shouts = clicks.select("user", fn.concat(fn.upper("url"), fn.lit(args.suffix)).alias("url"))
job.write(shouts, "lj-shouts", "shouts").trigger(processingTime="500 milliseconds").start()
job.run(spark)
