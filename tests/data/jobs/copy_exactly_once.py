"""A StreamJob's own code with two queries, as a user writes it.

`copies` reads the clicks with `read_json` and writes them with `job.write` (exactly once: the
batch, its dead letters and its position in one Kafka transaction). `visits` copies another log
with `delivery="AtLeastOnce"` (Spark's Kafka sink), so its dead letters are sent by the position
tracker after each batch.
"""

from pyspark.sql import functions as fn

from distributary.streamjob import StreamJobContext

job = StreamJobContext.from_environment()
spark = job.session()
clicks = job.read_json(spark, "ejo-clicks")
copies = clicks.select("user", "n", (fn.col("n") * 10).alias("tens"))
job.write(copies, "ejo-copies", "copies").trigger(processingTime="500 milliseconds").start()
visits = job.read_json(spark, "ejo-visits")
writer = job.write(visits, "ejo-visit-copies", "visits", delivery="AtLeastOnce")
writer.trigger(processingTime="500 milliseconds").start()
job.run(spark)
