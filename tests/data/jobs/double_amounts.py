"""A StreamJob's own PySpark code: each event of `su-events` copied with its amount doubled into
`su-doubled` (exactly once, `job.write`'s default)."""

from pyspark.sql import functions as fn

from distributary.streamjob import StreamJobContext

job = StreamJobContext.from_environment()
spark = job.session()
events = job.read_json(spark, "su-events")
doubled = events.select("id", "user", (fn.col("amount") * 2).alias("amount"))
job.write(doubled, "su-doubled", "doubled").trigger(processingTime="1 second").start()
job.run(spark)
