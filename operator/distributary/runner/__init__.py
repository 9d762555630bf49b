"""The Spark-side program: one generic runner for every derived view.

`python -m distributary.runner --spec FILE` (or spark-submit of the job image's runner file) reads
runner specs made by the planners and runs each as a streaming query in one Spark application:
read the input topics, parse their JSON with the declared schema, run the view's SQL, write the
output topic, checkpoint, send unparseable records to the view's dead-letter topic, mirror the
position into the revision's consumer group and publish progress. The runner decides nothing the
planners could: names, options and positions all come from the spec.
"""
