"""What a StreamJob's own PySpark code uses to read, write and report its position.

The operator runs a job with its facts in the environment (`DISTRIBUTARY_*`: topics, bootstrap
servers, checkpoint, consumer group, dead-letter topic, revision). This package turns them into
Spark readers and writers, and reports the job's position like a view's: after every micro-batch
of every query, the batch's end offsets of the job's inputs are committed to the revision's
consumer group (so status, `kafka-consumer-groups` and the lag metrics show where the job is)
and its progress is published. The commit follows Spark's own checkpoint, so the group never
claims more than was processed.

    from distributary.streamjob import StreamJobContext

    job = StreamJobContext.from_environment()
    spark = job.session("my-job")
    events = job.read_json(spark, "page-views", "user STRING, url STRING")
    query = job.write(events.groupBy("user").count(), "views-per-user", "counts").start()
    job.run()

`read_json` parses as a view does: a record that is not JSON or does not match the schema is no
row; it is counted by an observed metric per input (named as a view's, `runner.query.metric_name`)
and reaches the job's dead-letter topic unchanged, with a view's dead-letter headers
(`distributary.job` names the job where a view's name `distributary.view`).

`write` writes exactly once (`delivery.py`): each micro-batch of the query, the dead letters of
the inputs it reads through `read_json`, and its end offsets go in one Kafka transaction
(`runner.exactly_once`, as a view's batches), under a transactional id and marker group of the
query's own, `distributary.<namespace>.<job>.r<N>.<query>`; the job's position group is committed
after it as before. `write(..., delivery="AtLeastOnce")` keeps Spark's Kafka sink; the dead
letters of such queries, and of any query the job writes some other way, are sent by the
tracker after each batch, at least once (`tracker.py`). Every count rides in Kafka, so it
survives restarts, and their sum is published with the job's progress.

A job that starts on a fresh checkpoint (a new revision, a rewind) starts from its consumer group's
committed offsets where the group has some, else from each input's starting position.
"""

from distributary.streamjob.context import Delivery, StreamJobContext, StreamJobError
from distributary.streamjob.tracker import track

__all__ = ["Delivery", "StreamJobContext", "StreamJobError", "track"]
